// This file holds the test of the resource-fit filter: a pod's requests
// against what the node has left.

package noderesourcesfit_test

import (
	"context"
	"slices"
	"testing"

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
