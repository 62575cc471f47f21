// Package leastallocated scores nodes by how much cpu and memory would be
// left free after placing the pod: emptier nodes score higher, so pods
// spread over the cluster (Kubernetes' NodeResourcesFit LeastAllocated).
package leastallocated

import (
	"context"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeResourcesLeastAllocated"

// Plugin is the LeastAllocated scorer.
type Plugin struct{}

var _ framework.ScorePlugin = (*Plugin)(nil)

// New is the plugin's factory.
func New([]byte, framework.Handle) (framework.Plugin, error) { return &Plugin{}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Score is the mean over cpu and memory of (allocatable - requested) *
// 100 / allocatable, counting the pod and using Kubernetes' non-zero
// defaults for containers that request nothing.
func (*Plugin) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	cpu := free(node.Allocatable.MilliCPU, node.NonZeroRequested.MilliCPU+pod.NonZeroRequests.MilliCPU)
	mem := free(node.Allocatable.Memory, node.NonZeroRequested.Memory+pod.NonZeroRequests.Memory)
	return (cpu + mem) / 2, nil
}

func free(capacity, requested int64) int64 {
	if capacity <= 0 || requested > capacity {
		return 0
	}
	return (capacity - requested) * framework.MaxNodeScore / capacity
}

// ScoreExtensions implements framework.ScorePlugin: scores are already in range.
func (*Plugin) ScoreExtensions() framework.ScoreExtensions { return nil }
