// This file holds the tests of the scheduler's cache: assumed pods confirmed
// or forgotten, snapshots that follow node changes, and image counts across
// nodes.

package cache_test

import (
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/scheduler/cache"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
)

func node(name string) *corev1.Node {
	return &corev1.Node{Metadata: &metav1.ObjectMeta{Name: name}, Status: &corev1.NodeStatus{Allocatable: map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"}}}
}

func requested(t *testing.T, s *cache.Snapshot, name string) int64 {
	t.Helper()
	n, ok := s.Get(name)
	if !ok {
		t.Fatalf("node %s not in snapshot", name)
	}
	return n.Requested.MilliCPU
}

func TestAssumeConfirmForget(t *testing.T) {
	c := cache.New()
	c.AddNode(node("a"))
	c.AddNode(node("b"))
	snap := cache.NewSnapshot()
	c.UpdateSnapshot(snap)
	p1 := fixture.Pod("p1", "1", "", nil)
	p2 := fixture.Pod("p2", "2", "", nil)

	if err := c.AssumePod(p1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.AssumePod(p1, "b"); err == nil {
		t.Fatal("assuming a pod twice: got nil, want error")
	}
	if err := c.AssumePod(p2, "a"); err != nil {
		t.Fatal(err)
	}
	old, _ := snap.Get("a")
	c.UpdateSnapshot(snap)
	if got := requested(t, snap, "a"); got != 3000 {
		t.Fatalf("after two assumes: got %dm requested on a, want 3000m", got)
	}
	if old.Requested.MilliCPU != 0 {
		t.Fatalf("an older snapshot's node changed: got %dm, want 0 (snapshots copy)", old.Requested.MilliCPU)
	}

	// The bind of p1 comes back through the informer: confirmed, no longer assumed.
	c.AddPod(framework.NewPodInfo(p1.Pod), "a")
	if c.IsAssumed(p1.Key) {
		t.Fatal("p1 still assumed after the informer saw it bound")
	}
	c.ForgetPod(p1.Key) // no effect on a confirmed pod
	// p2's bind failed.
	c.ForgetPod(p2.Key)
	c.UpdateSnapshot(snap)
	if got := requested(t, snap, "a"); got != 1000 {
		t.Fatalf("after confirm + forget: got %dm on a, want 1000m", got)
	}
	c.RemovePod(p1.Key)
	c.UpdateSnapshot(snap)
	if got := requested(t, snap, "a"); got != 0 {
		t.Fatalf("after delete: got %dm on a, want 0", got)
	}
}

func TestSnapshotTracksNodes(t *testing.T) {
	c := cache.New()
	snap := cache.NewSnapshot()
	for _, n := range []string{"a", "b", "c"} {
		c.AddNode(node(n))
	}
	c.UpdateSnapshot(snap)
	if got := len(snap.List()); got != 3 {
		t.Fatalf("got %d nodes, want 3", got)
	}
	// A pod bound to a node the cache has not seen yet is kept; the node
	// joins the list only once it is known.
	c.AddPod(fixture.Pod("early", "1", "", nil), "d")
	c.RemoveNode("b")
	c.UpdateSnapshot(snap)
	if got := len(snap.List()); got != 2 {
		t.Fatalf("after removing b: got %d nodes, want 2", got)
	}
	if _, ok := snap.Get("b"); ok {
		t.Fatal("removed node still in snapshot")
	}
	c.AddNode(node("d"))
	c.UpdateSnapshot(snap)
	if got := requested(t, snap, "d"); got != 1000 {
		t.Fatalf("node d: got %dm, want the early pod's 1000m", got)
	}
	if got := len(snap.List()); got != 3 {
		t.Fatalf("got %d nodes, want 3", got)
	}
}

func TestImageCounts(t *testing.T) {
	c := cache.New()
	withImage := func(name string) *corev1.Node {
		n := node(name)
		n.Status.Images = []*corev1.ContainerImage{{Names: []string{"nginx:1.27"}, SizeBytes: 1}}
		return n
	}
	c.AddNode(withImage("a"))
	c.AddNode(withImage("b"))
	c.AddNode(node("c"))
	snap := cache.NewSnapshot()
	c.UpdateSnapshot(snap)
	img := framework.NormalizeImage("nginx:1.27")
	if got := snap.NumNodesWithImage(img); got != 2 {
		t.Fatalf("got %d nodes with %s, want 2", got, img)
	}
	c.UpdateNode(node("a"))
	c.UpdateSnapshot(snap)
	if got := snap.NumNodesWithImage(img); got != 1 {
		t.Fatalf("after a dropped the image: got %d, want 1", got)
	}
}

// TestSnapshotNodesWithAffinity: the snapshot lists the nodes holding pods
// with inter-pod terms, following pods and nodes as they come and go.
func TestSnapshotNodesWithAffinity(t *testing.T) {
	anti := func(name string) *framework.PodInfo {
		return fixture.Pod(name, "", "", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{
				{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{}}}}}
		})
	}
	names := func(ns []*framework.NodeInfo) map[string]bool {
		out := map[string]bool{}
		for _, n := range ns {
			out[n.Name] = true
		}
		return out
	}
	c := cache.New()
	for _, n := range []string{"a", "b", "c"} {
		c.AddNode(node(n))
	}
	snap := cache.NewSnapshot()
	c.AddPod(anti("pa"), "a")
	c.AddPod(anti("pb"), "b")
	c.AddPod(fixture.Pod("plain", "", "", nil), "c")
	c.UpdateSnapshot(snap)
	if got := names(snap.HavePodsWithRequiredAntiAffinity()); len(got) != 2 || !got["a"] || !got["b"] {
		t.Fatalf("nodes with anti-affinity pods: got %v, want a and b", got)
	}
	c.RemovePod("default/pa")
	c.RemoveNode("b")
	c.AddPod(anti("pc"), "c")
	c.UpdateSnapshot(snap)
	if got := names(snap.HavePodsWithAffinity()); len(got) != 1 || !got["c"] {
		t.Fatalf("after changes: got %v, want c", got)
	}
	n, _ := snap.Get("c")
	if snap.HavePodsWithAffinity()[0] != n {
		t.Error("the list holds an older copy of c than the snapshot")
	}
}
