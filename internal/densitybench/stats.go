// This file holds the startup-time summary: nearest-rank percentiles of a
// set of durations.

package main

import (
	"math"
	"slices"
	"time"
)

// Summary is the distribution of a set of durations, in seconds.
type Summary struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest value with at least p % of the values at or below
// it. It returns 0 for an empty slice.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// summarize sorts a copy of ds and returns its summary.
func summarize(ds []time.Duration) Summary {
	s := slices.Clone(ds)
	slices.Sort(s)
	sec := func(d time.Duration) float64 { return d.Seconds() }
	return Summary{
		Count: len(s),
		P50:   sec(percentile(s, 50)),
		P90:   sec(percentile(s, 90)),
		P99:   sec(percentile(s, 99)),
		Max:   sec(percentile(s, 100)),
	}
}
