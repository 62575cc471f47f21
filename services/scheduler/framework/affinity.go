// This file holds a pod's inter-pod affinity and anti-affinity terms parsed
// once (AffinityTerm): label and namespace selectors turned into
// apimachinery selectors, so the plugins that read them over thousands of
// pods per cycle never parse a selector twice.
package framework

import (
	"fmt"

	k8smeta "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// AffinityTerm is a PodAffinityTerm ready to match pods.
type AffinityTerm struct {
	// Namespaces the term selects by name: the term's own list, or the
	// owning pod's namespace when the term names none and has no selector.
	Namespaces sets.Set[string]
	// Selector selects pods by label (matchLabelKeys and mismatchLabelKeys
	// merged in); a nil labelSelector selects nothing.
	Selector labels.Selector
	// NamespaceSelector selects namespaces by label (labels.Nothing() when
	// the term has none; an empty one selects every namespace).
	NamespaceSelector labels.Selector
	TopologyKey       string
}

// Matches reports whether pod is selected by t; nsLabels are the labels of
// pod's namespace (nil when the caller knows the namespace selector is
// already merged into Namespaces).
func (t *AffinityTerm) Matches(pod *corev1.Pod, nsLabels labels.Set) bool {
	m := pod.GetMetadata()
	if !t.Namespaces.Has(m.GetNamespace()) && !t.NamespaceSelector.Matches(nsLabels) {
		return false
	}
	return t.Selector.Matches(labels.Set(m.GetLabels()))
}

// WeightedAffinityTerm is a preferred term with its weight.
type WeightedAffinityTerm struct {
	AffinityTerm
	Weight int32
}

// podAffinity is what NewPodInfo parses from a pod's spec.affinity.
type podAffinity struct {
	RequiredAffinityTerms      []AffinityTerm
	RequiredAntiAffinityTerms  []AffinityTerm
	PreferredAffinityTerms     []WeightedAffinityTerm
	PreferredAntiAffinityTerms []WeightedAffinityTerm
}

// parseAffinity parses pod's inter-pod terms; an error means a selector the
// API service should have refused.
func parseAffinity(pod *corev1.Pod) (podAffinity, error) {
	var out podAffinity
	aff := pod.GetSpec().GetAffinity()
	if aff.GetPodAffinity() == nil && aff.GetPodAntiAffinity() == nil {
		return out, nil
	}
	var err error
	if out.RequiredAffinityTerms, err = parseTerms(pod, aff.GetPodAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()); err != nil {
		return out, err
	}
	if out.RequiredAntiAffinityTerms, err = parseTerms(pod, aff.GetPodAntiAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()); err != nil {
		return out, err
	}
	if out.PreferredAffinityTerms, err = parseWeighted(pod, aff.GetPodAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution()); err != nil {
		return out, err
	}
	if out.PreferredAntiAffinityTerms, err = parseWeighted(pod, aff.GetPodAntiAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution()); err != nil {
		return out, err
	}
	return out, nil
}

func parseTerms(pod *corev1.Pod, terms []*corev1.PodAffinityTerm) ([]AffinityTerm, error) {
	if len(terms) == 0 {
		return nil, nil
	}
	out := make([]AffinityTerm, 0, len(terms))
	for _, t := range terms {
		at, err := NewAffinityTerm(pod, t)
		if err != nil {
			return nil, err
		}
		out = append(out, at)
	}
	return out, nil
}

func parseWeighted(pod *corev1.Pod, terms []*corev1.WeightedPodAffinityTerm) ([]WeightedAffinityTerm, error) {
	if len(terms) == 0 {
		return nil, nil
	}
	out := make([]WeightedAffinityTerm, 0, len(terms))
	for _, t := range terms {
		if t.GetWeight() == 0 {
			continue // as Kubernetes: a zero weight counts for nothing
		}
		at, err := NewAffinityTerm(pod, t.GetPodAffinityTerm())
		if err != nil {
			return nil, err
		}
		out = append(out, WeightedAffinityTerm{AffinityTerm: at, Weight: t.GetWeight()})
	}
	return out, nil
}

// NewAffinityTerm parses term of pod. As kube-apiserver does when it
// stores a pod (kplane's API service stores the term as written), the
// values of pod's labels named by matchLabelKeys are added to the label
// selector as "key in (value)" and those named by mismatchLabelKeys as
// "key notin (value)"; a term without labelSelector stays matching nothing.
func NewAffinityTerm(pod *corev1.Pod, term *corev1.PodAffinityTerm) (AffinityTerm, error) {
	sel, err := Selector(term.GetLabelSelector())
	if err != nil {
		return AffinityTerm{}, fmt.Errorf("labelSelector: %w", err)
	}
	if term.GetLabelSelector() != nil {
		podLabels := pod.GetMetadata().GetLabels()
		for _, keys := range []struct {
			keys []string
			op   selection.Operator
		}{{term.GetMatchLabelKeys(), selection.In}, {term.GetMismatchLabelKeys(), selection.NotIn}} {
			for _, k := range keys.keys {
				v, ok := podLabels[k]
				if !ok {
					continue
				}
				r, err := labels.NewRequirement(k, keys.op, []string{v})
				if err != nil {
					return AffinityTerm{}, fmt.Errorf("matchLabelKeys: %w", err)
				}
				sel = sel.Add(*r)
			}
		}
	}
	nsSel := labels.Nothing()
	if term.GetNamespaceSelector() != nil {
		if nsSel, err = Selector(term.GetNamespaceSelector()); err != nil {
			return AffinityTerm{}, fmt.Errorf("namespaceSelector: %w", err)
		}
	}
	ns := sets.New(term.GetNamespaces()...)
	if len(ns) == 0 && term.GetNamespaceSelector() == nil {
		ns.Insert(pod.GetMetadata().GetNamespace())
	}
	return AffinityTerm{Namespaces: ns, Selector: sel, NamespaceSelector: nsSel, TopologyKey: term.GetTopologyKey()}, nil
}

// Selector turns a LabelSelector into a labels.Selector by apimachinery's
// rules: nil selects nothing, an empty selector everything.
func Selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Nothing(), nil
	}
	ls := &k8smeta.LabelSelector{MatchLabels: s.GetMatchLabels()}
	for _, e := range s.GetMatchExpressions() {
		ls.MatchExpressions = append(ls.MatchExpressions, k8smeta.LabelSelectorRequirement{
			Key: e.GetKey(), Operator: k8smeta.LabelSelectorOperator(e.GetOperator()), Values: e.GetValues()})
	}
	sel, err := k8smeta.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("framework: %w", err)
	}
	return sel, nil
}
