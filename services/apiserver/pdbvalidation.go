// This file holds the validation of policy/v1 PodDisruptionBudgets, as
// Kubernetes' ValidatePodDisruptionBudget and its status update check: the
// same field paths and messages, built with apimachinery's own validators
// where they exist (label selectors, conditions, percents).
package apiserver

import (
	"fmt"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	"github.com/kplane/kplane/proto/kubeconv"
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
	for _, f := range []struct {
		name string
		v    *metav1.IntOrString
	}{{"minAvailable", s.GetMinAvailable()}, {"maxUnavailable", s.GetMaxUnavailable()}} {
		if f.v != nil {
			v := kubeconv.IntOrString(f.v)
			errs = append(errs, validatePositiveIntOrPercent(v, p.Child(f.name))...)
			errs = append(errs, notMoreThan100Percent(v, p.Child(f.name))...)
		}
	}
	if sel := s.GetSelector(); sel != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(kubeconv.LabelSelector(sel), metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
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
	errs = append(errs, metav1validation.ValidateConditions(kubeconv.Conditions(st.GetConditions()), p.Child("conditions"))...)
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
