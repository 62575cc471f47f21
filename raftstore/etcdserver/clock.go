// This file holds the clock auto-compaction reads: an interface of the
// three calls it makes, so that tests drive it with a fake clock (any fake
// with these methods, such as k8s.io/utils' FakeClock) and the store links
// no clock library.

package etcdserver

import "time"

// Clock tells the time and waits.
type Clock interface {
	Now() time.Time
	Since(t time.Time) time.Duration
	After(d time.Duration) <-chan time.Time
}

// realClock is the system's clock.
type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) Since(t time.Time) time.Duration        { return time.Since(t) }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
