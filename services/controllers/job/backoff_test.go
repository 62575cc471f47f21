// This file holds the test of the back-off before a failed pod's
// replacement.

package job

import (
	"testing"
	"time"
)

// TestBackoff checks the delay before a failed pod's replacement, as
// Kubernetes computes it: the base delay doubled for each further failure
// since the last success, capped, counted from the last failure.
func TestBackoff(t *testing.T) {
	c := &Controller{cfg: Config{PodFailureBackoff: 10 * time.Second, MaxBackoff: 10 * time.Minute}}
	last := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		failures int
		after    time.Duration
		want     time.Duration
	}{
		{name: "no failure", failures: 0, want: 0},
		{name: "first failure", failures: 1, after: 4 * time.Second, want: 6 * time.Second},
		{name: "third failure", failures: 3, after: 0, want: 40 * time.Second},
		{name: "capped", failures: 20, after: time.Minute, want: 9 * time.Minute},
		{name: "over", failures: 2, after: time.Hour, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.remaining(backoffRecord{failures: tc.failures, lastFailure: last}, last.Add(tc.after))
			if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
