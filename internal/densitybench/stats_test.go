// This file holds the tests of the percentiles and of summarizing without
// reordering the caller's durations.

package main

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond // 1ms..100ms
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 99, 0},
		{"one value", []time.Duration{7}, 50, 7},
		{"one value p100", []time.Duration{7}, 100, 7},
		{"p50 of 100", hundred, 50, 50 * time.Millisecond},
		{"p99 of 100", hundred, 99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 100, 100 * time.Millisecond},
		{"tiny p is the min", hundred, 0.1, 1 * time.Millisecond},
		{"p50 of 4 is the 2nd", []time.Duration{1, 2, 3, 4}, 50, 2},
		{"p51 of 4 is the 3rd", []time.Duration{1, 2, 3, 4}, 51, 3},
		{"p99 of 3 is the max", []time.Duration{1, 2, 3}, 99, 3},
	} {
		if got := percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("%s: percentile(p=%v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

func TestSummarizeDoesNotReorderInput(t *testing.T) {
	in := []time.Duration{3 * time.Second, time.Second, 2 * time.Second}
	s := summarize(in)
	if s.Count != 3 || s.P50 != 2 || s.Max != 3 || s.P99 != 3 {
		t.Errorf("summary = %+v, want count 3, p50 2, p99 3, max 3", s)
	}
	if in[0] != 3*time.Second {
		t.Errorf("input reordered: %v", in)
	}
}
