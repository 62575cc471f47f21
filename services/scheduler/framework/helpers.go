// This file holds helpers several plugins share: the default score
// normalization.
package framework

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
