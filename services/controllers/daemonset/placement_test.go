// This file holds the tests of where daemon pods belong: shouldRun against
// Kubernetes' rules for selectors, affinity, taints and node state, and
// the node a pod is for.
package daemonset

import (
	"testing"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func TestShouldRun(t *testing.T) {
	node := func(labels map[string]string, f func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "n1", Labels: labels}, Spec: &corev1.NodeSpec{}, Status: &corev1.NodeStatus{}}
		if f != nil {
			f(n)
		}
		return n
	}
	taint := func(key, effect string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, &corev1.Taint{Key: key, Effect: effect}) }
	}
	cond := func(typ, status string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, &corev1.NodeCondition{Type: typ, Status: status})
		}
	}
	ds := func(f func(*corev1.PodSpec)) *appsv1.DaemonSet {
		spec := &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "x"}}}
		if f != nil {
			f(spec)
		}
		return &appsv1.DaemonSet{Spec: &appsv1.DaemonSetSpec{Template: &corev1.PodTemplateSpec{Spec: spec}}}
	}
	for _, tc := range []struct {
		name           string
		node           *corev1.Node
		ds             *appsv1.DaemonSet
		run, keepGoing bool
	}{
		{name: "plain node", node: node(nil, nil), ds: ds(nil), run: true, keepGoing: true},
		{name: "nodeSelector matches", node: node(map[string]string{"disk": "ssd"}, nil),
			ds: ds(func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"disk": "ssd"} }), run: true, keepGoing: true},
		{name: "nodeSelector misses", node: node(map[string]string{"disk": "hdd"}, nil),
			ds: ds(func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"disk": "ssd"} })},
		{name: "required affinity misses", node: node(nil, nil), ds: ds(func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []*corev1.NodeSelectorTerm{{MatchExpressions: []*corev1.NodeSelectorRequirement{{Key: "zone", Operator: "Exists"}}}}}}}
		})},
		{name: "other nodeName", node: node(nil, nil), ds: ds(func(s *corev1.PodSpec) { s.NodeName = "n2" })},
		{name: "NoSchedule taint: no new pod, the running one stays", node: node(nil, taint("gpu", "NoSchedule")), ds: ds(nil), keepGoing: true},
		{name: "NoExecute taint: none", node: node(nil, taint("gpu", "NoExecute")), ds: ds(nil)},
		{name: "tolerated taint", node: node(nil, taint("gpu", "NoExecute")), ds: ds(func(s *corev1.PodSpec) {
			s.Tolerations = []*corev1.Toleration{{Key: "gpu", Operator: "Exists"}}
		}), run: true, keepGoing: true},
		{name: "PreferNoSchedule ignored", node: node(nil, taint("gpu", "PreferNoSchedule")), ds: ds(nil), run: true, keepGoing: true},
		{name: "cordoned: daemon pods tolerate unschedulable", node: node(nil, func(n *corev1.Node) { n.Spec.Unschedulable = true }), ds: ds(nil), run: true, keepGoing: true},
		{name: "unreachable NoExecute tolerated", node: node(nil, taint(taintUnreachable, "NoExecute")), ds: ds(nil), run: true, keepGoing: true},
		{name: "not ready: no new pod", node: node(nil, cond("Ready", "False")), ds: ds(nil), keepGoing: true},
		{name: "memory pressure tolerated", node: node(nil, cond("MemoryPressure", "True")), ds: ds(nil), run: true, keepGoing: true},
		{name: "network unavailable", node: node(nil, cond("NetworkUnavailable", "True")), ds: ds(nil), keepGoing: true},
		{name: "network unavailable, host network", node: node(nil, cond("NetworkUnavailable", "True")),
			ds: ds(func(s *corev1.PodSpec) { s.HostNetwork = true }), run: true, keepGoing: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, keep := shouldRun(tc.node, tc.ds)
			if run != tc.run || keep != tc.keepGoing {
				t.Errorf("got run %v, continue %v; want %v, %v", run, keep, tc.run, tc.keepGoing)
			}
		})
	}
}

func TestNewPodTargetsItsNode(t *testing.T) {
	ds := &appsv1.DaemonSet{Metadata: &metav1.ObjectMeta{Name: "agent", Namespace: "ns", Uid: "u", Annotations: map[string]string{TemplateGenerationAnnotation: "3"}},
		Spec: &appsv1.DaemonSetSpec{Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
			Spec: &corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []*corev1.NodeSelectorTerm{{MatchExpressions: []*corev1.NodeSelectorRequirement{{Key: "zone", Operator: "Exists"}}}}}}},
				Tolerations: []*corev1.Toleration{{Key: taintNotReady, Operator: "Exists", Effect: "NoExecute", TolerationSeconds: new(int64)}}}}}}
	p := newPod(ds, "n7", "abc")
	if got := targetNode(p); got != "n7" {
		t.Errorf("target node: got %q, want n7", got)
	}
	if l := p.GetMetadata().GetLabels(); l[HashLabel] != "abc" || l[GenerationLabel] != "3" || l["app"] != "agent" {
		t.Errorf("labels: got %v", l)
	}
	if g := p.GetMetadata().GetGenerateName(); g != "agent-" {
		t.Errorf("generateName: got %q, want agent-", g)
	}
	// The template's own not-ready NoExecute toleration (with a time
	// limit) is replaced by the daemon one (same key, operator, value and
	// effect), as Kubernetes replaces it.
	n := 0
	for _, tl := range p.GetSpec().GetTolerations() {
		if tl.GetKey() == taintNotReady {
			n++
			if tl.TolerationSeconds != nil {
				t.Errorf("daemon not-ready toleration has a time limit: %v", tl)
			}
		}
	}
	if n != 1 {
		t.Errorf("got %d not-ready tolerations, want the template's replaced by the daemon one", n)
	}
}
