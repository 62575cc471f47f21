// Package podtopologyspread is kube-scheduler's PodTopologySpread on
// kplane's framework: a pod's topologySpreadConstraints. Those with
// whenUnsatisfiable DoNotSchedule filter: a node is rejected when placing
// the pod there would make its domain hold more than maxSkew matching pods
// over the least-loaded eligible domain (taken as 0 while fewer than
// minDomains domains exist), or when it lacks the topology label. Those
// with ScheduleAnyway score: fewer matching pods in the node's domain,
// weighted by the log of the number of domains, scores higher.
// nodeAffinityPolicy (default Honor) and nodeTaintsPolicy (default
// Ignore) decide which nodes' pods and domains count; matchLabelKeys adds
// the pod's own values of those labels to the selector.
//
// Kubernetes' cluster default constraints (spread by the Services,
// ReplicaSets and StatefulSets selecting the pod over hostname and zone,
// ScheduleAnyway) are not applied to pods without constraints: kplane's
// OwnerSpread plugin plays that role (by controller owner, over nodes);
// see docs/design.md.
//
// Counts over every node are made once per cycle (PreFilter, PreScore); a
// node given to Filter that is not the snapshot's (preemption's copy
// without victims, or with nominated pods added) has its domain's count
// corrected by the difference in its pods.
package podtopologyspread

import (
	"context"
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/internal/placement"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "PodTopologySpread"

// The user-facing rejections, Kubernetes' words.
const (
	ReasonConstraints  = "node(s) didn't match pod topology spread constraints"
	ReasonMissingLabel = ReasonConstraints + " (missing required label)"
)

// hostnameLabel is the well-known label whose domains are single nodes.
const hostnameLabel = "kubernetes.io/hostname"

const (
	preFilterKey = "PreFilter" + Name
	preScoreKey  = "PreScore" + Name
)

// Plugin is the PodTopologySpread filter and scorer.
type Plugin struct {
	h framework.Handle
}

var (
	_ framework.PreFilterPlugin = (*Plugin)(nil)
	_ framework.FilterPlugin    = (*Plugin)(nil)
	_ framework.PreScorePlugin  = (*Plugin)(nil)
	_ framework.ScorePlugin     = (*Plugin)(nil)
	_ framework.ScoreExtensions = (*Plugin)(nil)
)

// New is the plugin's factory. h may be nil (unit tests): the nodes the
// framework passes are then taken as the snapshot.
func New(_ []byte, h framework.Handle) (framework.Plugin, error) { return &Plugin{h: h}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// constraint is a TopologySpreadConstraint ready to count pods.
type constraint struct {
	maxSkew       int32
	key           string
	sel           labels.Selector
	minDomains    int32
	honorAffinity bool
	honorTaints   bool
}

// constraintsOf parses pod's constraints with whenUnsatisfiable action.
func constraintsOf(pod *corev1.Pod, action string) ([]constraint, error) {
	var out []constraint
	for _, c := range pod.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() != action {
			continue
		}
		sel, err := framework.Selector(c.GetLabelSelector())
		if err != nil {
			return nil, fmt.Errorf("podtopologyspread: labelSelector: %w", err)
		}
		if len(c.GetMatchLabelKeys()) > 0 {
			match := labels.Set{}
			for _, k := range c.GetMatchLabelKeys() {
				if v, ok := pod.GetMetadata().GetLabels()[k]; ok {
					match[k] = v
				}
			}
			if len(match) > 0 {
				merged := labels.SelectorFromSet(match)
				if reqs, ok := sel.Requirements(); ok {
					merged = merged.Add(reqs...)
					sel = merged
				}
			}
		}
		cs := constraint{maxSkew: c.GetMaxSkew(), key: c.GetTopologyKey(), sel: sel, minDomains: 1, honorAffinity: true}
		if c.MinDomains != nil {
			cs.minDomains = c.GetMinDomains()
		}
		if c.NodeAffinityPolicy != nil {
			cs.honorAffinity = c.GetNodeAffinityPolicy() == "Honor"
		}
		if c.NodeTaintsPolicy != nil {
			cs.honorTaints = c.GetNodeTaintsPolicy() == "Honor"
		}
		out = append(out, cs)
	}
	return out, nil
}

// hasAllKeys reports whether the node carries every constraint's key.
func hasAllKeys(nl map[string]string, cs []constraint) bool {
	for _, c := range cs {
		if _, ok := nl[c.key]; !ok {
			return false
		}
	}
	return true
}

// includes reports whether node's pods and domain count for c: by its
// nodeAffinityPolicy (the pod's nodeSelector and required node affinity)
// and nodeTaintsPolicy (taints with effect NoSchedule or NoExecute the
// pod does not tolerate).
func (c *constraint) includes(pod *corev1.Pod, node *framework.NodeInfo) bool {
	if c.honorAffinity && !placement.Matches(pod, node.Node) {
		return false
	}
	if c.honorTaints {
		for _, t := range node.Taints {
			if (t.GetEffect() == "NoSchedule" || t.GetEffect() == "NoExecute") && !placement.TaintTolerated(pod.GetSpec().GetTolerations(), t) {
				return false
			}
		}
	}
	return true
}

// countMatching counts pods in ns, not being deleted, that sel selects
// (none for an empty selector, as Kubernetes).
func countMatching(pods map[string]*framework.PodInfo, sel labels.Selector, ns string) int64 {
	if sel.Empty() {
		return 0
	}
	var n int64
	for _, p := range pods {
		m := p.Pod.GetMetadata()
		if m.GetDeletionTimestamp() != nil || m.GetNamespace() != ns {
			continue
		}
		if sel.Matches(labels.Set(m.GetLabels())) {
			n++
		}
	}
	return n
}

// filterState is, per DoNotSchedule constraint, the matching pods in each
// eligible domain and the smallest such count.
type filterState struct {
	constraints []constraint
	counts      []map[string]int64
	mins        []int64
}

func (s *filterState) minOf(i int) int64 {
	if int32(len(s.counts[i])) < s.constraints[i].minDomains {
		return 0
	}
	return s.mins[i]
}

func minCount(m map[string]int64) int64 {
	lo := int64(math.MaxInt32)
	for _, v := range m {
		lo = min(lo, v)
	}
	return lo
}

// PreFilter counts, for each DoNotSchedule constraint, the pods its
// selector matches in each domain of the nodes that count for it.
func (p *Plugin) PreFilter(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, nodes []*framework.NodeInfo) *framework.Status {
	if len(pod.Pod.GetSpec().GetTopologySpreadConstraints()) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	cs, err := constraintsOf(pod.Pod, "DoNotSchedule")
	if err != nil {
		return framework.AsStatus(err)
	}
	if len(cs) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	s := &filterState{constraints: cs, counts: make([]map[string]int64, len(cs)), mins: make([]int64, len(cs))}
	for i := range cs {
		s.counts[i] = map[string]int64{}
	}
	ns := pod.Pod.GetMetadata().GetNamespace()
	for _, n := range nodes {
		if !hasAllKeys(n.Labels, cs) {
			continue
		}
		for i := range cs {
			if !cs[i].includes(pod.Pod, n) {
				continue
			}
			s.counts[i][n.Labels[cs[i].key]] += countMatching(n.Pods, cs[i].sel, ns)
		}
	}
	for i := range cs {
		s.mins[i] = minCount(s.counts[i])
	}
	state.Write(preFilterKey, s)
	return nil
}

// forNode returns s as it is with node's pods: s for a snapshot node, a
// corrected copy for a node the caller changed.
func (p *Plugin) forNode(s *filterState, pod *framework.PodInfo, node *framework.NodeInfo) *filterState {
	if p.h == nil || !hasAllKeys(node.Labels, s.constraints) {
		return s
	}
	snap, ok := p.h.Snapshot().Get(node.Name)
	if !ok || snap == node {
		return s
	}
	ns := pod.Pod.GetMetadata().GetNamespace()
	var c *filterState
	for i := range s.constraints {
		cs := &s.constraints[i]
		if !cs.includes(pod.Pod, node) {
			continue
		}
		d := countMatching(node.Pods, cs.sel, ns) - countMatching(snap.Pods, cs.sel, ns)
		if d == 0 {
			continue
		}
		if c == nil {
			c = &filterState{constraints: s.constraints, counts: make([]map[string]int64, len(s.counts)), mins: make([]int64, len(s.mins))}
			copy(c.counts, s.counts)
			copy(c.mins, s.mins)
		}
		m := make(map[string]int64, len(s.counts[i]))
		for k, v := range s.counts[i] {
			m[k] = v
		}
		m[node.Labels[cs.key]] += d
		c.counts[i], c.mins[i] = m, minCount(m)
	}
	if c == nil {
		return s
	}
	return c
}

// Filter rejects a node without a constraint's topology label
// (UnschedulableAndUnresolvable) or where the pod would exceed maxSkew
// (Unschedulable: evicting pods may help).
func (p *Plugin) Filter(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	v, ok := state.Read(preFilterKey)
	if !ok {
		return framework.AsStatus(fmt.Errorf("podtopologyspread: no PreFilter state"))
	}
	s := p.forNode(v.(*filterState), pod, node)
	podLabels := labels.Set(pod.Pod.GetMetadata().GetLabels())
	for i := range s.constraints {
		c := &s.constraints[i]
		val, ok := node.Labels[c.key]
		if !ok {
			return framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonMissingLabel)
		}
		var self int64
		if c.sel.Matches(podLabels) {
			self = 1
		}
		if s.counts[i][val]+self-s.minOf(i) > int64(c.maxSkew) {
			return framework.NewStatus(framework.Unschedulable, ReasonConstraints)
		}
	}
	return nil
}

// scoreState is what PreScore counts for Score.
type scoreState struct {
	constraints []constraint
	ignored     map[string]bool    // feasible nodes without every topology key
	counts      []map[string]int64 // per constraint, by domain (not hostname)
	weights     []float64          // per constraint, log(domains + 2)
	ns          string
}

// PreScore counts, for each ScheduleAnyway constraint, the matching pods
// in the domains of the feasible nodes, over every node that counts.
func (p *Plugin) PreScore(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, feasible []*framework.NodeInfo) *framework.Status {
	if len(pod.Pod.GetSpec().GetTopologySpreadConstraints()) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	cs, err := constraintsOf(pod.Pod, "ScheduleAnyway")
	if err != nil {
		return framework.AsStatus(err)
	}
	if len(cs) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	all := feasible
	if p.h != nil {
		all = p.h.Snapshot().List()
	}
	s := &scoreState{constraints: cs, ignored: map[string]bool{}, counts: make([]map[string]int64, len(cs)), weights: make([]float64, len(cs)),
		ns: pod.Pod.GetMetadata().GetNamespace()}
	for i := range cs {
		s.counts[i] = map[string]int64{}
	}
	for _, n := range feasible {
		if !hasAllKeys(n.Labels, cs) {
			s.ignored[n.Name] = true
			continue
		}
		for i := range cs {
			if cs[i].key != hostnameLabel {
				s.counts[i][n.Labels[cs[i].key]] += 0
			}
		}
	}
	for i := range cs {
		size := len(s.counts[i])
		if cs[i].key == hostnameLabel {
			size = len(feasible) - len(s.ignored)
		}
		s.weights[i] = math.Log(float64(size + 2))
	}
	for _, n := range all {
		if !hasAllKeys(n.Labels, cs) {
			continue
		}
		for i := range cs {
			if cs[i].key == hostnameLabel || !cs[i].includes(pod.Pod, n) {
				continue
			}
			val := n.Labels[cs[i].key]
			if _, ok := s.counts[i][val]; ok {
				s.counts[i][val] += countMatching(n.Pods, cs[i].sel, s.ns)
			}
		}
	}
	state.Write(preScoreKey, s)
	return nil
}

// Score is, summed over the constraints, the matching pods in the node's
// domain times the constraint's weight, plus maxSkew-1 (so larger skews
// weigh less); lower is better until NormalizeScore flips it.
func (*Plugin) Score(_ context.Context, state *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	v, ok := state.Read(preScoreKey)
	if !ok {
		return 0, framework.AsStatus(fmt.Errorf("podtopologyspread: no PreScore state"))
	}
	s := v.(*scoreState)
	if s.ignored[node.Name] {
		return 0, nil
	}
	var score float64
	for i := range s.constraints {
		c := &s.constraints[i]
		val, ok := node.Labels[c.key]
		if !ok {
			continue
		}
		var cnt int64
		if c.key == hostnameLabel {
			cnt = countMatching(node.Pods, c.sel, s.ns)
		} else {
			cnt = s.counts[i][val]
		}
		score += float64(cnt)*s.weights[i] + float64(c.maxSkew-1)
	}
	return int64(math.Round(score)), nil
}

// ScoreExtensions implements framework.ScorePlugin.
func (p *Plugin) ScoreExtensions() framework.ScoreExtensions { return p }

// NormalizeScore flips and scales the scores as Kubernetes does:
// 100*(max+min-s)/max, 100 for all when max is 0, 0 for ignored nodes.
func (*Plugin) NormalizeScore(_ context.Context, state *framework.CycleState, _ *framework.PodInfo, scores framework.NodeScoreList) *framework.Status {
	v, ok := state.Read(preScoreKey)
	if !ok {
		return framework.AsStatus(fmt.Errorf("podtopologyspread: no PreScore state"))
	}
	s := v.(*scoreState)
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, sc := range scores {
		if s.ignored[sc.Name] {
			continue
		}
		lo, hi = min(lo, sc.Score), max(hi, sc.Score)
	}
	for i := range scores {
		switch {
		case s.ignored[scores[i].Name]:
			scores[i].Score = 0
		case hi == 0:
			scores[i].Score = framework.MaxNodeScore
		default:
			scores[i].Score = framework.MaxNodeScore * (hi + lo - scores[i].Score) / hi
		}
	}
	return nil
}
