// This file holds what the API service does with apps/v1 DaemonSets and
// ControllerRevisions beyond the generic registry: Kubernetes' defaults,
// its create and update strategy (status reset, template generation), and
// its validation, with the field paths, values and messages kube-apiserver
// v1.33.13 answers with.
package apiserver

import (
	"encoding/json"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubeconv"
)

// templateGenerationAnnotation is where apps/v1 keeps the DaemonSet's
// template generation (a field of the internal type only): 1 on create,
// one more on every update that changes the template.
const templateGenerationAnnotation = "deprecated.daemonset.template.generation"

// defaultDaemonSet is Kubernetes' SetDefaults_DaemonSet: RollingUpdate
// with maxUnavailable 1 and maxSurge 0, ten revisions kept, and the pod
// template's defaults.
func defaultDaemonSet(o *appsv1.DaemonSet) {
	if o.Spec == nil {
		o.Spec = &appsv1.DaemonSetSpec{}
	}
	s := o.Spec
	if s.UpdateStrategy == nil {
		s.UpdateStrategy = &appsv1.DaemonSetUpdateStrategy{}
	}
	if s.UpdateStrategy.Type == "" {
		s.UpdateStrategy.Type = "RollingUpdate"
	}
	if s.UpdateStrategy.Type == "RollingUpdate" {
		if s.UpdateStrategy.RollingUpdate == nil {
			s.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		ru := s.UpdateStrategy.RollingUpdate
		if ru.MaxUnavailable == nil {
			ru.MaxUnavailable = &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 1}}
		}
		if ru.MaxSurge == nil {
			ru.MaxSurge = &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 0}}
		}
	}
	if s.RevisionHistoryLimit == nil {
		s.RevisionHistoryLimit = proto.Int32(10)
	}
	defaultTemplate(&s.Template)
}

// prepareDaemonSetCreate is the strategy's PrepareForCreate: the status
// starts empty and the template generation at 1 (or the client's, if
// higher, as Kubernetes keeps it).
func prepareDaemonSetCreate(o *appsv1.DaemonSet) {
	o.Status = &appsv1.DaemonSetStatus{}
	m := meta(o)
	gen, err := strconv.ParseInt(m.GetAnnotations()[templateGenerationAnnotation], 10, 64)
	if err != nil || gen < 1 {
		gen = 1
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[templateGenerationAnnotation] = strconv.FormatInt(gen, 10)
}

// prepareDaemonSetUpdate is the strategy's PrepareForUpdate for the
// template generation: the client cannot set it; a changed template bumps
// it. (generation is bumped by prepareForUpdate on any spec change.)
func prepareDaemonSetUpdate(o, old *appsv1.DaemonSet) {
	m := meta(o)
	gen, err := strconv.ParseInt(meta(old).GetAnnotations()[templateGenerationAnnotation], 10, 64)
	if err != nil {
		gen = 0
	}
	if !proto.Equal(o.GetSpec().GetTemplate(), old.GetSpec().GetTemplate()) {
		gen++
	}
	if gen == 0 {
		delete(m.Annotations, templateGenerationAnnotation)
		return
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[templateGenerationAnnotation] = strconv.FormatInt(gen, 10)
}

// validateDaemonSet is Kubernetes' ValidateDaemonSetSpec and, on update,
// the selector's immutability (apps/v1).
func validateDaemonSet(o, old *appsv1.DaemonSet) field.ErrorList {
	var errs field.ErrorList
	s, p := o.GetSpec(), field.NewPath("spec")
	sel := s.GetSelector()
	if sel != nil {
		errs = append(errs, validateLabels(sel.GetMatchLabels(), p.Child("selector", "matchLabels"))...)
	}
	t := s.GetTemplate()
	if selector, err := kubeconv.Selector(sel); err != nil {
		errs = append(errs, field.Invalid(p.Child("selector"), kubeconv.LabelSelector(sel), err.Error()))
	} else if !selector.Matches(labels.Set(t.GetMetadata().GetLabels())) {
		errs = append(errs, field.Invalid(p.Child("template", "metadata", "labels"), t.GetMetadata().GetLabels(), "`selector` does not match template `labels`"))
	}
	if sel != nil && len(sel.GetMatchLabels())+len(sel.GetMatchExpressions()) == 0 {
		errs = append(errs, field.Invalid(p.Child("selector"), kubeconv.LabelSelector(sel), "empty selector is invalid for daemonset"))
	}
	tp := p.Child("template")
	errs = append(errs, validateLabels(t.GetMetadata().GetLabels(), tp.Child("metadata", "labels"))...)
	errs = append(errs, validatePodSpec(t.GetSpec(), tp.Child("spec"))...)
	if rp := t.GetSpec().GetRestartPolicy(); rp != "Always" {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), rp, []string{"Always"}))
	}
	if t.GetSpec().ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Forbidden(tp.Child("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in DaemonSet is not Supported"))
	}
	if s.GetMinReadySeconds() < 0 {
		errs = append(errs, field.Invalid(p.Child("minReadySeconds"), int64(s.GetMinReadySeconds()), "must be greater than or equal to 0"))
	}
	errs = append(errs, validateDaemonSetUpdateStrategy(s.GetUpdateStrategy(), p.Child("updateStrategy"))...)
	if l := s.RevisionHistoryLimit; l != nil && *l < 0 {
		errs = append(errs, field.Invalid(p.Child("revisionHistoryLimit"), int64(*l), "must be greater than or equal to 0"))
	}
	if old != nil && !proto.Equal(sel, old.GetSpec().GetSelector()) {
		errs = append(errs, field.Invalid(p.Child("selector"), kubeconv.LabelSelector(sel), "field is immutable"))
	}
	return errs
}

// validateDaemonSetUpdateStrategy is Kubernetes' ValidateDaemonSetUpdateStrategy.
func validateDaemonSetUpdateStrategy(s *appsv1.DaemonSetUpdateStrategy, p *field.Path) field.ErrorList {
	switch s.GetType() {
	case "OnDelete":
		return nil
	case "RollingUpdate":
		ru := s.GetRollingUpdate()
		if ru == nil {
			return field.ErrorList{field.Required(p.Child("rollingUpdate"), "")}
		}
		rp := p.Child("rollingUpdate")
		unavail, surge := kubeconv.IntOrString(ru.GetMaxUnavailable()), kubeconv.IntOrString(ru.GetMaxSurge())
		var errs field.ErrorList
		errs = append(errs, validatePositiveIntOrPercent(unavail, rp.Child("maxUnavailable"))...)
		errs = append(errs, validatePositiveIntOrPercent(surge, rp.Child("maxSurge"))...)
		errs = append(errs, notMoreThan100Percent(unavail, rp.Child("maxUnavailable"))...)
		errs = append(errs, notMoreThan100Percent(surge, rp.Child("maxSurge"))...)
		hasUnavailable, hasSurge := intOrPercentValue(unavail) != 0, intOrPercentValue(surge) != 0
		switch {
		case hasUnavailable && hasSurge:
			errs = append(errs, field.Invalid(rp.Child("maxSurge"), surge, "may not be set when maxUnavailable is non-zero"))
		case !hasUnavailable && !hasSurge:
			errs = append(errs, field.Required(rp.Child("maxUnavailable"), "cannot be 0 when maxSurge is 0"))
		}
		return errs
	}
	return field.ErrorList{field.NotSupported(p, daemonSetStrategyValue{s}, []string{"RollingUpdate", "OnDelete"})}
}

// daemonSetStrategyValue prints an unsupported update strategy as
// kube-apiserver does (Go syntax of its internal type).
type daemonSetStrategyValue struct {
	s *appsv1.DaemonSetUpdateStrategy
}

func (v daemonSetStrategyValue) String() string {
	ru := "(*apps.RollingUpdateDaemonSet)(nil)"
	if r := v.s.GetRollingUpdate(); r != nil {
		ru = fmt.Sprintf("(*apps.RollingUpdateDaemonSet)(%#v)", struct {
			MaxUnavailable, MaxSurge intstr.IntOrString
		}{kubeconv.IntOrString(r.GetMaxUnavailable()), kubeconv.IntOrString(r.GetMaxSurge())})
	}
	return fmt.Sprintf("apps.DaemonSetUpdateStrategy{Type:%q, RollingUpdate:%s}", v.s.GetType(), ru)
}

// validateControllerRevision is Kubernetes' ControllerRevision validation:
// a non-negative revision, data a JSON object on create, data immutable.
func validateControllerRevision(o, old *appsv1.ControllerRevision) field.ErrorList {
	var errs field.ErrorList
	if o.GetRevision() < 0 {
		errs = append(errs, field.Invalid(field.NewPath("revision"), o.GetRevision(), "must be greater than or equal to 0"))
	}
	if old != nil {
		if !proto.Equal(o.GetData(), old.GetData()) {
			errs = append(errs, field.Invalid(field.NewPath("data"), "<value omitted>", "field is immutable"))
		}
		return errs
	}
	var v any
	raw := o.GetData().GetRaw()
	switch err := json.Unmarshal(raw, &v); {
	case raw == nil:
		errs = append(errs, field.Required(field.NewPath("data"), "data is mandatory"))
	case err != nil:
		errs = append(errs, field.Invalid(field.NewPath("data"), "<value omitted>", "error parsing data: "+err.Error()))
	case v == nil:
		errs = append(errs, field.Required(field.NewPath("data"), "data is mandatory"))
	default:
		if _, ok := v.(map[string]any); !ok {
			errs = append(errs, field.Required(field.NewPath("data"), "data must be a valid JSON object"))
		}
	}
	return errs
}

// validateDaemonSetStatus is Kubernetes' ValidateDaemonSetStatusUpdate's
// checks of the counts: none negative, collisionCount never decremented.
func validateDaemonSetStatus(o *appsv1.DaemonSet, old proto.Message) field.ErrorList {
	var errs field.ErrorList
	st, p := o.GetStatus(), field.NewPath("status")
	for _, c := range []struct {
		name string
		v    int64
	}{
		{"currentNumberScheduled", int64(st.GetCurrentNumberScheduled())},
		{"numberMisscheduled", int64(st.GetNumberMisscheduled())},
		{"desiredNumberScheduled", int64(st.GetDesiredNumberScheduled())},
		{"numberReady", int64(st.GetNumberReady())},
		{"observedGeneration", st.GetObservedGeneration()},
		{"updatedNumberScheduled", int64(st.GetUpdatedNumberScheduled())},
		{"numberAvailable", int64(st.GetNumberAvailable())},
		{"numberUnavailable", int64(st.GetNumberUnavailable())},
	} {
		if c.v < 0 {
			errs = append(errs, field.Invalid(p.Child(c.name), c.v, "must be greater than or equal to 0"))
		}
	}
	if st.CollisionCount != nil && *st.CollisionCount < 0 {
		errs = append(errs, field.Invalid(p.Child("collisionCount"), int64(*st.CollisionCount), "must be greater than or equal to 0"))
	}
	if o2, ok := old.(*appsv1.DaemonSet); ok && o2.GetStatus().CollisionCount != nil {
		if st.CollisionCount == nil || *st.CollisionCount < *o2.GetStatus().CollisionCount {
			errs = append(errs, field.Invalid(p.Child("collisionCount"), st.GetCollisionCount(), "cannot be decremented"))
		}
	}
	return errs
}
