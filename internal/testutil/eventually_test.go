// This file holds the tests of Eventually: it returns once its condition
// holds and fails the test, with the last observation, when it never does.

package testutil

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of stopping the
// goroutine, so a failing Eventually can be observed.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestEventuallyReturnsOnceTrue(t *testing.T) {
	calls := 0
	Eventually(t, "the third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
	n := 0
	Eventually(t, "the second call", func() (bool, string) { n++; return n == 2, fmt.Sprint(n) })
	if n != 2 {
		t.Fatalf("cond called %d times, want 2", n)
	}
}

func TestEventuallyReportsLastObservation(t *testing.T) {
	r := &recorder{TB: t}
	n := 0
	EventuallyWithin(r, 50*time.Millisecond, "n to reach -1", func() (bool, string) {
		n++
		return false, fmt.Sprintf("n=%d", n)
	})
	want := fmt.Sprintf("n to reach -1; last observed: n=%d", n)
	if !strings.Contains(r.failed, want) {
		t.Fatalf("failure message %q does not contain %q", r.failed, want)
	}
	r = &recorder{TB: t}
	EventuallyWithin(r, 10*time.Millisecond, "never", func() bool { return false })
	if !strings.HasPrefix(r.failed, "timed out after 10ms waiting for never") || strings.Contains(r.failed, "last observed") {
		t.Fatalf("failure message %q", r.failed)
	}
}
