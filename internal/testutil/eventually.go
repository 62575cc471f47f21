// This file holds Eventually, the one polling helper tests use to wait for
// something another goroutine or process brings about.

package testutil

import (
	"testing"
	"time"
)

// DefaultWait is how long Eventually polls before it fails the test: long
// enough for a loaded CI machine, and only ever spent when the test fails.
const DefaultWait = 30 * time.Second

// pollEvery is the pause between two calls of a condition.
const pollEvery = 20 * time.Millisecond

// Condition is what Eventually polls: either a bare predicate or one that
// also describes what it observed, which the failure message then reports.
type Condition interface {
	func() bool | func() (bool, string)
}

// Eventually calls cond every 20 ms until it reports true, failing the test
// with what and the last observation if that takes longer than DefaultWait.
func Eventually[C Condition](t testing.TB, what string, cond C) {
	t.Helper()
	EventuallyWithin(t, DefaultWait, what, cond)
}

// EventuallyWithin is Eventually with its own time limit.
func EventuallyWithin[C Condition](t testing.TB, limit time.Duration, what string, cond C) {
	t.Helper()
	check := observe(cond)
	deadline := time.Now().Add(limit)
	for {
		ok, last := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if last == "" {
				t.Fatalf("timed out after %v waiting for %s", limit, what)
			} else {
				t.Fatalf("timed out after %v waiting for %s; last observed: %s", limit, what, last)
			}
			return
		}
		time.Sleep(pollEvery)
	}
}

// observe turns either kind of Condition into one that reports an
// observation (empty for a bare predicate).
func observe[C Condition](cond C) func() (bool, string) {
	switch c := any(cond).(type) {
	case func() (bool, string):
		return c
	case func() bool:
		return func() (bool, string) { return c(), "" }
	}
	panic("unreachable: Condition has two forms")
}
