// This file holds how a proposal becomes the new replica count: the
// stabilization windows over recent recommendations and the scaling limits,
// Kubernetes' built-in rules for an autoscaler without a behavior (a 5
// minute scale-down window, at most double or 4 more replicas), and its
// behavior's windows, policies and selectPolicy otherwise, with the
// AbleToScale and ScalingLimited conditions Kubernetes sets.

package hpa

import (
	"math"
	"time"

	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
)

// recordInitialRecommendation seeds an autoscaler's recommendations with
// the current count the first time it is seen.
func (c *Controller) recordInitialRecommendation(current int32, k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recommendations[k] == nil {
		c.recommendations[k] = []recommendation{{current, time.Now()}}
	}
}

// normalize bounds desired without a behavior.
func (c *Controller) normalize(hpa *autoscalingv2.HorizontalPodAutoscaler, k string, current, desired, minReplicas int32) int32 {
	stabilized := c.stabilize(k, desired)
	if stabilized != desired {
		setCondition(hpa, "AbleToScale", "True", "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation")
	} else {
		setCondition(hpa, "AbleToScale", "True", "ReadyForNewScale", "recommended size matches current size")
	}
	out, reason, msg := limitWithRules(current, stabilized, minReplicas, hpa.Spec.GetMaxReplicas())
	status := "True"
	if out == stabilized {
		status = "False"
	}
	setCondition(hpa, "ScalingLimited", status, reason, "%s", msg)
	return out
}

// stabilize is the highest recommendation within the downscale window,
// recording desired.
func (c *Controller) stabilize(k string, desired int32) int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	cutoff := now.Add(-c.cfg.DownscaleStabilization)
	highest, old := desired, -1
	for i, r := range c.recommendations[k] {
		if r.at.Before(cutoff) {
			old = i
		} else if r.replicas > highest {
			highest = r.replicas
		}
	}
	if old >= 0 {
		c.recommendations[k][old] = recommendation{desired, now}
	} else {
		c.recommendations[k] = append(c.recommendations[k], recommendation{desired, now})
	}
	return highest
}

// limitWithRules applies minReplicas, maxReplicas and the built-in scale-up
// limit (twice the current count, at least 4).
func limitWithRules(current, desired, minReplicas, maxReplicas int32) (int32, string, string) {
	upLimit := int32(math.Max(2*float64(current), 4))
	maximum, reason, msg := maxReplicas, "TooManyReplicas", "the desired replica count is more than the maximum replica count"
	if maxReplicas > upLimit {
		maximum, reason, msg = upLimit, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
	}
	if desired < minReplicas {
		return minReplicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
	}
	if desired > maximum {
		return maximum, reason, msg
	}
	return desired, "DesiredWithinRange", "the desired count is within the acceptable range"
}

// normalizeWithBehaviors bounds desired with hpa's behavior.
func (c *Controller) normalizeWithBehaviors(hpa *autoscalingv2.HorizontalPodAutoscaler, k string, current, desired, minReplicas int32) int32 {
	b := hpa.Spec.GetBehavior()
	up, down := b.GetScaleUp(), b.GetScaleDown()
	upWindow := up.GetStabilizationWindowSeconds()
	downWindow := int32(c.cfg.DownscaleStabilization.Seconds())
	if down.StabilizationWindowSeconds != nil {
		downWindow = down.GetStabilizationWindowSeconds()
	}
	stabilized, reason, msg := c.stabilizeWithWindows(k, current, desired, upWindow, downWindow)
	if stabilized != desired {
		setCondition(hpa, "AbleToScale", "True", reason, "%s", msg)
	} else {
		setCondition(hpa, "AbleToScale", "True", "ReadyForNewScale", "recommended size matches current size")
	}
	out, reason, msg := c.limitWithBehavior(k, current, stabilized, minReplicas, hpa.Spec.GetMaxReplicas(), up, down)
	status := "True"
	if out == stabilized {
		status = "False"
	}
	setCondition(hpa, "ScalingLimited", status, reason, "%s", msg)
	return out
}

// stabilizeWithWindows keeps the count between the lowest recommendation
// of the scale-up window and the highest of the scale-down window.
func (c *Controller) stabilizeWithWindows(k string, current, desired, upWindow, downWindow int32) (int32, string, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	upCut := now.Add(-time.Duration(upWindow) * time.Second)
	downCut := now.Add(-time.Duration(downWindow) * time.Second)
	upRec, downRec, old := desired, desired, -1
	for i, r := range c.recommendations[k] {
		if r.at.After(upCut) {
			upRec = min(r.replicas, upRec)
		}
		if r.at.After(downCut) {
			downRec = max(r.replicas, downRec)
		}
		if r.at.Before(upCut) && r.at.Before(downCut) {
			old = i
		}
	}
	out := max(current, upRec)
	out = min(out, downRec)
	if old >= 0 {
		c.recommendations[k][old] = recommendation{desired, now}
	} else {
		c.recommendations[k] = append(c.recommendations[k], recommendation{desired, now})
	}
	if desired >= current {
		return out, "ScaleUpStabilized", "recent recommendations were lower than current one, applying the lowest recent recommendation"
	}
	return out, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation"
}

// limitWithBehavior applies the scaling policies over the recent scale
// events and the replica bounds.
func (c *Controller) limitWithBehavior(k string, current, desired, minReplicas, maxReplicas int32, up, down *autoscalingv2.HPAScalingRules) (int32, string, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ups, downs := c.scaleUpEvents[k], c.scaleDownEvents[k]
	switch {
	case desired > current:
		limit := max(policyLimit(current, ups, downs, up, true), current)
		maximum, reason, msg := maxReplicas, "TooManyReplicas", "the desired replica count is more than the maximum replica count"
		if maximum > limit {
			maximum, reason, msg = limit, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
		}
		if desired > maximum {
			return maximum, reason, msg
		}
	case desired < current:
		limit := min(policyLimit(current, ups, downs, down, false), current)
		minimum, reason, msg := minReplicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
		if minimum < limit {
			minimum, reason, msg = limit, "ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate"
		}
		if desired < minimum {
			return minimum, reason, msg
		}
	}
	return desired, "DesiredWithinRange", "the desired count is within the acceptable range"
}

// policyLimit is the furthest count rules' policies allow from the count
// at the start of each policy's period (selectPolicy picks among them).
func policyLimit(current int32, ups, downs []scaleEvent, rules *autoscalingv2.HPAScalingRules, scaleUp bool) int32 {
	sel := rules.GetSelectPolicy()
	if sel == "Disabled" {
		return current
	}
	// For a scale-up Max picks the highest count, for a scale-down the
	// lowest; Min the other way round.
	pickHigh := (sel != "Min") == scaleUp
	result := int32(math.MinInt32)
	if !pickHigh {
		result = math.MaxInt32
	}
	for _, p := range rules.GetPolicies() {
		start := current - changeInPeriod(p.GetPeriodSeconds(), ups) + changeInPeriod(p.GetPeriodSeconds(), downs)
		var proposed int32
		switch {
		case p.GetType() == "Pods" && scaleUp:
			proposed = start + p.GetValue()
		case p.GetType() == "Pods":
			proposed = start - p.GetValue()
		case p.GetType() == "Percent" && scaleUp:
			proposed = int32(math.Ceil(float64(start) * (1 + float64(p.GetValue())/100)))
		case p.GetType() == "Percent":
			proposed = int32(float64(start) * (1 - float64(p.GetValue())/100))
		}
		if pickHigh {
			result = max(result, proposed)
		} else {
			result = min(result, proposed)
		}
	}
	return result
}

// changeInPeriod sums the replica changes of events within the last
// period seconds.
func changeInPeriod(period int32, events []scaleEvent) int32 {
	cutoff := time.Now().Add(-time.Duration(period) * time.Second)
	var n int32
	for _, e := range events {
		if e.at.After(cutoff) {
			n += e.change
		}
	}
	return n
}

// storeScaleEvent remembers a rescale for the behavior's policies
// (reusing an entry older than the longest policy period).
func (c *Controller) storeScaleEvent(b *autoscalingv2.HorizontalPodAutoscalerBehavior, k string, prev, next int32) {
	if b == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	events, rules, change := c.scaleDownEvents, b.GetScaleDown(), prev-next
	if next > prev {
		events, rules, change = c.scaleUpEvents, b.GetScaleUp(), next-prev
	}
	var longest int32
	for _, p := range rules.GetPolicies() {
		longest = max(longest, p.GetPeriodSeconds())
	}
	now := time.Now()
	cutoff := now.Add(-time.Duration(longest) * time.Second)
	list := events[k]
	old := -1
	for i := range list {
		if list[i].at.Before(cutoff) {
			list[i].outdated = true
		}
		if list[i].outdated {
			old = i
		}
	}
	e := scaleEvent{change: change, at: now}
	if old >= 0 {
		list[old] = e
	} else {
		list = append(list, e)
	}
	events[k] = list
}
