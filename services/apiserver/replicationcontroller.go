// This file holds what the API service does with core/v1
// ReplicationControllers beyond the generic registry: Kubernetes' defaults
// (selector and labels from the template, one replica) and its validation,
// with the field paths and messages kube-apiserver v1.33.13 answers with.
package apiserver

import (
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// defaultReplicationController is Kubernetes' SetDefaults_ReplicationController
// and the declarative replicas default: an empty selector becomes the
// template's labels, and so do empty object labels; replicas is 1.
func defaultReplicationController(o *corev1.ReplicationController) {
	if o.Spec == nil {
		o.Spec = &corev1.ReplicationControllerSpec{}
	}
	s := o.Spec
	if s.Replicas == nil {
		s.Replicas = proto.Int32(1)
	}
	if s.Template == nil {
		return // spec.template is required: validation says so
	}
	if tl := s.Template.GetMetadata().GetLabels(); tl != nil {
		if len(s.Selector) == 0 {
			s.Selector = maps(tl)
		}
		if m := meta(o); len(m.GetLabels()) == 0 {
			m.Labels = maps(tl)
		}
	}
	if s.Template.Spec == nil {
		s.Template.Spec = &corev1.PodSpec{}
	}
	defaultPodSpec(s.Template.Spec)
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// validateReplicationController is Kubernetes' ValidateReplicationControllerSpec
// (the same on create and update: an RC's selector may change).
func validateReplicationController(o *corev1.ReplicationController) field.ErrorList {
	var errs field.ErrorList
	s, p := o.GetSpec(), field.NewPath("spec")
	if s.GetMinReadySeconds() < 0 {
		errs = append(errs, field.Invalid(p.Child("minReadySeconds"), int64(s.GetMinReadySeconds()), "must be greater than or equal to 0"))
	}
	sel := labels.Set(s.GetSelector()).AsSelector()
	errs = append(errs, validateLabels(s.GetSelector(), p.Child("selector"))...)
	if sel.Empty() {
		errs = append(errs, field.Required(p.Child("selector"), ""))
	}
	if s.Replicas == nil {
		errs = append(errs, field.Required(p.Child("replicas"), ""))
	} else if *s.Replicas < 0 {
		errs = append(errs, field.Invalid(p.Child("replicas"), int64(*s.Replicas), "must be greater than or equal to 0"))
	}
	t, tp := s.GetTemplate(), p.Child("template")
	if t == nil {
		return append(errs, field.Required(tp, ""))
	}
	if !sel.Empty() && !sel.Matches(labels.Set(t.GetMetadata().GetLabels())) {
		errs = append(errs, field.Invalid(tp.Child("metadata", "labels"), t.GetMetadata().GetLabels(), "`selector` does not match template `labels`"))
	}
	errs = append(errs, validateLabels(t.GetMetadata().GetLabels(), tp.Child("metadata", "labels"))...)
	errs = append(errs, validatePodSpec(t.GetSpec(), tp.Child("spec"))...)
	if rp := t.GetSpec().GetRestartPolicy(); rp != "Always" {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), rp, []string{"Always"}))
	}
	if t.GetSpec().ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Forbidden(tp.Child("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in ReplicationController is not Supported"))
	}
	return errs
}

// validateReplicationControllerStatus is Kubernetes'
// ValidateReplicationControllerStatus: no negative counts, none above
// status.replicas, available not above ready.
func validateReplicationControllerStatus(st *corev1.ReplicationControllerStatus, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, c := range []struct {
		name string
		v    int64
	}{
		{"replicas", int64(st.GetReplicas())},
		{"fullyLabeledReplicas", int64(st.GetFullyLabeledReplicas())},
		{"readyReplicas", int64(st.GetReadyReplicas())},
		{"availableReplicas", int64(st.GetAvailableReplicas())},
		{"observedGeneration", st.GetObservedGeneration()},
	} {
		if c.v < 0 {
			errs = append(errs, field.Invalid(p.Child(c.name), c.v, "must be greater than or equal to 0"))
		}
	}
	const msg = "cannot be greater than status.replicas"
	if st.GetFullyLabeledReplicas() > st.GetReplicas() {
		errs = append(errs, field.Invalid(p.Child("fullyLabeledReplicas"), st.GetFullyLabeledReplicas(), msg))
	}
	if st.GetReadyReplicas() > st.GetReplicas() {
		errs = append(errs, field.Invalid(p.Child("readyReplicas"), st.GetReadyReplicas(), msg))
	}
	if st.GetAvailableReplicas() > st.GetReplicas() {
		errs = append(errs, field.Invalid(p.Child("availableReplicas"), st.GetAvailableReplicas(), msg))
	}
	if st.GetAvailableReplicas() > st.GetReadyReplicas() {
		errs = append(errs, field.Invalid(p.Child("availableReplicas"), st.GetAvailableReplicas(), "cannot be greater than readyReplicas"))
	}
	return errs
}
