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

var (
	_ framework.PreScorePlugin = (*Plugin)(nil)
	_ framework.ScorePlugin    = (*Plugin)(nil)
)

// New is the plugin's factory.
func New(_ []byte, h framework.Handle) (framework.Plugin, error) { return &Plugin{h: h}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// stateKey is where PreScore leaves the pod's images with their spread.
const stateKey = Name + "/images"

// spreadImage is one of the pod's images present somewhere, with the
// fraction of all nodes that have it.
type spreadImage struct {
	name   string
	spread float64
}

// PreScore works out, once per pod, which of its images any node has and
// how widely each is spread; it skips scoring when no node has any.
func (p *Plugin) PreScore(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	snap := p.h.Snapshot()
	total := len(snap.List())
	var imgs []spreadImage
	for _, img := range pod.Images {
		if n := snap.NumNodesWithImage(img); n > 0 && total > 0 {
			imgs = append(imgs, spreadImage{name: img, spread: float64(n) / float64(total)})
		}
	}
	if len(imgs) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	state.Write(stateKey, imgs)
	return nil
}

// Score sums, over the pod's images present on node, size × (nodes with
// the image / all nodes), then maps [23 MB, 1000 MB × containers] to [0, 100].
func (p *Plugin) Score(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	v, ok := state.Read(stateKey)
	if !ok {
		return 0, framework.NewStatus(framework.Error, "imagelocality: PreScore did not run")
	}
	var sum int64
	for _, img := range v.([]spreadImage) {
		if size, ok := node.ImageSizes[img.name]; ok {
			sum += int64(float64(size) * img.spread)
		}
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
