// Package kubeconv converts kplane's generated meta values to and from
// apimachinery's types, for code that hands them to Kubernetes' own
// validators and helpers (percent arithmetic, selector and condition
// helpers, label selectors as labels.Selector) or prints them in messages
// as Kubernetes does.
package kubeconv

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	k8smetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// IntOrString is v as apimachinery's IntOrString; unset is the integer 0.
func IntOrString(v *metav1.IntOrString) intstr.IntOrString {
	if s, ok := v.GetValue().(*metav1.IntOrString_StrVal); ok {
		return intstr.FromString(s.StrVal)
	}
	return intstr.FromInt32(v.GetIntVal())
}

// LabelSelector is s as apimachinery's LabelSelector (nil for nil).
func LabelSelector(s *metav1.LabelSelector) *k8smetav1.LabelSelector {
	if s == nil {
		return nil
	}
	out := &k8smetav1.LabelSelector{MatchLabels: s.GetMatchLabels()}
	for _, e := range s.GetMatchExpressions() {
		out.MatchExpressions = append(out.MatchExpressions, k8smetav1.LabelSelectorRequirement{
			Key: e.GetKey(), Operator: k8smetav1.LabelSelectorOperator(e.GetOperator()), Values: e.GetValues()})
	}
	return out
}

// Selector is s as a labels.Selector, by apimachinery's
// LabelSelectorAsSelector: a nil selector selects nothing, an empty one
// everything, and an unknown operator or an invalid key or value is an
// error.
func Selector(s *metav1.LabelSelector) (labels.Selector, error) {
	return k8smetav1.LabelSelectorAsSelector(LabelSelector(s))
}

// Conditions are cs as apimachinery's Conditions.
func Conditions(cs []*metav1.Condition) []k8smetav1.Condition {
	out := make([]k8smetav1.Condition, 0, len(cs))
	for _, c := range cs {
		k := k8smetav1.Condition{Type: c.GetType(), Status: k8smetav1.ConditionStatus(c.GetStatus()),
			ObservedGeneration: c.GetObservedGeneration(), Reason: c.GetReason(), Message: c.GetMessage()}
		if t := c.GetLastTransitionTime(); t != nil {
			k.LastTransitionTime = k8smetav1.NewTime(t.AsTime())
		}
		out = append(out, k)
	}
	return out
}

// FromConditions are cs as kplane's Conditions; transition times keep
// whole seconds, as a metav1.Time written by Kubernetes does.
func FromConditions(cs []k8smetav1.Condition) []*metav1.Condition {
	out := make([]*metav1.Condition, 0, len(cs))
	for _, c := range cs {
		p := &metav1.Condition{Type: c.Type, Status: string(c.Status), ObservedGeneration: c.ObservedGeneration,
			Reason: c.Reason, Message: c.Message}
		if !c.LastTransitionTime.IsZero() {
			p.LastTransitionTime = timestamppb.New(c.LastTransitionTime.Time.Truncate(time.Second))
		}
		out = append(out, p)
	}
	return out
}
