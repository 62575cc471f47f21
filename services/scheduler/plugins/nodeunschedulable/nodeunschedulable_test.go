// This file holds the test of the filter for cordoned nodes, and of the
// toleration that lets a pod through.

package nodeunschedulable_test

import (
	"context"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/nodeunschedulable"
)

func TestFilter(t *testing.T) {
	cordoned := fixture.Node("n", "4", "8Gi", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	tests := []struct {
		name string
		pod  *framework.PodInfo
		node *framework.NodeInfo
		want framework.Code
	}{
		{name: "schedulable node", pod: fixture.Pod("p", "", "", nil), node: fixture.Node("n", "4", "8Gi", nil), want: framework.Success},
		{name: "cordoned node", pod: fixture.Pod("p", "", "", nil), node: cordoned, want: framework.UnschedulableAndUnresolvable},
		{name: "cordon tolerated", pod: fixture.Pod("p", "", "", func(p *corev1.Pod) {
			p.Spec.Tolerations = []*corev1.Toleration{{Key: "node.kubernetes.io/unschedulable", Operator: "Exists", Effect: "NoSchedule"}}
		}), node: cordoned, want: framework.Success},
	}
	p, _ := nodeunschedulable.New(nil, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := p.(framework.FilterPlugin).Filter(context.Background(), nil, tc.pod, tc.node)
			if s.Code() != tc.want {
				t.Errorf("got %v, want %v", s.Code(), tc.want)
			}
			if tc.want != framework.Success && s.Message() != nodeunschedulable.Reason {
				t.Errorf("got reason %q, want %q", s.Message(), nodeunschedulable.Reason)
			}
		})
	}
}
