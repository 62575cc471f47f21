// This file holds what the API service does beyond the generic registry
// with the kinds served at the storage level only (no controller acts on
// them in kplane, as in a bare Kubernetes without the add-on that would):
// core/v1 PodTemplate, networking.k8s.io/v1 Ingress, IngressClass and
// NetworkPolicy, node.k8s.io/v1 RuntimeClass. Kubernetes' defaults, its
// strategies' create and update rules, and its validation with the field
// paths and messages of kube-apiserver v1.33.13. The storage.k8s.io kinds
// are in kinds_storage.go.
package apiserver

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	flowcontrolv1 "github.com/kplane/kplane/proto/kplane/flowcontrol/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	networkingv1 "github.com/kplane/kplane/proto/kplane/networking/v1"
	nodev1 "github.com/kplane/kplane/proto/kplane/node/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
)

// goValue is a value printed in a message as Kubernetes prints one of its
// internal Go types (%#v), e.g. []networking.IngressRule(nil).
type goValue string

func (v goValue) String() string { return string(v) }

// defaultMoreKinds sets Kubernetes' defaults on the kinds of this file
// and kinds_storage.go; other objects are left alone.
func defaultMoreKinds(obj proto.Message) {
	switch o := obj.(type) {
	case *corev1.PodTemplate:
		defaultTemplate(&o.Template)
	case *networkingv1.NetworkPolicy:
		if o.Spec == nil {
			o.Spec = &networkingv1.NetworkPolicySpec{}
		}
		s := o.Spec
		if s.PodSelector == nil {
			s.PodSelector = &metav1.LabelSelector{}
		}
		for _, r := range s.Ingress {
			defaultPolicyPorts(r.GetPorts())
		}
		for _, r := range s.Egress {
			defaultPolicyPorts(r.GetPorts())
		}
		if len(s.PolicyTypes) == 0 {
			s.PolicyTypes = []string{"Ingress"}
			if len(s.Egress) > 0 {
				s.PolicyTypes = append(s.PolicyTypes, "Egress")
			}
		}
	case *networkingv1.IngressClass:
		if p := o.GetSpec().GetParameters(); p != nil && p.Scope == nil {
			p.Scope = proto.String("Cluster")
		}
	case *storagev1.CSIDriver:
		defaultCSIDriver(o)
	case *flowcontrolv1.FlowSchema:
		defaultFlowSchema(o)
	case *flowcontrolv1.PriorityLevelConfiguration:
		defaultPriorityLevel(o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		defaultHPA(o)
	}
}

func defaultPolicyPorts(ports []*networkingv1.NetworkPolicyPort) {
	for _, p := range ports {
		if p != nil && p.Protocol == nil {
			p.Protocol = proto.String("TCP")
		}
	}
}

// prepareMoreKinds is the strategies' PrepareForCreate (old nil) and
// PrepareForUpdate for these kinds, after the generic one.
func prepareMoreKinds(obj, old proto.Message) {
	prepareFlowControl(obj, old)
	switch o := obj.(type) {
	case *autoscalingv2.HorizontalPodAutoscaler:
		oh, _ := old.(*autoscalingv2.HorizontalPodAutoscaler)
		prepareHPA(o, oh)
	case *networkingv1.Ingress:
		if old == nil {
			o.Status = nil // create cannot set status
		}
	case *storagev1.VolumeAttachment:
		if old == nil {
			o.Status = nil
		}
	case *storagev1.CSIDriver:
		// MutableCSINodeAllocatableCount is off in v1.33: the field is
		// dropped unless the stored object already has it.
		if od, _ := old.(*storagev1.CSIDriver); (od.GetSpec() == nil || od.GetSpec().NodeAllocatableUpdatePeriodSeconds == nil) && o.Spec != nil {
			o.Spec.NodeAllocatableUpdatePeriodSeconds = nil
		}
	}
}

// validateMoreKinds is Kubernetes' validation of these kinds (old nil on
// create); the metadata is validateMeta's.
func validateMoreKinds(obj, old proto.Message) field.ErrorList {
	if errs := validateFlowControl(obj); errs != nil {
		return errs
	}
	switch o := obj.(type) {
	case *corev1.PodTemplate:
		return validatePodTemplate(o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		oh, _ := old.(*autoscalingv2.HorizontalPodAutoscaler)
		return validateHPA(o, oh)
	case *networkingv1.Ingress:
		oi, _ := old.(*networkingv1.Ingress)
		return validateIngress(o, oi)
	case *networkingv1.IngressClass:
		oc, _ := old.(*networkingv1.IngressClass)
		return validateIngressClass(o, oc)
	case *networkingv1.NetworkPolicy:
		return validateNetworkPolicy(o)
	case *nodev1.RuntimeClass:
		or, _ := old.(*nodev1.RuntimeClass)
		return validateRuntimeClass(o, or)
	case *storagev1.CSIDriver:
		od, _ := old.(*storagev1.CSIDriver)
		return validateCSIDriver(o, od)
	case *storagev1.CSINode:
		on, _ := old.(*storagev1.CSINode)
		return validateCSINode(o, on)
	case *storagev1.VolumeAttachment:
		ov, _ := old.(*storagev1.VolumeAttachment)
		return validateVolumeAttachment(o, ov)
	case *storagev1.CSIStorageCapacity:
		oc, _ := old.(*storagev1.CSIStorageCapacity)
		return validateCSIStorageCapacity(o, oc)
	}
	return nil
}

// validateMoreStatus is the status subresource's validation of these kinds.
func validateMoreStatus(obj proto.Message) field.ErrorList {
	if errs := validateFlowControlStatus(obj); errs != nil {
		return errs
	}
	switch o := obj.(type) {
	case *networkingv1.Ingress:
		return validateIngressStatus(o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		return validateHPAStatus(o)
	case *storagev1.VolumeAttachment:
		return validateVolumeAttachmentStatus(o)
	}
	return nil
}

// validatePodTemplate is ValidatePodTemplate after the metadata: the
// template's labels and spec (defaulted as a pod's), and no ephemeral
// containers. The template's metadata is at template (Kubernetes' path for
// an embedded ObjectMeta), not template.metadata.
func validatePodTemplate(o *corev1.PodTemplate) field.ErrorList {
	p := field.NewPath("template")
	t := o.GetTemplate()
	errs := validateLabels(t.GetMetadata().GetLabels(), p.Child("labels"))
	errs = append(errs, validatePodSpec(t.GetSpec(), p.Child("spec"))...)
	if len(t.GetSpec().GetEphemeralContainers()) > 0 {
		errs = append(errs, field.Forbidden(p.Child("spec", "ephemeralContainers"), "ephemeral containers not allowed in pod template"))
	}
	return errs
}

const ingressClassAnnotation = "kubernetes.io/ingress.class"

// validateRuntimeClass is ValidateRuntimeClass (and, with old, the
// immutable handler): a DNS-label handler, the overhead as a container's
// limits, the scheduling node selector and tolerations (unique).
func validateRuntimeClass(o, old *nodev1.RuntimeClass) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(o.GetHandler()) {
		errs = append(errs, field.Invalid(field.NewPath("handler"), o.GetHandler(), msg))
	}
	// Checked as a container's limits, under Kubernetes' path for them.
	for k, v := range o.GetOverhead().GetPodFixed() {
		errs = append(errs, validateQuantity(v, field.NewPath("overhead", "limits").Key(k))...)
	}
	if s := o.GetScheduling(); s != nil {
		sp := field.NewPath("scheduling")
		errs = append(errs, validateLabels(s.GetNodeSelector(), sp.Child("nodeSelector"))...)
		// Kubernetes names the list scheduling.tolerations.tolerations.
		tp := sp.Child("tolerations").Child("tolerations")
		seen := map[string]bool{}
		for i, t := range s.GetTolerations() {
			errs = append(errs, validateToleration(t, tp.Index(i))...)
			k := t.GetKey() + "\x00" + t.GetOperator() + "\x00" + t.GetValue() + "\x00" + t.GetEffect()
			if seen[k] {
				errs = append(errs, field.Duplicate(sp.Child("tolerations").Index(i), goValue(fmt.Sprintf("%v", t))))
			}
			seen[k] = true
		}
	}
	if old != nil && o.GetHandler() != old.GetHandler() {
		errs = append(errs, field.Invalid(field.NewPath("handler"), o.GetHandler(), "field is immutable"))
	}
	return errs
}

// validateToleration is the per-toleration part of Kubernetes'
// ValidateTolerations (a pod's and a RuntimeClass's).
func validateToleration(t *corev1.Toleration, tp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.GetKey() != "" {
		errs = append(errs, validateLabelKey(t.GetKey(), tp.Child("key"))...)
	}
	errs = append(errs, validateEnum(t.GetOperator(), tp.Child("operator"), false, "Exists", "Equal")...)
	if t.GetOperator() == "Exists" && t.GetValue() != "" {
		errs = append(errs, field.Invalid(tp.Child("operator"), t.GetValue(), "value must be empty when `operator` is 'Exists'"))
	}
	if t.GetKey() == "" && t.GetOperator() != "Exists" {
		errs = append(errs, field.Invalid(tp.Child("operator"), t.GetOperator(), "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
	}
	errs = append(errs, validateEnum(t.GetEffect(), tp.Child("effect"), false, "NoSchedule", "PreferNoSchedule", "NoExecute")...)
	if t.TolerationSeconds != nil && t.GetEffect() != "NoExecute" {
		errs = append(errs, field.Invalid(tp.Child("effect"), t.GetEffect(), "effect must be 'NoExecute' when `tolerationSeconds` is set"))
	}
	return errs
}
