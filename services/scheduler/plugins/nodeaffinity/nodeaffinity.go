// Package nodeaffinity filters nodes by a pod's spec.nodeSelector and its
// requiredDuringSchedulingIgnoredDuringExecution node affinity, and scores
// them by the weights of the preferred terms they match.
package nodeaffinity

import (
	"context"

	"github.com/kplane/kplane/internal/placement"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeAffinity"

// Reason is the user-facing rejection.
const Reason = "node(s) didn't match Pod's node affinity/selector"

// Plugin is the NodeAffinity filter and scorer.
type Plugin struct{}

var (
	_ framework.PreFilterPlugin = (*Plugin)(nil)
	_ framework.FilterPlugin    = (*Plugin)(nil)
	_ framework.PreScorePlugin  = (*Plugin)(nil)
	_ framework.ScorePlugin     = (*Plugin)(nil)
	_ framework.ScoreExtensions = (*Plugin)(nil)
)

// New is the plugin's factory.
func New([]byte, framework.Handle) (framework.Plugin, error) { return &Plugin{}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// PreFilter skips the filter for pods with neither a nodeSelector nor
// required node affinity.
func (*Plugin) PreFilter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	spec := pod.Pod.GetSpec()
	if len(spec.GetNodeSelector()) == 0 && spec.GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution() == nil {
		return framework.NewStatus(framework.Skip)
	}
	return nil
}

// Filter rejects a node whose labels miss the nodeSelector or that matches
// none of the required node selector terms (terms are ORed, the
// expressions of one term ANDed; an empty term matches nothing).
func (*Plugin) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	if !placement.Matches(pod.Pod, node.Node) {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, Reason)
	}
	return nil
}

// PreScore skips scoring for pods without preferred terms.
func (*Plugin) PreScore(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	if len(pod.Pod.GetSpec().GetAffinity().GetNodeAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution()) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	return nil
}

// Score sums the weights of the preferred terms node matches.
func (*Plugin) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	var sum int64
	for _, t := range pod.Pod.GetSpec().GetAffinity().GetNodeAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution() {
		if t.GetWeight() != 0 && placement.TermMatches(t.GetPreference(), node.Node) {
			sum += int64(t.GetWeight())
		}
	}
	return sum, nil
}

// ScoreExtensions implements framework.ScorePlugin.
func (p *Plugin) ScoreExtensions() framework.ScoreExtensions { return p }

// NormalizeScore scales the sums so the best node scores 100.
func (*Plugin) NormalizeScore(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, scores framework.NodeScoreList) *framework.Status {
	framework.DefaultNormalizeScore(framework.MaxNodeScore, false, scores)
	return nil
}
