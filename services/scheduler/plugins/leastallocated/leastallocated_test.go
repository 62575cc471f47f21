// This file holds the test of the least-allocated score, with existing pods,
// non-zero request defaults and over-committed nodes.

package leastallocated_test

import (
	"context"
	"testing"

	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/leastallocated"
)

func TestScore(t *testing.T) {
	tests := []struct {
		name string
		pod  *framework.PodInfo
		node *framework.NodeInfo
		want int64
	}{
		// cpu (4000-1000)/4000 = 75, memory (8-2)/8 = 75.
		{name: "quarter used", pod: fixture.Pod("p", "1", "2Gi", nil), node: fixture.Node("n", "4", "8Gi", nil), want: 75},
		// cpu (4000-3000)/4000 = 25, memory (8-4)/8 = 50 → 37.
		{name: "existing pods count", pod: fixture.Pod("p", "1", "2Gi", nil),
			node: fixture.WithPods(fixture.Node("n", "4", "8Gi", nil), fixture.Pod("a", "2", "2Gi", nil)), want: 37},
		// No requests: Kubernetes' defaults 100m and 200Mi. cpu 90, memory (1000-200)/1000 = 80 → 85.
		{name: "zero requests use non-zero defaults", pod: fixture.Pod("p", "", "", nil), node: fixture.Node("n", "1", "1000Mi", nil), want: 85},
		{name: "over-committed scores zero", pod: fixture.Pod("p", "8", "16Gi", nil), node: fixture.Node("n", "4", "8Gi", nil), want: 0},
	}
	p, _ := leastallocated.New(nil, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, st := p.(framework.ScorePlugin).Score(context.Background(), nil, tc.pod, tc.node)
			if !st.IsSuccess() || got != tc.want {
				t.Errorf("got %d (%v), want %d", got, st.AsError(), tc.want)
			}
		})
	}
}
