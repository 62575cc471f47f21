// This file holds the tests of parsed affinity terms and of the node's
// lists of pods with affinity, which a clone must not share changes of.

package framework_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
)

func withAnti(name string) *framework.PodInfo {
	return fixture.Pod(name, "", "", func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{
			{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}
	})
}

func TestNodePodsWithAffinity(t *testing.T) {
	n := fixture.WithPods(fixture.Node("n1", "4", "8Gi", nil), withAnti("a"), fixture.Pod("plain", "", "", nil), withAnti("b"))
	if got := len(n.PodsWithAffinity); got != 2 {
		t.Fatalf("PodsWithAffinity: got %d, want 2", got)
	}
	c := n.Clone()
	c.RemovePod("default/a")
	c.AddPod(withAnti("c"))
	if got, want := names(n.PodsWithRequiredAntiAffinity), "a,b"; got != want {
		t.Errorf("original after the clone changed: got %s, want %s", got, want)
	}
	if got, want := names(c.PodsWithRequiredAntiAffinity), "b,c"; got != want {
		t.Errorf("clone: got %s, want %s", got, want)
	}
	n.RemovePod("default/b")
	if got, want := names(n.PodsWithAffinity), "a"; got != want {
		t.Errorf("original after RemovePod: got %s, want %s", got, want)
	}
}

func names(ps []*framework.PodInfo) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ","
		}
		s += p.Pod.GetMetadata().GetName()
	}
	return s
}

func TestAffinityTermMatches(t *testing.T) {
	pod := func(ns string, lbl map[string]string) *corev1.Pod {
		return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "x", Labels: lbl}}
	}
	owner := pod("default", map[string]string{"app": "web", "tenant": "t1"})
	tests := []struct {
		name     string
		term     *corev1.PodAffinityTerm
		target   *corev1.Pod
		nsLabels labels.Set
		want     bool
	}{
		{name: "own namespace by default", term: &corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{}}, target: pod("default", nil), want: true},
		{name: "not another namespace by default", term: &corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{}}, target: pod("other", nil), want: false},
		{name: "nil labelSelector selects nothing", term: &corev1.PodAffinityTerm{}, target: pod("default", nil), want: false},
		{name: "namespaceSelector by the target namespace's labels", term: &corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}, target: pod("other", nil), nsLabels: labels.Set{"env": "prod"}, want: true},
		{name: "a namespaceSelector alone does not add the own namespace", term: &corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}, target: pod("default", nil), want: false},
		{name: "matchLabelKeys adds the owner's value", term: &corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			MatchLabelKeys: []string{"tenant"}}, target: pod("default", map[string]string{"app": "web", "tenant": "t2"}), want: false},
		{name: "mismatchLabelKeys excludes the owner's value", term: &corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			MismatchLabelKeys: []string{"tenant"}}, target: pod("default", map[string]string{"app": "web", "tenant": "t2"}), want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			at, err := framework.NewAffinityTerm(owner, tc.term)
			if err != nil {
				t.Fatal(err)
			}
			if got := at.Matches(tc.target, tc.nsLabels); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
