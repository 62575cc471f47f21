// This file holds scheduling.k8s.io PriorityClasses: their defaults and
// validation, the two built-in system classes created at start-up, and
// the Priority admission plugin, which gives each new pod the priority
// of its class (or of the global default class) as Kubernetes' does.

package apiserver

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	schedulingv1 "github.com/kplane/kplane/proto/kplane/scheduling/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

const (
	// highestUserPriority is the largest value a class not named system-*
	// may have; larger values are Kubernetes' own.
	highestUserPriority  = int32(1000000000)
	systemPriorityPrefix = "system-"
	preemptLowerPriority = "PreemptLowerPriority"
)

// systemPriorityClasses are the classes kube-apiserver creates at start-up
// and refuses to delete.
func systemPriorityClasses() []*schedulingv1.PriorityClass {
	return []*schedulingv1.PriorityClass{
		{Metadata: &metav1.ObjectMeta{Name: "system-node-critical"}, Value: 2*highestUserPriority + 1000,
			Description: "Used for system critical pods that must not be moved from their current node."},
		{Metadata: &metav1.ObjectMeta{Name: "system-cluster-critical"}, Value: 2 * highestUserPriority,
			Description: "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."},
	}
}

func defaultPriorityClass(pc *schedulingv1.PriorityClass) {
	if pc.PreemptionPolicy == nil {
		pc.PreemptionPolicy = proto.String(preemptLowerPriority)
	}
}

// validatePriorityClass is Kubernetes' ValidatePriorityClass (and, given
// old, its update rules: value and preemptionPolicy are immutable).
func validatePriorityClass(pc, old *schedulingv1.PriorityClass) field.ErrorList {
	var errs field.ErrorList
	name := pc.GetMetadata().GetName()
	if strings.HasPrefix(name, systemPriorityPrefix) {
		if why := knownSystemClass(name, pc.GetValue(), pc.GetGlobalDefault()); why != "" {
			errs = append(errs, field.Forbidden(field.NewPath("metadata", "name"),
				"priority class names with '"+systemPriorityPrefix+"' prefix are reserved for system use only. error: "+why))
		}
	} else if pc.GetValue() > highestUserPriority {
		errs = append(errs, field.Forbidden(field.NewPath("value"), fmt.Sprintf("maximum allowed value of a user defined priority is %v", highestUserPriority)))
	}
	if pc.PreemptionPolicy != nil {
		errs = append(errs, validatePreemptionPolicy(pc.GetPreemptionPolicy(), field.NewPath("preemptionPolicy"))...)
	}
	if old != nil {
		if pc.GetValue() != old.GetValue() {
			errs = append(errs, field.Forbidden(field.NewPath("value"), "may not be changed in an update."))
		}
		if pc.GetPreemptionPolicy() != old.GetPreemptionPolicy() {
			errs = append(errs, field.Invalid(field.NewPath("preemptionPolicy"), pc.GetPreemptionPolicy(), "field is immutable"))
		}
	}
	return errs
}

func validatePreemptionPolicy(v string, p *field.Path) field.ErrorList {
	switch v {
	case preemptLowerPriority, "Never":
		return nil
	case "":
		return field.ErrorList{field.Required(p, "")}
	}
	return field.ErrorList{field.NotSupported(p, v, []string{preemptLowerPriority, "Never"})}
}

// knownSystemClass explains why a system-* class is not one of the
// built-in ones ("" if it is).
func knownSystemClass(name string, value int32, globalDefault bool) string {
	for _, s := range systemPriorityClasses() {
		if s.GetMetadata().GetName() != name {
			continue
		}
		if s.GetValue() != value {
			return fmt.Sprintf("value of %v PriorityClass must be %v", name, s.GetValue())
		}
		if globalDefault {
			return fmt.Sprintf("globalDefault of %v PriorityClass must be false", name)
		}
		return ""
	}
	return fmt.Sprintf("%v is not a known system priority class", name)
}

// priorityClass reads a class from the watch cache, or from the store when
// the cache has not seen it (yet). A missing class is (nil, nil).
func (s *Server) priorityClass(ctx context.Context, name string) (*schedulingv1.PriorityClass, error) {
	r := s.resources["priorityclasses"]
	if obj := s.cachedCopy(r, "", name); obj != nil {
		return obj.(*schedulingv1.PriorityClass), nil
	}
	obj, err := s.store.get(ctx, r, "", name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return obj.(*schedulingv1.PriorityClass), nil
}

// globalDefaultClass is the class marked globalDefault (the lowest valued,
// should several be), or nil.
func (s *Server) globalDefaultClass(ctx context.Context) (*schedulingv1.PriorityClass, error) {
	ch := s.cachers["priorityclasses"]
	if err := ch.waitReady(ctx); err != nil {
		return nil, err
	}
	s.waitOwnWrites(ctx, ch, "priorityclasses")
	items, _ := ch.snapshot(func(m proto.Message) bool { return m.(*schedulingv1.PriorityClass).GetGlobalDefault() })
	var best *schedulingv1.PriorityClass
	for _, it := range items {
		pc := it.(*schedulingv1.PriorityClass)
		if best == nil || pc.GetValue() < best.GetValue() {
			best = pc
		}
	}
	return best, nil
}

// admitPriority is the mutating half of the Priority plugin: a new pod
// gets the value and preemption policy of its class, or of the global
// default class when it names none (0 and PreemptLowerPriority when there
// is none). A pod may not set a priority or policy that disagrees; an
// update keeps the values the pod has.
func (s *Server) admitPriority(ctx context.Context, a *request.Admission) error {
	if a.Resource != "pods" || a.APIGroup != "" || a.Subresource != "" {
		return nil
	}
	pod, ok := a.Object.(*corev1.Pod)
	if !ok {
		return nil
	}
	if pod.Spec == nil {
		pod.Spec = &corev1.PodSpec{}
	}
	if a.Operation == request.Update {
		old, _ := a.OldObject.(*corev1.Pod)
		if pod.Spec.Priority == nil && old.GetSpec().Priority != nil {
			pod.Spec.Priority = proto.Int32(old.GetSpec().GetPriority())
		}
		if pod.Spec.PreemptionPolicy == nil && old.GetSpec().PreemptionPolicy != nil {
			pod.Spec.PreemptionPolicy = proto.String(old.GetSpec().GetPreemptionPolicy())
		}
		return nil
	}
	if a.Operation != request.Create {
		return nil
	}
	// Kubernetes runs this plugin before a generated name is chosen: a
	// refusal names the pod's generateName.
	name := admissionName(a)
	if m := meta(pod); m.GetGenerateName() != "" && len(m.GetName()) == len(m.GetGenerateName())+5 && strings.HasPrefix(m.GetName(), m.GetGenerateName()) {
		name = m.GetGenerateName()
	}
	forbidden := func(msg string) error {
		return apierrors.NewForbidden("", "pods", name, msg)
	}
	var priority int32
	var policy *string
	if name := pod.Spec.PriorityClassName; name == "" {
		pc, err := s.globalDefaultClass(ctx)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("failed to get default priority class: %w", err))
		}
		if pc != nil {
			pod.Spec.PriorityClassName = pc.GetMetadata().GetName()
			priority, policy = pc.GetValue(), pc.PreemptionPolicy
		} else {
			policy = proto.String(preemptLowerPriority)
		}
	} else {
		pc, err := s.priorityClass(ctx, name)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("failed to get PriorityClass with name %s: %w", name, err))
		}
		if pc == nil {
			return forbidden(fmt.Sprintf("no PriorityClass with name %v was found", name))
		}
		priority, policy = pc.GetValue(), pc.PreemptionPolicy
	}
	if pod.Spec.Priority != nil && pod.Spec.GetPriority() != priority {
		return forbidden(fmt.Sprintf("the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name", pod.Spec.GetPriority(), priority))
	}
	pod.Spec.Priority = proto.Int32(priority)
	if policy != nil {
		if pod.Spec.PreemptionPolicy != nil && pod.Spec.GetPreemptionPolicy() != *policy {
			return forbidden(fmt.Sprintf("the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name", pod.Spec.GetPreemptionPolicy(), *policy))
		}
		pod.Spec.PreemptionPolicy = proto.String(*policy)
	}
	return nil
}

// validatePriorityClassAdmission is the validating half of the Priority
// plugin: one class at most is the global default. It also keeps the
// system classes from being deleted, as their storage does.
func (s *Server) validatePriorityClassAdmission(ctx context.Context, a *request.Admission) error {
	if a.Resource != "priorityclasses" || a.APIGroup != "scheduling.k8s.io" || a.Subresource != "" {
		return nil
	}
	if a.Operation == request.Delete {
		for _, sc := range systemPriorityClasses() {
			if sc.GetMetadata().GetName() == a.Name {
				return apierrors.NewForbidden(a.APIGroup, a.Resource, a.Name, "this is a system priority class and cannot be deleted")
			}
		}
		return nil
	}
	pc, ok := a.Object.(*schedulingv1.PriorityClass)
	if !ok || !pc.GetGlobalDefault() {
		return nil
	}
	dpc, err := s.globalDefaultClass(ctx)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("failed to get default priority class: %w", err))
	}
	if dpc != nil && (a.Operation == request.Create || dpc.GetMetadata().GetName() != pc.GetMetadata().GetName()) {
		return apierrors.NewForbidden(a.APIGroup, a.Resource, admissionName(a),
			fmt.Sprintf("PriorityClass %v is already marked as default. Only one default can exist", dpc.GetMetadata().GetName()))
	}
	return nil
}

// admissionName is the name an admission refusal gives, as Kubernetes'
// admission errors: the request's, else the object's, else its
// generateName, else "Unknown".
func admissionName(a *request.Admission) string {
	if a.Name != "" {
		return a.Name
	}
	if a.Object != nil {
		m := meta(a.Object)
		if m.GetName() != "" {
			return m.GetName()
		}
		if m.GetGenerateName() != "" {
			return m.GetGenerateName()
		}
	}
	return "Unknown"
}
