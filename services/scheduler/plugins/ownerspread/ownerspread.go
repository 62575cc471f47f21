// Package ownerspread spreads the replicas of one owner (the pod's
// controller, e.g. its ReplicaSet) across nodes: nodes with fewer pods of
// the same owner score higher — Kubernetes' default spreading by
// controller, without zones. It stands for the cluster default spreading
// kube-scheduler's PodTopologySpread applies to pods with no
// topologySpreadConstraints of their own, and, like it, leaves pods that
// have some to PodTopologySpread.
package ownerspread

import (
	"context"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "OwnerSpread"

// Plugin is the OwnerSpread scorer.
type Plugin struct{}

var (
	_ framework.PreScorePlugin  = (*Plugin)(nil)
	_ framework.ScorePlugin     = (*Plugin)(nil)
	_ framework.ScoreExtensions = (*Plugin)(nil)
)

// New is the plugin's factory.
func New([]byte, framework.Handle) (framework.Plugin, error) { return &Plugin{}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// PreScore skips pods without a controller owner and pods with
// topologySpreadConstraints.
func (*Plugin) PreScore(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	if pod.OwnerUID == "" || len(pod.Pod.GetSpec().GetTopologySpreadConstraints()) > 0 {
		return framework.NewStatus(framework.Skip)
	}
	return nil
}

// Score counts the pods of the same owner already on node (bound or assumed).
func (*Plugin) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	return int64(node.OwnerCounts[pod.OwnerUID]), nil
}

// ScoreExtensions implements framework.ScorePlugin.
func (p *Plugin) ScoreExtensions() framework.ScoreExtensions { return p }

// NormalizeScore: fewest same-owner pods scores 100, the most 0.
func (*Plugin) NormalizeScore(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, scores framework.NodeScoreList) *framework.Status {
	framework.DefaultNormalizeScore(framework.MaxNodeScore, true, scores)
	return nil
}
