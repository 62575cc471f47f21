// Package nodeaffinity filters nodes by a pod's spec.nodeSelector and its
// requiredDuringSchedulingIgnoredDuringExecution node affinity, and scores
// them by the weights of the preferred terms they match.
package nodeaffinity

import (
	"context"
	"strconv"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
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
	if !Matches(pod.Pod, node.Node) {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, Reason)
	}
	return nil
}

// Matches reports whether node satisfies pod's nodeSelector and required
// node affinity.
func Matches(pod *corev1.Pod, node *corev1.Node) bool {
	labels := node.GetMetadata().GetLabels()
	for k, v := range pod.GetSpec().GetNodeSelector() {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	req := pod.GetSpec().GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()
	if req == nil {
		return true
	}
	for _, term := range req.GetNodeSelectorTerms() {
		if TermMatches(term, node) {
			return true
		}
	}
	return false
}

// TermMatches reports whether every expression and field of term holds for
// node; an empty term matches nothing, as in Kubernetes.
func TermMatches(term *corev1.NodeSelectorTerm, node *corev1.Node) bool {
	if len(term.GetMatchExpressions()) == 0 && len(term.GetMatchFields()) == 0 {
		return false
	}
	labels := node.GetMetadata().GetLabels()
	for _, r := range term.GetMatchExpressions() {
		if !requirementMatches(r, labels) {
			return false
		}
	}
	fields := map[string]string{"metadata.name": node.GetMetadata().GetName()}
	for _, r := range term.GetMatchFields() {
		if r.GetKey() != "metadata.name" || !requirementMatches(r, fields) {
			return false
		}
	}
	return true
}

func requirementMatches(r *corev1.NodeSelectorRequirement, labels map[string]string) bool {
	v, ok := labels[r.GetKey()]
	switch r.GetOperator() {
	case "In":
		return ok && contains(r.GetValues(), v)
	case "NotIn":
		return !ok || !contains(r.GetValues(), v)
	case "Exists":
		return ok
	case "DoesNotExist":
		return !ok
	case "Gt", "Lt":
		if !ok || len(r.GetValues()) != 1 {
			return false
		}
		have, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(r.GetValues()[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.GetOperator() == "Gt" {
			return have > want
		}
		return have < want
	}
	return false
}

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
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
		if t.GetWeight() != 0 && TermMatches(t.GetPreference(), node.Node) {
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
