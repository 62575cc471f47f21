// This file holds one scheduling attempt's algorithm (filter, score, pick)
// and FitError, the "0/5 nodes are available: ..." explanation.
package framework

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the spans of scheduling attempts (hop 07 of docs/design.md,
// "One pod, hop by hop").
const tracerName = "github.com/kplane/kplane/services/scheduler"

// FitError says a pod fits no node, and why, node by node.
type FitError struct {
	Pod         *PodInfo
	NumAllNodes int
	// PreFilter is the PreFilter status that rejected the pod before any
	// node was looked at, if that is what happened.
	PreFilter *Status
	// Statuses are the nodes' rejections.
	Statuses NodeToStatus
}

// Error reads like Kubernetes': "0/5 nodes are available: 3 Insufficient
// cpu, 2 node(s) had untolerated taint {dedicated: gpu}." Reasons are
// counted over nodes and listed most frequent first.
func (e *FitError) Error() string {
	if e.NumAllNodes == 0 {
		return "no nodes available to schedule pods"
	}
	head := fmt.Sprintf("0/%d nodes are available", e.NumAllNodes)
	if e.PreFilter != nil {
		return head + ": " + e.PreFilter.Message() + "."
	}
	counts := map[string]int{}
	for _, s := range e.Statuses {
		for _, r := range s.Reasons() {
			counts[r]++
		}
	}
	if len(counts) == 0 {
		return head + "."
	}
	reasons := make([]string, 0, len(counts))
	for r := range counts {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if counts[reasons[i]] != counts[reasons[j]] {
			return counts[reasons[i]] > counts[reasons[j]]
		}
		return reasons[i] < reasons[j]
	})
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%d %s", counts[r], r)
	}
	return head + ": " + strings.Join(parts, ", ") + "."
}

// UnschedulablePlugins are the plugins that rejected the pod somewhere.
func (e *FitError) UnschedulablePlugins() map[string]bool {
	out := map[string]bool{}
	if e.PreFilter != nil {
		out[e.PreFilter.Plugin()] = true
	}
	for _, s := range e.Statuses {
		out[s.Plugin()] = true
	}
	return out
}

// Result is a successful attempt's choice.
type Result struct {
	Node           string
	EvaluatedNodes int
	FeasibleNodes  int
}

// Schedule runs PreFilter, Filter and (when more than one node fits) Score
// for pod over nodes and picks the best node, breaking ties at random.
// It returns a *FitError when no node fits, another error when a plugin failed.
func (f *Framework) Schedule(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo) (Result, error) {
	if len(nodes) == 0 {
		return Result{}, &FitError{Pod: pod, NumAllNodes: 0, Statuses: NodeToStatus{}}
	}
	// The spans join the attempt's span with its tracer provider.
	tracer := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName)
	fctx, span := tracer.Start(ctx, "filter", trace.WithAttributes(attribute.Int("nodes", len(nodes))))
	defer span.End()
	if s := f.RunPreFilter(fctx, state, pod, nodes); !s.IsSuccess() {
		if s.IsRejected() {
			return Result{}, &FitError{Pod: pod, NumAllNodes: len(nodes), PreFilter: s}
		}
		return Result{}, fmt.Errorf("prefilter %s: %w", s.Plugin(), s.AsError())
	}
	feasible, statuses, err := f.FindFeasible(fctx, state, pod, nodes)
	span.SetAttributes(attribute.Int("feasible", len(feasible)), attribute.Int("rejected", len(statuses)))
	span.End()
	if err != nil {
		return Result{}, fmt.Errorf("filter: %w", err)
	}
	if len(feasible) == 0 {
		return Result{}, &FitError{Pod: pod, NumAllNodes: len(nodes), Statuses: statuses}
	}
	res := Result{EvaluatedNodes: len(feasible) + len(statuses), FeasibleNodes: len(feasible)}
	if len(feasible) == 1 {
		res.Node = feasible[0].Name
		return res, nil
	}
	sctx, sspan := tracer.Start(ctx, "score", trace.WithAttributes(attribute.Int("nodes", len(feasible))))
	scores, s := f.RunScore(sctx, state, pod, feasible)
	sspan.End()
	if !s.IsSuccess() {
		return Result{}, fmt.Errorf("score %s: %w", s.Plugin(), s.AsError())
	}
	res.Node = SelectHost(scores, rand.IntN)
	return res, nil
}

// SelectHost returns the name with the highest score; among equal scores
// each is equally likely (reservoir sampling with intn).
func SelectHost(scores []NodeScore, intn func(int) int) string {
	if len(scores) == 0 {
		return ""
	}
	best, ties := scores[0], 1
	for _, s := range scores[1:] {
		switch {
		case s.Score > best.Score:
			best, ties = s, 1
		case s.Score == best.Score:
			ties++
			if intn(ties) == 0 {
				best = s
			}
		}
	}
	return best.Name
}
