// This file tests Selector: nil, empty and full LabelSelectors, and the
// ones Kubernetes refuses.

package kubeconv

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func TestSelector(t *testing.T) {
	app := labels.Set{"app": "web", "tier": "front"}
	other := labels.Set{"app": "db"}
	for _, c := range []struct {
		name      string
		sel       *metav1.LabelSelector
		matches   []labels.Set
		unmatched []labels.Set
		str       string
	}{
		{name: "nil selects nothing", sel: nil, unmatched: []labels.Set{app, {}}},
		{name: "empty selects everything", sel: &metav1.LabelSelector{}, matches: []labels.Set{app, other, {}}},
		{
			name:      "labels and expressions",
			sel:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}, MatchExpressions: []*metav1.LabelSelectorRequirement{{Key: "tier", Operator: "In", Values: []string{"front", "back"}}, {Key: "canary", Operator: "DoesNotExist"}}},
			matches:   []labels.Set{app},
			unmatched: []labels.Set{other, {"app": "web", "tier": "front", "canary": "1"}, {"app": "web"}},
			str:       "app=web,!canary,tier in (back,front)",
		},
		{
			name:      "NotIn and Exists",
			sel:       &metav1.LabelSelector{MatchExpressions: []*metav1.LabelSelectorRequirement{{Key: "app", Operator: "NotIn", Values: []string{"db"}}, {Key: "tier", Operator: "Exists"}}},
			matches:   []labels.Set{app},
			unmatched: []labels.Set{other, {"tier": "x", "app": "db"}, {"app": "web"}},
			str:       "app notin (db),tier",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Selector(c.sel)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range c.matches {
				if !s.Matches(l) {
					t.Errorf("%q does not match %v", s, l)
				}
			}
			for _, l := range c.unmatched {
				if s.Matches(l) {
					t.Errorf("%q matches %v", s, l)
				}
			}
			if c.sel != nil && s.String() != c.str {
				t.Errorf("String() = %q, want %q", s, c.str)
			}
		})
	}
	for _, bad := range []*metav1.LabelSelector{
		{MatchExpressions: []*metav1.LabelSelectorRequirement{{Key: "app", Operator: "Equals", Values: []string{"web"}}}},
		{MatchExpressions: []*metav1.LabelSelectorRequirement{{Key: "app", Operator: "In"}}},
		{MatchLabels: map[string]string{"app": "not a value"}},
	} {
		if s, err := Selector(bad); err == nil {
			t.Errorf("Selector(%v) = %q, want an error", bad, s)
		}
	}
}
