// This file holds the validation of policy/v1 PodDisruptionBudgets, as
// Kubernetes' ValidatePodDisruptionBudget and its status update check: the
// same field paths and messages, built with apimachinery's own validators
// where they exist (label selectors, conditions, percents).
package apiserver

import (
	"fmt"

	k8smetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
)

// The unhealthyPodEvictionPolicy values Kubernetes supports.
const (
	unhealthyIfHealthyBudget = "IfHealthyBudget"
	unhealthyAlwaysAllow     = "AlwaysAllow"
)

// validatePDBSpec checks a PodDisruptionBudget's spec: at most one of
// minAvailable and maxUnavailable, each a non-negative integer or a percent
// of at most 100%, a valid selector, a supported unhealthy pod eviction
// policy.
func validatePDBSpec(s *policyv1.PodDisruptionBudgetSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.GetMinAvailable() != nil && s.GetMaxUnavailable() != nil {
		errs = append(errs, field.Invalid(p, pdbSpecValue{s}, "minAvailable and maxUnavailable cannot be both set"))
	}
	if v := s.GetMinAvailable(); v != nil {
		errs = append(errs, validateIntOrPercent(k8sIntOrString(v), p.Child("minAvailable"))...)
	}
	if v := s.GetMaxUnavailable(); v != nil {
		errs = append(errs, validateIntOrPercent(k8sIntOrString(v), p.Child("maxUnavailable"))...)
	}
	if sel := s.GetSelector(); sel != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(k8sLabelSelector(sel), metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
	}
	if v := s.UnhealthyPodEvictionPolicy; v != nil && *v != unhealthyAlwaysAllow && *v != unhealthyIfHealthyBudget {
		errs = append(errs, field.NotSupported(p.Child("unhealthyPodEvictionPolicy"), *v, []string{unhealthyAlwaysAllow, unhealthyIfHealthyBudget}))
	}
	return errs
}

// validatePDBStatus checks a PodDisruptionBudget's status as policy/v1's
// status update does: valid conditions and non-negative counts.
func validatePDBStatus(st *policyv1.PodDisruptionBudgetStatus, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	conds := make([]k8smetav1.Condition, 0, len(st.GetConditions()))
	for _, c := range st.GetConditions() {
		conds = append(conds, k8sCondition(c))
	}
	errs = append(errs, metav1validation.ValidateConditions(conds, p.Child("conditions"))...)
	for _, f := range []struct {
		name string
		v    int32
	}{{"disruptionsAllowed", st.GetDisruptionsAllowed()}, {"currentHealthy", st.GetCurrentHealthy()},
		{"desiredHealthy", st.GetDesiredHealthy()}, {"expectedPods", st.GetExpectedPods()}} {
		if f.v < 0 {
			errs = append(errs, field.Invalid(p.Child(f.name), int64(f.v), "must be greater than or equal to 0"))
		}
	}
	return errs
}

// validateIntOrPercent is apps validation's ValidatePositiveIntOrPercent
// and IsNotMoreThan100Percent: the value is passed on as Kubernetes' own
// IntOrString so the message prints it as kube-apiserver does.
func validateIntOrPercent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if v.Type == intstr.Int {
		if v.IntVal < 0 {
			errs = append(errs, field.Invalid(p, int64(v.IntVal), "must be greater than or equal to 0"))
		}
		return errs
	}
	msgs := validation.IsValidPercent(v.StrVal)
	for _, msg := range msgs {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	if len(msgs) == 0 {
		var n int
		fmt.Sscanf(v.StrVal, "%d%%", &n)
		if n > 100 {
			errs = append(errs, field.Invalid(p, v, "must not be greater than 100%"))
		}
	}
	return errs
}

// pdbSpecValue prints a spec in an Invalid message as kube-apiserver does
// (Go syntax of its internal type, pointers as addresses).
type pdbSpecValue struct {
	s *policyv1.PodDisruptionBudgetSpec
}

func (v pdbSpecValue) String() string {
	ptr := func(t string, p any, isNil bool) string {
		if isNil {
			return "(" + t + ")(nil)"
		}
		return fmt.Sprintf("(%s)(%p)", t, p)
	}
	s := v.s
	return "policy.PodDisruptionBudgetSpec{MinAvailable:" + ptr("*intstr.IntOrString", s.MinAvailable, s.MinAvailable == nil) +
		", Selector:" + ptr("*v1.LabelSelector", s.Selector, s.Selector == nil) +
		", MaxUnavailable:" + ptr("*intstr.IntOrString", s.MaxUnavailable, s.MaxUnavailable == nil) +
		", UnhealthyPodEvictionPolicy:" + ptr("*policy.UnhealthyPodEvictionPolicyType", s.UnhealthyPodEvictionPolicy, s.UnhealthyPodEvictionPolicy == nil) + "}"
}

// k8sIntOrString is v as Kubernetes' IntOrString.
func k8sIntOrString(v *metav1.IntOrString) intstr.IntOrString {
	if x, ok := v.GetValue().(*metav1.IntOrString_StrVal); ok {
		return intstr.FromString(x.StrVal)
	}
	return intstr.FromInt32(v.GetIntVal())
}

// k8sLabelSelector is s as Kubernetes' LabelSelector.
func k8sLabelSelector(s *metav1.LabelSelector) *k8smetav1.LabelSelector {
	out := &k8smetav1.LabelSelector{MatchLabels: s.GetMatchLabels()}
	for _, e := range s.GetMatchExpressions() {
		out.MatchExpressions = append(out.MatchExpressions, k8smetav1.LabelSelectorRequirement{
			Key: e.GetKey(), Operator: k8smetav1.LabelSelectorOperator(e.GetOperator()), Values: e.GetValues()})
	}
	return out
}

// k8sCondition is c as Kubernetes' Condition.
func k8sCondition(c *metav1.Condition) k8smetav1.Condition {
	out := k8smetav1.Condition{Type: c.GetType(), Status: k8smetav1.ConditionStatus(c.GetStatus()),
		ObservedGeneration: c.GetObservedGeneration(), Reason: c.GetReason(), Message: c.GetMessage()}
	if t := c.GetLastTransitionTime(); t != nil {
		out.LastTransitionTime = k8smetav1.NewTime(t.AsTime())
	}
	return out
}
