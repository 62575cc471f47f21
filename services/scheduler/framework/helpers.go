// This file holds helpers several plugins share: toleration matching and
// the default score normalization.
package framework

import (
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

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

// DefaultNormalizeScore scales scores so the highest becomes maxScore
// (all zero stays zero); reverse flips them (maxScore - s), for plugins
// whose raw score counts something bad.
func DefaultNormalizeScore(maxScore int64, reverse bool, scores NodeScoreList) {
	var top int64
	for _, s := range scores {
		top = max(top, s.Score)
	}
	if top == 0 {
		if reverse {
			for i := range scores {
				scores[i].Score = maxScore
			}
		}
		return
	}
	for i := range scores {
		s := maxScore * scores[i].Score / top
		if reverse {
			s = maxScore - s
		}
		scores[i].Score = s
	}
}
