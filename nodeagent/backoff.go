// This file holds the kubelet's back-off between container restarts and
// image pulls: 10 s doubling to 5 min.

package nodeagent

import "time"

// Backoff is the kubelet's restart and pull back-off: the n-th wait (n from
// 0) is Base·2ⁿ, never more than Max.
type Backoff struct {
	Base, Max time.Duration
}

// DefaultBackoff is the kubelet's: 10 s doubling to 5 min.
var DefaultBackoff = Backoff{Base: 10 * time.Second, Max: 5 * time.Minute}

// Delay returns the wait after n earlier failures.
func (b Backoff) Delay(n int) time.Duration {
	if n < 0 {
		n = 0
	}
	d := b.Base
	for i := 0; i < n; i++ {
		if d >= b.Max/2 {
			return b.Max
		}
		d *= 2
	}
	if d > b.Max {
		return b.Max
	}
	return d
}
