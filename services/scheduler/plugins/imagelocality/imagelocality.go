// Package imagelocality prefers nodes that already have the pod's images
// (as their status reports), weighing each image by its size and by how
// many nodes have it, so one popular small image does not pull every pod
// to the same nodes — Kubernetes' ImageLocality.
package imagelocality

import (
	"context"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "ImageLocality"

const (
	mb = 1024 * 1024
	// Below minThreshold the image counts as absent; maxContainerThreshold
	// per container is the size at which the score is full.
	minThreshold          int64 = 23 * mb
	maxContainerThreshold int64 = 1000 * mb
)

// Plugin is the ImageLocality scorer.
type Plugin struct{ h framework.Handle }

var _ framework.ScorePlugin = (*Plugin)(nil)

// New is the plugin's factory.
func New(_ []byte, h framework.Handle) (framework.Plugin, error) { return &Plugin{h: h}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Score sums, over the pod's images present on node, size × (nodes with
// the image / all nodes), then maps [23 MB, 1000 MB × containers] to [0, 100].
func (p *Plugin) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	if len(node.ImageSizes) == 0 || len(pod.Images) == 0 {
		return 0, nil
	}
	snap := p.h.Snapshot()
	total := len(snap.List())
	var sum int64
	for _, img := range pod.Images {
		size, ok := node.ImageSizes[img]
		if !ok || total == 0 {
			continue
		}
		sum += int64(float64(size) * float64(snap.NumNodesWithImage(img)) / float64(total))
	}
	return Calculate(sum, len(pod.Images)), nil
}

// Calculate maps a summed, spread-weighted image size to a score.
func Calculate(sum int64, containers int) int64 {
	maxThreshold := maxContainerThreshold * int64(max(containers, 1))
	sum = min(max(sum, minThreshold), maxThreshold)
	return framework.MaxNodeScore * (sum - minThreshold) / (maxThreshold - minThreshold)
}

// ScoreExtensions implements framework.ScorePlugin: scores are already in range.
func (*Plugin) ScoreExtensions() framework.ScoreExtensions { return nil }
