// This file holds the unit tests of the EndpointSlice controller's plan:
// packing endpoints into slices of at most 100, filling slices being
// updated, and writing nothing in a steady state.

package endpointslice

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func testPods(from, to int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := from; i < to; i++ {
		out = append(out, &corev1.Pod{
			Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%04d", i), Uid: fmt.Sprintf("uid-%d", i), Labels: map[string]string{"app": "web"}},
			Spec:     &corev1.PodSpec{NodeName: "n"},
			Status: &corev1.PodStatus{Phase: "Running", PodIp: fmt.Sprintf("10.%d.%d.1", i/200, i%200),
				Conditions: []*corev1.PodCondition{{Type: "Ready", Status: "True", LastTransitionTime: timestamppb.Now()}}},
		})
	}
	return out
}

func testService() *corev1.Service {
	return &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "web", Uid: "svc-uid"},
		Spec: &corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, ClusterIp: "10.96.0.10", IpFamilies: []string{"IPv4"},
			Ports: []*corev1.ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}}}}
}

func noZone(string) (string, bool) { return "", true }

// stored gives the planned creates names and uids, as the API service would.
func stored(ss []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	for i, s := range ss {
		s.Metadata.Name = fmt.Sprintf("web-%d", i)
		s.Metadata.Uid = fmt.Sprintf("slice-%d", i)
	}
	return ss
}

func sizes(ss []*discoveryv1.EndpointSlice) []int {
	var out []int
	for _, s := range ss {
		out = append(out, len(s.GetEndpoints()))
	}
	return out
}

func TestPlanPacksSlices(t *testing.T) {
	svc := testService()
	p := plan(svc, testPods(0, 250), nil, noZone, 100)
	if got := fmt.Sprint(sizes(p.create)); got != "[100 100 50]" || len(p.update)+len(p.remove) != 0 {
		t.Fatalf("first plan: creates %s, %d updates, %d deletes; want creates [100 100 50] only", got, len(p.update), len(p.remove))
	}
	existing := stored(p.create)

	// Nothing changed: nothing to write.
	if p := plan(svc, testPods(0, 250), existing, noZone, 100); len(p.create)+len(p.update)+len(p.remove) != 0 {
		t.Fatalf("steady state: %d creates, %d updates, %d deletes; want none", len(p.create), len(p.update), len(p.remove))
	}

	// 30 pods of the first slice go and 20 new ones come: they fill the
	// slice being updated anyway, nothing is created.
	pods := append(testPods(30, 250), testPods(1000, 1020)...)
	p = plan(svc, pods, existing, noZone, 100)
	if len(p.create) != 0 || len(p.remove) != 0 || fmt.Sprint(sizes(p.update)) != "[90]" {
		t.Fatalf("churn: creates %v, updates %v, %d deletes; want one update to 90", sizes(p.create), sizes(p.update), len(p.remove))
	}

	// Every pod gone: two slices are deleted and the third becomes the
	// placeholder (a slice to delete is recycled rather than a new one
	// created beside it, as Kubernetes does).
	p = plan(svc, nil, existing, noZone, 100)
	if len(p.remove) != 2 || len(p.create) != 0 || len(p.update) != 1 || !isPlaceholder(p.update[0]) || p.update[0].GetMetadata().GetName() == "" {
		t.Fatalf("no pods: %d deletes, creates %v, updates %v; want 2 deletes and one slice made the placeholder", len(p.remove), p.create, p.update)
	}
	// The placeholder, once there, stays.
	if p := plan(svc, nil, p.update, noZone, 100); len(p.create)+len(p.update)+len(p.remove) != 0 {
		t.Fatalf("placeholder steady: %d creates, %d updates, %d deletes; want none", len(p.create), len(p.update), len(p.remove))
	}
}

func TestPlanSkipsPodsOnUnknownNodes(t *testing.T) {
	svc := testService()
	unknown := func(string) (string, bool) { return "", false }
	p := plan(svc, testPods(0, 2), nil, unknown, 100)
	if len(p.skipped) != 2 || len(p.create) != 1 || len(p.create[0].GetEndpoints()) != 0 {
		t.Fatalf("skipped %v, creates %v; want both pods skipped and a placeholder", p.skipped, p.create)
	}
	svc.Spec.PublishNotReadyAddresses = true
	if p := plan(svc, testPods(0, 2), nil, unknown, 100); len(p.skipped) != 0 || fmt.Sprint(sizes(p.create)) != "[2]" {
		t.Fatalf("publishNotReadyAddresses: skipped %v, creates %v; want both pods listed", p.skipped, sizes(p.create))
	}
}

// TestPlanRecyclesThePlaceholder: a Service's first endpoints go into its
// placeholder slice (updated, same name), never into a new slice beside
// it, so no reader sees a slice without ports next to the real one.
func TestPlanRecyclesThePlaceholder(t *testing.T) {
	svc := testService()
	first := plan(svc, nil, nil, noZone, 100)
	if len(first.create) != 1 || !isPlaceholder(first.create[0]) {
		t.Fatalf("no pods: creates %v; want one placeholder", first.create)
	}
	placeholder := stored(first.create)
	p := plan(svc, testPods(0, 3), placeholder, noZone, 100)
	if len(p.create) != 0 || len(p.remove) != 0 || len(p.update) != 1 {
		t.Fatalf("first pods: %d creates, %d updates, %d deletes; want the placeholder updated", len(p.create), len(p.update), len(p.remove))
	}
	u := p.update[0]
	if u.GetMetadata().GetName() != placeholder[0].GetMetadata().GetName() || len(u.GetPorts()) == 0 || len(u.GetEndpoints()) != 3 {
		t.Errorf("updated slice %s: %d ports, %d endpoints; want %s with the Service's ports and 3 endpoints",
			u.GetMetadata().GetName(), len(u.GetPorts()), len(u.GetEndpoints()), placeholder[0].GetMetadata().GetName())
	}
}
