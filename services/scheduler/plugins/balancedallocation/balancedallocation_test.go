// This file holds the test of the balanced-allocation score: nodes whose CPU
// and memory use stay even score higher.

package balancedallocation_test

import (
	"context"
	"testing"

	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/balancedallocation"
)

func TestScore(t *testing.T) {
	tests := []struct {
		name string
		pod  *framework.PodInfo
		node *framework.NodeInfo
		want int64
	}{
		{name: "perfectly balanced", pod: fixture.Pod("p", "1", "2Gi", nil), node: fixture.Node("n", "4", "8Gi", nil), want: 100},
		// cpu 0.5, memory 0.125: std 0.1875 → 81.
		{name: "cpu heavy", pod: fixture.Pod("p", "2", "1Gi", nil), node: fixture.Node("n", "4", "8Gi", nil), want: 81},
		// cpu 1 (capped), memory 0: std 0.5 → 50.
		{name: "cpu exhausted, memory idle", pod: fixture.Pod("p", "4", "1Ki", nil), node: fixture.Node("n", "4", "800Gi", nil), want: 50},
	}
	p, _ := balancedallocation.New(nil, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := p.(framework.ScorePlugin).Score(context.Background(), nil, tc.pod, tc.node)
			if got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}
