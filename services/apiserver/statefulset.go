// This file holds what the API service does with apps/v1 StatefulSets
// beyond the generic registry: Kubernetes' defaults, its create and update
// strategy (status reset, fields of disabled feature gates dropped) and its
// validation, with the field paths and messages kube-apiserver v1.33.13
// answers with.
package apiserver

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	"github.com/kplane/kplane/proto/kubeconv"
)

// defaultStatefulSet is Kubernetes' SetDefaults_StatefulSet with v1.33's
// default feature gates (StatefulSetAutoDeletePVC on, MaxUnavailableStatefulSet
// off): OrderedReady, RollingUpdate with partition 0, both retention
// policies Retain, one replica, ten revisions; the pod template's and the
// claim templates' own defaults.
func defaultStatefulSet(o *appsv1.StatefulSet) {
	if o.Spec == nil {
		o.Spec = &appsv1.StatefulSetSpec{}
	}
	s := o.Spec
	if s.PodManagementPolicy == "" {
		s.PodManagementPolicy = "OrderedReady"
	}
	if s.UpdateStrategy == nil {
		s.UpdateStrategy = &appsv1.StatefulSetUpdateStrategy{}
	}
	if s.UpdateStrategy.Type == "" {
		s.UpdateStrategy.Type = "RollingUpdate"
		if s.UpdateStrategy.RollingUpdate == nil {
			s.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
		}
	}
	if ru := s.UpdateStrategy.RollingUpdate; s.UpdateStrategy.Type == "RollingUpdate" && ru != nil && ru.Partition == nil {
		ru.Partition = proto.Int32(0)
	}
	if s.PersistentVolumeClaimRetentionPolicy == nil {
		s.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{}
	}
	if rp := s.PersistentVolumeClaimRetentionPolicy; rp.WhenDeleted == "" {
		rp.WhenDeleted = "Retain"
	}
	if rp := s.PersistentVolumeClaimRetentionPolicy; rp.WhenScaled == "" {
		rp.WhenScaled = "Retain"
	}
	if s.Replicas == nil {
		s.Replicas = proto.Int32(1)
	}
	if s.RevisionHistoryLimit == nil {
		s.RevisionHistoryLimit = proto.Int32(10)
	}
	defaultTemplate(&s.Template)
	for _, c := range s.VolumeClaimTemplates {
		defaultPersistentVolumeClaim(c)
		// As apps/v1's conversion writes them on every claim template.
		c.ApiVersion, c.Kind = "v1", "PersistentVolumeClaim"
	}
}

// prepareStatefulSet is the strategy's PrepareForCreate and
// PrepareForUpdate for the fields of disabled gates: with
// MaxUnavailableStatefulSet off (v1.33's default) maxUnavailable is dropped
// unless the stored object already has it, so a rolling update replaces one
// pod at a time.
func prepareStatefulSet(o, old *appsv1.StatefulSet) {
	if old == nil {
		o.Status = &appsv1.StatefulSetStatus{}
	}
	if old.GetSpec().GetUpdateStrategy().GetRollingUpdate().GetMaxUnavailable() != nil {
		return
	}
	if ru := o.GetSpec().GetUpdateStrategy().GetRollingUpdate(); ru != nil {
		ru.MaxUnavailable = nil
	}
}

// validateStatefulSet is Kubernetes' ValidateStatefulSet and, on update,
// ValidateStatefulSetUpdate (apps/v1). As in v1.33, the pod template's
// spec is not validated here: its pods are, when the controller creates
// them.
func validateStatefulSet(o, old *appsv1.StatefulSet) field.ErrorList {
	var errs field.ErrorList
	s, p := o.GetSpec(), field.NewPath("spec")
	switch pmp := s.GetPodManagementPolicy(); pmp {
	case "":
		errs = append(errs, field.Required(p.Child("podManagementPolicy"), ""))
	case "OrderedReady", "Parallel":
	default:
		errs = append(errs, field.Invalid(p.Child("podManagementPolicy"), pmp, "must be 'OrderedReady' or 'Parallel'"))
	}
	us := s.GetUpdateStrategy()
	switch us.GetType() {
	case "":
		errs = append(errs, field.Required(p.Child("updateStrategy"), ""))
	case "OnDelete":
		if us.GetRollingUpdate() != nil {
			errs = append(errs, field.Invalid(p.Child("updateStrategy", "rollingUpdate"), rollingUpdateValue{us.GetRollingUpdate()}, "only allowed for updateStrategy 'RollingUpdate'"))
		}
	case "RollingUpdate":
		if ru := us.GetRollingUpdate(); ru != nil {
			rp := p.Child("updateStrategy", "rollingUpdate")
			if ru.GetPartition() < 0 {
				errs = append(errs, field.Invalid(rp.Child("partition"), int64(ru.GetPartition()), "must be greater than or equal to 0"))
			}
			if ru.MaxUnavailable != nil {
				mu := kubeconv.IntOrString(ru.MaxUnavailable)
				errs = append(errs, validatePositiveIntOrPercent(mu, rp.Child("maxUnavailable"))...)
				if intOrPercentValue(mu) == 0 {
					errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), mu, "cannot be 0"))
				}
				errs = append(errs, notMoreThan100Percent(mu, rp.Child("maxUnavailable"))...)
			}
		}
	default:
		errs = append(errs, field.Invalid(p.Child("updateStrategy"), strategyValue{us}, "must be 'RollingUpdate' or 'OnDelete'"))
	}
	if rp := s.GetPersistentVolumeClaimRetentionPolicy(); rp != nil {
		errs = append(errs, validateEnum(rp.GetWhenDeleted(), p.Child("persistentVolumeClaimRetentionPolicy", "whenDeleted"), false, "Retain", "Delete")...)
		errs = append(errs, validateEnum(rp.GetWhenScaled(), p.Child("persistentVolumeClaimRetentionPolicy", "whenScaled"), false, "Retain", "Delete")...)
	}
	if s.GetReplicas() < 0 {
		errs = append(errs, field.Invalid(p.Child("replicas"), int64(s.GetReplicas()), "must be greater than or equal to 0"))
	}
	if s.GetMinReadySeconds() < 0 {
		errs = append(errs, field.Invalid(p.Child("minReadySeconds"), int64(s.GetMinReadySeconds()), "must be greater than or equal to 0"))
	}
	if s.Ordinals != nil && s.Ordinals.GetStart() < 0 {
		errs = append(errs, field.Invalid(p.Child("ordinals.start"), int64(s.Ordinals.GetStart()), "must be greater than or equal to 0"))
	}
	// An existing set may keep a service name that was accepted once:
	// serviceName is immutable.
	if n := s.GetServiceName(); old == nil && n != "" {
		for _, msg := range validation.IsDNS1123Label(n) {
			errs = append(errs, field.Invalid(p.Child("serviceName"), n, msg))
		}
	}
	sel := s.GetSelector()
	if sel == nil {
		errs = append(errs, field.Required(p.Child("selector"), ""))
	} else {
		errs = append(errs, validateLabels(sel.GetMatchLabels(), p.Child("selector", "matchLabels"))...)
		if len(sel.GetMatchLabels())+len(sel.GetMatchExpressions()) == 0 {
			errs = append(errs, field.Invalid(p.Child("selector"), kubeconv.LabelSelector(sel), "empty selector is invalid for statefulset"))
		}
	}
	t := s.GetTemplate()
	if selector, err := kubeconv.Selector(sel); err != nil {
		errs = append(errs, field.Invalid(p.Child("selector"), kubeconv.LabelSelector(sel), ""))
	} else if !selector.Empty() && !selector.Matches(labels.Set(t.GetMetadata().GetLabels())) {
		errs = append(errs, field.Invalid(p.Child("template", "metadata", "labels"), t.GetMetadata().GetLabels(), "`selector` does not match template `labels`"))
	}
	errs = append(errs, validateLabels(t.GetMetadata().GetLabels(), p.Child("template", "labels"))...)
	if rp := t.GetSpec().GetRestartPolicy(); rp != "Always" {
		errs = append(errs, field.NotSupported(p.Child("template", "spec", "restartPolicy"), rp, []string{"Always"}))
	}
	if t.GetSpec().ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Forbidden(p.Child("template", "spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in StatefulSet is not Supported"))
	}
	if old == nil {
		return errs
	}
	// Everything but replicas, template, updateStrategy, minReadySeconds,
	// ordinals, revisionHistoryLimit and the retention policy is fixed.
	a, b := proto.Clone(s).(*appsv1.StatefulSetSpec), proto.Clone(old.GetSpec()).(*appsv1.StatefulSetSpec)
	for _, x := range []*appsv1.StatefulSetSpec{a, b} {
		x.Replicas, x.Template, x.UpdateStrategy, x.MinReadySeconds = nil, nil, nil, 0
		x.Ordinals, x.RevisionHistoryLimit, x.PersistentVolumeClaimRetentionPolicy = nil, nil, nil
	}
	if !proto.Equal(a, b) {
		errs = append(errs, field.Forbidden(p, "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"))
	}
	return errs
}

// validateStatefulSetStatus is Kubernetes' ValidateStatefulSetStatusUpdate's
// checks: no count negative or above status.replicas, available not above
// ready, collisionCount never decremented.
func validateStatefulSetStatus(o *appsv1.StatefulSet, old proto.Message) field.ErrorList {
	var errs field.ErrorList
	st, p := o.GetStatus(), field.NewPath("status")
	for _, c := range []struct {
		name string
		v    int32
	}{
		{"replicas", st.GetReplicas()}, {"readyReplicas", st.GetReadyReplicas()}, {"currentReplicas", st.GetCurrentReplicas()},
		{"updatedReplicas", st.GetUpdatedReplicas()}, {"availableReplicas", st.GetAvailableReplicas()},
	} {
		if c.v < 0 {
			errs = append(errs, field.Invalid(p.Child(c.name), int64(c.v), "must be greater than or equal to 0"))
		}
	}
	if st.GetObservedGeneration() < 0 {
		errs = append(errs, field.Invalid(p.Child("observedGeneration"), st.GetObservedGeneration(), "must be greater than or equal to 0"))
	}
	if st.CollisionCount != nil && *st.CollisionCount < 0 {
		errs = append(errs, field.Invalid(p.Child("collisionCount"), int64(*st.CollisionCount), "must be greater than or equal to 0"))
	}
	const above = "cannot be greater than status.replicas"
	for _, c := range []struct {
		name string
		v    int32
	}{
		{"readyReplicas", st.GetReadyReplicas()}, {"currentReplicas", st.GetCurrentReplicas()},
		{"updatedReplicas", st.GetUpdatedReplicas()}, {"availableReplicas", st.GetAvailableReplicas()},
	} {
		if c.v > st.GetReplicas() {
			errs = append(errs, field.Invalid(p.Child(c.name), c.v, above))
		}
	}
	if st.GetAvailableReplicas() > st.GetReadyReplicas() {
		errs = append(errs, field.Invalid(p.Child("availableReplicas"), st.GetAvailableReplicas(), "cannot be greater than status.readyReplicas"))
	}
	if o2, ok := old.(*appsv1.StatefulSet); ok && o2.GetStatus().CollisionCount != nil {
		if st.CollisionCount == nil || *st.CollisionCount < *o2.GetStatus().CollisionCount {
			errs = append(errs, field.Invalid(p.Child("collisionCount"), st.GetCollisionCount(), "cannot be decremented"))
		}
	}
	return errs
}

// rollingUpdateValue and strategyValue print a refused strategy as
// kube-apiserver does (Go syntax of its internal types).
type rollingUpdateValue struct {
	ru *appsv1.RollingUpdateStatefulSetStrategy
}

func (v rollingUpdateValue) String() string {
	mu := "(*intstr.IntOrString)(nil)"
	if v.ru.GetMaxUnavailable() != nil {
		mu = fmt.Sprintf("(*intstr.IntOrString)(%#v)", kubeconv.IntOrString(v.ru.GetMaxUnavailable()))
	}
	return fmt.Sprintf("apps.RollingUpdateStatefulSetStrategy{Partition:%d, MaxUnavailable:%s}", v.ru.GetPartition(), mu)
}

type strategyValue struct {
	s *appsv1.StatefulSetUpdateStrategy
}

func (v strategyValue) String() string {
	ru := "(*apps.RollingUpdateStatefulSetStrategy)(nil)"
	if r := v.s.GetRollingUpdate(); r != nil {
		ru = "(*apps.RollingUpdateStatefulSetStrategy)(&" + rollingUpdateValue{r}.String() + ")"
	}
	return fmt.Sprintf("apps.StatefulSetUpdateStrategy{Type:%q, RollingUpdate:%s}", v.s.GetType(), ru)
}
