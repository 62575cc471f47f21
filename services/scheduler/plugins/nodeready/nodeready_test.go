// This file holds the test of the filter that keeps pods off nodes that are
// not Ready.

package nodeready_test

import (
	"context"
	"slices"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/nodeready"
)

func TestFilter(t *testing.T) {
	ready := func(status string) *framework.NodeInfo {
		return fixture.Node("n", "4", "8Gi", func(n *corev1.Node) {
			if status != "" {
				n.Status.Conditions = []*corev1.NodeCondition{{Type: "MemoryPressure", Status: "False"}, {Type: "Ready", Status: status}}
			}
		})
	}
	tolerant := fixture.Pod("p", "", "", func(p *corev1.Pod) {
		p.Spec.Tolerations = []*corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: "Exists"}}
	})
	tests := []struct {
		name    string
		pod     *framework.PodInfo
		node    *framework.NodeInfo
		reasons []string
	}{
		{name: "ready", pod: fixture.Pod("p", "", "", nil), node: ready("True")},
		{name: "no Ready condition yet", pod: fixture.Pod("p", "", "", nil), node: ready("")},
		{name: "not ready", pod: fixture.Pod("p", "", "", nil), node: ready("False"), reasons: []string{nodeready.ReasonNotReady}},
		{name: "unreachable", pod: fixture.Pod("p", "", "", nil), node: ready("Unknown"), reasons: []string{nodeready.ReasonUnreachable}},
		{name: "not-ready tolerated", pod: tolerant, node: ready("False")},
		{name: "not-ready toleration does not cover unreachable", pod: tolerant, node: ready("Unknown"), reasons: []string{nodeready.ReasonUnreachable}},
	}
	p, _ := nodeready.New(nil, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := p.(framework.FilterPlugin).Filter(context.Background(), nil, tc.pod, tc.node)
			if !slices.Equal(s.Reasons(), tc.reasons) || s.IsSuccess() != (tc.reasons == nil) {
				t.Errorf("got %v %q, want reasons %q", s.Code(), s.Reasons(), tc.reasons)
			}
		})
	}
}
