// Package balancedallocation scores nodes by how evenly cpu and memory
// would be used after placing the pod, so that one resource is not
// exhausted while the other idles (Kubernetes' NodeResourcesBalancedAllocation).
package balancedallocation

import (
	"context"
	"math"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeResourcesBalancedAllocation"

// Plugin is the BalancedAllocation scorer.
type Plugin struct{}

var _ framework.ScorePlugin = (*Plugin)(nil)

// New is the plugin's factory.
func New([]byte, framework.Handle) (framework.Plugin, error) { return &Plugin{}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Score is (1 - std) * 100 where std is the standard deviation of the cpu
// and memory fractions requested (each capped at 1) — for two resources,
// half their difference.
func (*Plugin) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	cpu := fraction(node.NonZeroRequested.MilliCPU+pod.NonZeroRequests.MilliCPU, node.Allocatable.MilliCPU)
	mem := fraction(node.NonZeroRequested.Memory+pod.NonZeroRequests.Memory, node.Allocatable.Memory)
	std := math.Abs(cpu-mem) / 2
	return int64((1 - std) * float64(framework.MaxNodeScore)), nil
}

func fraction(requested, capacity int64) float64 {
	if capacity <= 0 {
		return 1
	}
	return min(float64(requested)/float64(capacity), 1)
}

// ScoreExtensions implements framework.ScorePlugin: scores are already in range.
func (*Plugin) ScoreExtensions() framework.ScoreExtensions { return nil }
