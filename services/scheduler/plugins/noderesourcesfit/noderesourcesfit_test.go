// This file holds the test of the resource-fit filter: a pod's requests
// against what the node has left.

package noderesourcesfit_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/noderesourcesfit"
)

func TestFilter(t *testing.T) {
	tests := []struct {
		name        string
		pod         *framework.PodInfo
		node        *framework.NodeInfo
		wantCode    framework.Code
		wantReasons []string
	}{
		{name: "fits an empty node", pod: fixture.Pod("p", "500m", "1Gi", nil), node: fixture.Node("n", "1", "2Gi", nil), wantCode: framework.Success},
		{name: "exactly fills the node", pod: fixture.Pod("p", "1", "2Gi", nil), node: fixture.Node("n", "1", "2Gi", nil), wantCode: framework.Success},
		{name: "cpu short", pod: fixture.Pod("p", "1100m", "1Gi", nil), node: fixture.Node("n", "1", "2Gi", nil),
			wantCode: framework.Unschedulable, wantReasons: []string{noderesourcesfit.ReasonCPU}},
		{name: "memory short after existing pods", pod: fixture.Pod("p", "100m", "1Gi", nil),
			node:     fixture.WithPods(fixture.Node("n", "4", "2Gi", nil), fixture.Pod("a", "100m", "1536Mi", nil)),
			wantCode: framework.Unschedulable, wantReasons: []string{noderesourcesfit.ReasonMemory}},
		{name: "both short", pod: fixture.Pod("p", "2", "4Gi", nil), node: fixture.Node("n", "1", "2Gi", nil),
			wantCode: framework.Unschedulable, wantReasons: []string{noderesourcesfit.ReasonCPU, noderesourcesfit.ReasonMemory}},
		{name: "no requests fit a full node", pod: fixture.Pod("p", "", "", nil),
			node: fixture.WithPods(fixture.Node("n", "1", "1Gi", nil), fixture.Pod("a", "1", "1Gi", nil)), wantCode: framework.Success},
		{name: "pod count exhausted", pod: fixture.Pod("p", "", "", nil), node: func() *framework.NodeInfo {
			n := fixture.Node("n", "1", "1Gi", nil)
			n.Allocatable.Pods = 1
			return fixture.WithPods(n, fixture.Pod("a", "", "", nil))
		}(), wantCode: framework.Unschedulable, wantReasons: []string{noderesourcesfit.ReasonPods}},
		{name: "extended resource fits", pod: fixture.Pod("p", "", "", withRequests(map[string]string{fakecpu: "2"})),
			node: fixture.WithPods(fixture.Node("n", "1", "1Gi", withAllocatable(map[string]string{fakecpu: "5"})),
				fixture.Pod("a", "", "", withRequests(map[string]string{fakecpu: "3"}))),
			wantCode: framework.Success},
		{name: "extended resource used up by existing pods", pod: fixture.Pod("p", "", "", withRequests(map[string]string{fakecpu: "2"})),
			node: fixture.WithPods(fixture.Node("n", "1", "1Gi", withAllocatable(map[string]string{fakecpu: "5"})),
				fixture.Pod("a", "", "", withRequests(map[string]string{fakecpu: "2"})),
				fixture.Pod("b", "", "", withRequests(map[string]string{fakecpu: "2"}))),
			wantCode: framework.Unschedulable, wantReasons: []string{"Insufficient example.com/fakecpu"}},
		{name: "extended resource the node does not have", pod: fixture.Pod("p", "", "", withRequests(map[string]string{"nvidia.com/gpu": "1"})),
			node:     fixture.Node("n", "1", "1Gi", nil),
			wantCode: framework.Unschedulable, wantReasons: []string{"Insufficient nvidia.com/gpu"}},
		{name: "every short resource named, scalars in name order",
			pod:      fixture.Pod("p", "2", "", withRequests(map[string]string{"nvidia.com/gpu": "1", fakecpu: "1", "ephemeral-storage": "2Gi", "hugepages-2Mi": "4Mi"})),
			node:     fixture.Node("n", "1", "1Gi", withAllocatable(map[string]string{"ephemeral-storage": "1Gi", "hugepages-2Mi": "2Mi"})),
			wantCode: framework.Unschedulable, wantReasons: []string{noderesourcesfit.ReasonCPU, noderesourcesfit.ReasonEphemeralStorage,
				"Insufficient example.com/fakecpu", "Insufficient hugepages-2Mi", "Insufficient nvidia.com/gpu"}},
		{name: "a zero extended request fits a node without it", pod: fixture.Pod("p", "", "", withRequests(map[string]string{fakecpu: "0"})),
			node: fixture.Node("n", "1", "1Gi", nil), wantCode: framework.Success},
		{name: "overhead counts", pod: fixture.Pod("p", "900m", "", func(p *corev1.Pod) { p.Spec.Overhead = map[string]string{"cpu": "200m"} }),
			node:     fixture.Node("n", "1", "1Gi", nil),
			wantCode: framework.Unschedulable, wantReasons: []string{noderesourcesfit.ReasonCPU}},
		{name: "a sidecar's extended request adds to the app containers'", pod: fixture.Pod("p", "", "", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[fakecpu] = "3"
			p.Spec.InitContainers = []*corev1.Container{{Name: "side", RestartPolicy: proto.String("Always"),
				Resources: &corev1.ResourceRequirements{Requests: map[string]string{fakecpu: "3"}}}}
		}), node: fixture.Node("n", "1", "1Gi", withAllocatable(map[string]string{fakecpu: "5"})),
			wantCode: framework.Unschedulable, wantReasons: []string{"Insufficient example.com/fakecpu"}},
	}
	p, _ := noderesourcesfit.New(nil, nil)
	f := p.(framework.FilterPlugin)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := f.Filter(context.Background(), framework.NewCycleState(), tc.pod, tc.node)
			if s.Code() != tc.wantCode || !slices.Equal(s.Reasons(), tc.wantReasons) {
				t.Errorf("got %v %q, want %v %q", s.Code(), s.Reasons(), tc.wantCode, tc.wantReasons)
			}
		})
	}
}

const fakecpu = "example.com/fakecpu"

// withRequests adds requests to the pod's first container.
func withRequests(req map[string]string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { maps.Copy(p.Spec.Containers[0].Resources.Requests, req) }
}

// withAllocatable adds resources to the node's allocatable.
func withAllocatable(alloc map[string]string) func(*corev1.Node) {
	return func(n *corev1.Node) { maps.Copy(n.Status.Allocatable, alloc) }
}
