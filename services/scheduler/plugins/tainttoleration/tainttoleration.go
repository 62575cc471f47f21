// Package tainttoleration filters out nodes with a NoSchedule or NoExecute
// taint the pod does not tolerate, and prefers nodes with fewer
// PreferNoSchedule taints the pod does not tolerate.
package tainttoleration

import (
	"context"
	"fmt"

	"github.com/kplane/kplane/internal/placement"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "TaintToleration"

// Plugin is the TaintToleration filter and scorer.
type Plugin struct{}

var (
	_ framework.FilterPlugin    = (*Plugin)(nil)
	_ framework.ScorePlugin     = (*Plugin)(nil)
	_ framework.ScoreExtensions = (*Plugin)(nil)
)

// New is the plugin's factory.
func New([]byte, framework.Handle) (framework.Plugin, error) { return &Plugin{}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Filter rejects the node on its first untolerated NoSchedule/NoExecute
// taint, naming it as Kubernetes does: "node(s) had untolerated taint
// {dedicated: gpu}".
func (*Plugin) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	tols := pod.Pod.GetSpec().GetTolerations()
	for _, t := range node.Taints {
		if e := t.GetEffect(); e != "NoSchedule" && e != "NoExecute" {
			continue
		}
		if !placement.TaintTolerated(tols, t) {
			return framework.NewStatus(framework.UnschedulableAndUnresolvable,
				fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.GetKey(), t.GetValue()))
		}
	}
	return nil
}

// Score counts the node's PreferNoSchedule taints the pod does not tolerate.
func (*Plugin) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	var n int64
	tols := pod.Pod.GetSpec().GetTolerations()
	for _, t := range node.Taints {
		if t.GetEffect() == "PreferNoSchedule" && !placement.TaintTolerated(tols, t) {
			n++
		}
	}
	return n, nil
}

// ScoreExtensions implements framework.ScorePlugin.
func (p *Plugin) ScoreExtensions() framework.ScoreExtensions { return p }

// NormalizeScore turns counts into scores: fewest untolerated taints, 100.
func (*Plugin) NormalizeScore(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, scores framework.NodeScoreList) *framework.Status {
	framework.DefaultNormalizeScore(framework.MaxNodeScore, true, scores)
	return nil
}
