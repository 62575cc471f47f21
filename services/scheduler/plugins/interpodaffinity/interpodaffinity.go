// Package interpodaffinity is kube-scheduler's InterPodAffinity on kplane's
// framework. Its filter keeps a pod off nodes where its required pod
// affinity finds no matching pod in the node's topology domain, where its
// required anti-affinity finds one, or where a pod already placed has a
// required anti-affinity term the pod matches; its score adds, per node,
// the weights of the pod's preferred terms, of existing pods' preferred
// terms that select the pod (the symmetric weight) and, with
// hardPodAffinityWeight, of existing pods' required affinity terms that
// select it, and scales the sums to [0, 100] between the lowest and highest.
//
// Everything cluster-wide is counted once per cycle, in PreFilter and
// PreScore, by topology pair (label key, value); Filter and Score only look
// the node's labels up. A node the filters are given that is not the
// snapshot's (a copy with victims removed by preemption, or with pods
// nominated to it added) has its counts corrected by the difference in
// its pods, as kube-scheduler's AddPod/RemovePod extensions do.
package interpodaffinity

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "InterPodAffinity"

// The user-facing rejections, Kubernetes' words.
const (
	ReasonAffinity         = "node(s) didn't match pod affinity rules"
	ReasonAntiAffinity     = "node(s) didn't match pod anti-affinity rules"
	ReasonExistingAntiRule = "node(s) didn't satisfy existing pods anti-affinity rules"
)

const (
	preFilterKey = "PreFilter" + Name
	preScoreKey  = "PreScore" + Name
)

// Args are the plugin's args, as kube-scheduler's InterPodAffinityArgs.
type Args struct {
	// HardPodAffinityWeight is the score weight given to an existing pod's
	// required affinity term that selects the incoming pod (default 1,
	// 0 to 100).
	HardPodAffinityWeight *int32 `json:"hardPodAffinityWeight,omitempty"`
	// IgnorePreferredTermsOfExistingPods scores only by the incoming pod's
	// own preferred terms.
	IgnorePreferredTermsOfExistingPods bool `json:"ignorePreferredTermsOfExistingPods,omitempty"`
}

// Plugin is the InterPodAffinity filter and scorer.
type Plugin struct {
	h          framework.Handle
	ns         framework.NamespaceLister // nil: namespaces have no labels
	hardWeight int32
	ignoreMine bool
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
func New(raw []byte, h framework.Handle) (framework.Plugin, error) {
	p := &Plugin{h: h, hardWeight: 1}
	if len(raw) > 0 {
		var a Args
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(&a); err != nil {
			return nil, fmt.Errorf("interpodaffinity: args: %w", err)
		}
		if a.HardPodAffinityWeight != nil {
			if w := *a.HardPodAffinityWeight; w < 0 || w > 100 {
				return nil, fmt.Errorf("interpodaffinity: hardPodAffinityWeight %d not in [0, 100]", w)
			}
			p.hardWeight = *a.HardPodAffinityWeight
		}
		p.ignoreMine = a.IgnorePreferredTermsOfExistingPods
	}
	if nl, ok := h.(framework.NamespaceLister); ok {
		p.ns = nl
	}
	return p, nil
}

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// pair is a topology domain: a node label key and its value.
type pair struct{ key, value string }

// counts counts matching pods (or terms) by domain.
type counts map[pair]int64

// add adds v to the domain of node labels nl under key (none if the node
// lacks the label).
func (c counts) add(nl map[string]string, key string, v int64) {
	val, ok := nl[key]
	if !ok {
		return
	}
	p := pair{key, val}
	if c[p] += v; c[p] == 0 {
		delete(c, p)
	}
}

// filterState is what PreFilter counts for Filter.
type filterState struct {
	pod      *framework.PodInfo
	affinity []framework.AffinityTerm // the pod's required terms, namespaces resolved
	anti     []framework.AffinityTerm
	nsLabels labels.Set // labels of the pod's namespace
	// existingAnti counts existing pods' required anti-affinity terms that
	// select the pod; affinityCounts the existing pods that match all the
	// pod's required affinity terms (once per term); antiCounts the
	// existing pods each of the pod's required anti-affinity terms selects.
	existingAnti, affinityCounts, antiCounts counts
}

// allMatch reports whether pod matches every term (false for no terms).
func allMatch(terms []framework.AffinityTerm, pi *framework.PodInfo) bool {
	if len(terms) == 0 {
		return false
	}
	for i := range terms {
		if !terms[i].Matches(pi.Pod, nil) {
			return false
		}
	}
	return true
}

// update counts existing pod e on a node with labels nl, mult times.
func (s *filterState) update(e *framework.PodInfo, nl map[string]string, mult int64) {
	for i := range e.RequiredAntiAffinityTerms {
		if t := &e.RequiredAntiAffinityTerms[i]; t.Matches(s.pod.Pod, s.nsLabels) {
			s.existingAnti.add(nl, t.TopologyKey, mult)
		}
	}
	if allMatch(s.affinity, e) {
		for i := range s.affinity {
			s.affinityCounts.add(nl, s.affinity[i].TopologyKey, mult)
		}
	}
	for i := range s.anti {
		if s.anti[i].Matches(e.Pod, nil) {
			s.antiCounts.add(nl, s.anti[i].TopologyKey, mult)
		}
	}
}

func (s *filterState) clone() *filterState {
	c := *s
	c.existingAnti, c.affinityCounts, c.antiCounts = cloneCounts(s.existingAnti), cloneCounts(s.affinityCounts), cloneCounts(s.antiCounts)
	return &c
}

func cloneCounts(m counts) counts {
	c := make(counts, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// resolveNamespaces returns t with the namespaces its namespaceSelector
// selects added to Namespaces and the selector dropped, as kube-scheduler
// does for the incoming pod's terms; an empty selector (every namespace)
// is kept as it is.
func (p *Plugin) resolveNamespaces(t framework.AffinityTerm) framework.AffinityTerm {
	if t.NamespaceSelector.Empty() || t.NamespaceSelector == labels.Nothing() {
		return t
	}
	ns := t.Namespaces.Clone()
	if p.ns != nil {
		ns.Insert(p.ns.NamespacesMatching(t.NamespaceSelector)...)
	}
	t.Namespaces, t.NamespaceSelector = ns, labels.Nothing()
	return t
}

func (p *Plugin) namespaceLabels(ns string) labels.Set {
	if p.ns == nil {
		return labels.Set{}
	}
	return labels.Set(p.ns.NamespaceLabels(ns))
}

// PreFilter counts, over every node, the pods the filter needs; it skips
// the filter when the pod has no required terms and no placed pod's
// required anti-affinity selects it (the snapshot's nodes with such pods
// are the only ones it reads then).
func (p *Plugin) PreFilter(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, nodes []*framework.NodeInfo) *framework.Status {
	if pod.AffinityErr != nil {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, fmt.Sprintf("parsing pod: %v", pod.AffinityErr))
	}
	s := &filterState{pod: pod, existingAnti: counts{}, affinityCounts: counts{}, antiCounts: counts{}}
	withAnti := nodes
	if p.h != nil {
		withAnti = p.h.Snapshot().HavePodsWithRequiredAntiAffinity()
	}
	for _, n := range withAnti {
		for _, e := range n.PodsWithRequiredAntiAffinity {
			if s.nsLabels == nil {
				s.nsLabels = p.namespaceLabels(pod.Pod.GetMetadata().GetNamespace())
			}
			for i := range e.RequiredAntiAffinityTerms {
				if t := &e.RequiredAntiAffinityTerms[i]; t.Matches(pod.Pod, s.nsLabels) {
					s.existingAnti.add(n.Labels, t.TopologyKey, 1)
				}
			}
		}
	}
	if len(s.existingAnti) == 0 && len(pod.RequiredAffinityTerms) == 0 && len(pod.RequiredAntiAffinityTerms) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	if s.nsLabels == nil {
		s.nsLabels = p.namespaceLabels(pod.Pod.GetMetadata().GetNamespace())
	}
	for _, t := range pod.RequiredAffinityTerms {
		s.affinity = append(s.affinity, p.resolveNamespaces(t))
	}
	for _, t := range pod.RequiredAntiAffinityTerms {
		s.anti = append(s.anti, p.resolveNamespaces(t))
	}
	if len(s.affinity) > 0 || len(s.anti) > 0 {
		for _, n := range nodes {
			for _, e := range n.Pods {
				if allMatch(s.affinity, e) {
					for i := range s.affinity {
						s.affinityCounts.add(n.Labels, s.affinity[i].TopologyKey, 1)
					}
				}
				for i := range s.anti {
					if s.anti[i].Matches(e.Pod, nil) {
						s.antiCounts.add(n.Labels, s.anti[i].TopologyKey, 1)
					}
				}
			}
		}
	}
	state.Write(preFilterKey, s)
	return nil
}

// forNode returns the counts as they are with node's pods: s itself for a
// snapshot node, a corrected copy for a node the caller changed.
func (p *Plugin) forNode(s *filterState, node *framework.NodeInfo) *filterState {
	if p.h == nil {
		return s
	}
	snap, ok := p.h.Snapshot().Get(node.Name)
	if !ok || snap == node {
		return s
	}
	var c *filterState
	for key, e := range snap.Pods {
		if _, still := node.Pods[key]; !still {
			if c == nil {
				c = s.clone()
			}
			c.update(e, node.Labels, -1)
		}
	}
	for key, e := range node.Pods {
		if _, before := snap.Pods[key]; !before {
			if c == nil {
				c = s.clone()
			}
			c.update(e, node.Labels, 1)
		}
	}
	if c == nil {
		return s
	}
	return c
}

// Filter checks the pod's required affinity, then its required
// anti-affinity, then the placed pods' required anti-affinity, with
// Kubernetes' reasons. Failing affinity cannot be fixed by preemption
// (UnschedulableAndUnresolvable); failing anti-affinity can.
func (p *Plugin) Filter(_ context.Context, state *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	v, ok := state.Read(preFilterKey)
	if !ok {
		return framework.AsStatus(fmt.Errorf("interpodaffinity: no PreFilter state"))
	}
	s := p.forNode(v.(*filterState), node)
	if !satisfiesAffinity(s, node) {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonAffinity)
	}
	if len(s.antiCounts) > 0 {
		for i := range s.anti {
			if val, ok := node.Labels[s.anti[i].TopologyKey]; ok && s.antiCounts[pair{s.anti[i].TopologyKey, val}] > 0 {
				return framework.NewStatus(framework.Unschedulable, ReasonAntiAffinity)
			}
		}
	}
	if len(s.existingAnti) > 0 {
		for k, val := range node.Labels {
			if s.existingAnti[pair{k, val}] > 0 {
				return framework.NewStatus(framework.Unschedulable, ReasonExistingAntiRule)
			}
		}
	}
	return nil
}

// satisfiesAffinity: the node must carry every term's topology key, and
// each term's domain must hold a matching pod — unless no pod anywhere
// matches and the pod matches its own terms (the first of a group that
// wants to be together may go anywhere).
func satisfiesAffinity(s *filterState, node *framework.NodeInfo) bool {
	found := true
	for i := range s.affinity {
		val, ok := node.Labels[s.affinity[i].TopologyKey]
		if !ok {
			return false
		}
		if s.affinityCounts[pair{s.affinity[i].TopologyKey, val}] <= 0 {
			found = false
		}
	}
	if found {
		return true
	}
	return len(s.affinityCounts) == 0 && allMatch(s.affinity, s.pod)
}

// scoreState is the per-domain score PreScore sums for Score.
type scoreState struct {
	byKey map[string]map[string]int64 // topology key → value → score
}

func (m *scoreState) addTerm(t *framework.AffinityTerm, weight int64, target *framework.PodInfo, nsLabels labels.Set, nl map[string]string) bool {
	if !t.Matches(target.Pod, nsLabels) {
		return false
	}
	val, ok := nl[t.TopologyKey]
	if !ok {
		return false
	}
	vals := m.byKey[t.TopologyKey]
	if vals == nil {
		vals = map[string]int64{}
		m.byKey[t.TopologyKey] = vals
	}
	vals[val] += weight
	return true
}

// PreScore sums, by topology domain, the weights the pod's preferred terms
// give the domains of the pods they select, and the weights placed pods'
// terms give the pod (their preferred terms, and their required affinity
// terms times hardPodAffinityWeight). It reads every pod when the pod has
// preferred terms, else only placed pods with terms of their own.
func (p *Plugin) PreScore(_ context.Context, state *framework.CycleState, pod *framework.PodInfo, feasible []*framework.NodeInfo) *framework.Status {
	mine := len(pod.PreferredAffinityTerms)+len(pod.PreferredAntiAffinityTerms) > 0
	if p.ignoreMine && !mine {
		return framework.NewStatus(framework.Skip)
	}
	if pod.AffinityErr != nil {
		return framework.AsStatus(fmt.Errorf("interpodaffinity: parsing pod: %w", pod.AffinityErr))
	}
	// Without preferred terms of its own, only placed pods with terms can
	// score the pod.
	all := feasible
	if p.h != nil {
		if mine {
			all = p.h.Snapshot().List()
		} else {
			all = p.h.Snapshot().HavePodsWithAffinity()
		}
	}
	pref := make([]framework.WeightedAffinityTerm, 0, len(pod.PreferredAffinityTerms))
	for _, t := range pod.PreferredAffinityTerms {
		pref = append(pref, framework.WeightedAffinityTerm{AffinityTerm: p.resolveNamespaces(t.AffinityTerm), Weight: t.Weight})
	}
	prefAnti := make([]framework.WeightedAffinityTerm, 0, len(pod.PreferredAntiAffinityTerms))
	for _, t := range pod.PreferredAntiAffinityTerms {
		prefAnti = append(prefAnti, framework.WeightedAffinityTerm{AffinityTerm: p.resolveNamespaces(t.AffinityTerm), Weight: t.Weight})
	}
	var nsLabels labels.Set
	s := &scoreState{byKey: map[string]map[string]int64{}}
	found := false
	score := func(e *framework.PodInfo, nl map[string]string) {
		for i := range pref {
			found = s.addTerm(&pref[i].AffinityTerm, int64(pref[i].Weight), e, nil, nl) || found
		}
		for i := range prefAnti {
			found = s.addTerm(&prefAnti[i].AffinityTerm, -int64(prefAnti[i].Weight), e, nil, nl) || found
		}
		if !e.HasAffinity() {
			return
		}
		if nsLabels == nil {
			nsLabels = p.namespaceLabels(pod.Pod.GetMetadata().GetNamespace())
		}
		if p.hardWeight > 0 {
			for i := range e.RequiredAffinityTerms {
				found = s.addTerm(&e.RequiredAffinityTerms[i], int64(p.hardWeight), pod, nsLabels, nl) || found
			}
		}
		if p.ignoreMine {
			return
		}
		for i := range e.PreferredAffinityTerms {
			found = s.addTerm(&e.PreferredAffinityTerms[i].AffinityTerm, int64(e.PreferredAffinityTerms[i].Weight), pod, nsLabels, nl) || found
		}
		for i := range e.PreferredAntiAffinityTerms {
			found = s.addTerm(&e.PreferredAntiAffinityTerms[i].AffinityTerm, -int64(e.PreferredAntiAffinityTerms[i].Weight), pod, nsLabels, nl) || found
		}
	}
	for _, n := range all {
		if len(n.Labels) == 0 {
			continue
		}
		if mine {
			for _, e := range n.Pods {
				score(e, n.Labels)
			}
			continue
		}
		for _, e := range n.PodsWithAffinity {
			score(e, n.Labels)
		}
	}
	if !found {
		return framework.NewStatus(framework.Skip)
	}
	state.Write(preScoreKey, s)
	return nil
}

// Score is the sum of the scores of node's domains.
func (*Plugin) Score(_ context.Context, state *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	v, ok := state.Read(preScoreKey)
	if !ok {
		return 0, framework.AsStatus(fmt.Errorf("interpodaffinity: no PreScore state"))
	}
	var sum int64
	for key, vals := range v.(*scoreState).byKey {
		if val, ok := node.Labels[key]; ok {
			sum += vals[val]
		}
	}
	return sum, nil
}

// ScoreExtensions implements framework.ScorePlugin.
func (p *Plugin) ScoreExtensions() framework.ScoreExtensions { return p }

// NormalizeScore maps the lowest sum to 0 and the highest to 100, linearly
// (all 0 when they are equal).
func (*Plugin) NormalizeScore(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, scores framework.NodeScoreList) *framework.Status {
	if len(scores) == 0 {
		return nil
	}
	lo, hi := scores[0].Score, scores[0].Score
	for _, s := range scores {
		lo, hi = min(lo, s.Score), max(hi, s.Score)
	}
	for i := range scores {
		if hi == lo {
			scores[i].Score = 0
			continue
		}
		scores[i].Score = int64(float64(framework.MaxNodeScore) * float64(scores[i].Score-lo) / float64(hi-lo))
	}
	return nil
}
