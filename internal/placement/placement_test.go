// This file holds the tests of node placement: node selectors and required
// node affinity against a node, and taints against tolerations.

package placement

import (
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func TestMatches(t *testing.T) {
	node := &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a", "cores": "8"}}}
	req := func(terms ...*corev1.NodeSelectorTerm) *corev1.Pod {
		return &corev1.Pod{Spec: &corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}}}
	}
	expr := func(key, op string, values ...string) *corev1.NodeSelectorTerm {
		return &corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}
	}
	field := func(name string) *corev1.NodeSelectorTerm {
		return &corev1.NodeSelectorTerm{MatchFields: []*corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: "In", Values: []string{name}}}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"no constraints", &corev1.Pod{Spec: &corev1.PodSpec{}}, true},
		{"nodeSelector", &corev1.Pod{Spec: &corev1.PodSpec{NodeSelector: map[string]string{"zone": "a"}}}, true},
		{"nodeSelector mismatch", &corev1.Pod{Spec: &corev1.PodSpec{NodeSelector: map[string]string{"zone": "b"}}}, false},
		{"matchFields metadata.name", req(field("n1")), true},
		{"matchFields another node", req(field("n2")), false},
		{"terms are ORed", req(field("n2"), expr("zone", "In", "a")), true},
		{"Gt", req(expr("cores", "Gt", "4")), true},
		{"Lt", req(expr("cores", "Lt", "4")), false},
		{"DoesNotExist", req(expr("gpu", "DoesNotExist")), true},
		{"empty term matches nothing", req(&corev1.NodeSelectorTerm{}), false},
	} {
		if got := Matches(tc.pod, node); got != tc.want {
			t.Errorf("%s: Matches = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTaintTolerated(t *testing.T) {
	taint := &corev1.Taint{Key: "k", Value: "v", Effect: "NoExecute"}
	for _, tc := range []struct {
		name string
		tol  *corev1.Toleration
		want bool
	}{
		{"Equal key and value", &corev1.Toleration{Key: "k", Value: "v"}, true},
		{"Equal other value", &corev1.Toleration{Key: "k", Value: "w"}, false},
		{"Exists key", &corev1.Toleration{Key: "k", Operator: "Exists"}, true},
		{"Exists without key tolerates everything", &corev1.Toleration{Operator: "Exists"}, true},
		{"other effect", &corev1.Toleration{Key: "k", Operator: "Exists", Effect: "NoSchedule"}, false},
		{"Equal without key tolerates nothing", &corev1.Toleration{Value: "v"}, false},
	} {
		if got := TaintTolerated([]*corev1.Toleration{tc.tol}, taint); got != tc.want {
			t.Errorf("%s: TaintTolerated = %v, want %v", tc.name, got, tc.want)
		}
	}
}
