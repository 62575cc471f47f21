// Package placement holds what the node-placement fields of a pod mean,
// for every component that has to judge them the same way (the scheduler's
// plugins, the DaemonSet controller): a pod's nodeSelector and required
// node affinity against a node, and tolerations against taints, with
// Kubernetes' rules.
package placement

import (
	"strconv"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

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

// Tolerates reports whether toleration t tolerates taint, with Kubernetes'
// rules: an empty effect matches every effect; operator Exists matches any
// value (and, with an empty key, any taint); Equal (the default) matches
// key and value.
func Tolerates(t *corev1.Toleration, taint *corev1.Taint) bool {
	if t.GetEffect() != "" && t.GetEffect() != taint.GetEffect() {
		return false
	}
	if t.GetKey() != "" && t.GetKey() != taint.GetKey() {
		return false
	}
	switch t.GetOperator() {
	case "Exists":
		return true
	case "", "Equal":
		return t.GetKey() != "" && t.GetValue() == taint.GetValue()
	}
	return false
}

// TaintTolerated reports whether any of tols tolerates taint.
func TaintTolerated(tols []*corev1.Toleration, taint *corev1.Taint) bool {
	for _, t := range tols {
		if Tolerates(t, taint) {
			return true
		}
	}
	return false
}
