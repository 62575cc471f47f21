// This file holds what an API service replica remembers of its own latest
// writes of the few resources admission reads from the watch cache, so
// that a request it admits sees what the same replica wrote before it (a
// kube-apiserver's loopback informers see its own writes within
// milliseconds; a cache here may lag its store by more under load).

package apiserver

import (
	"context"
	"sync/atomic"
	"time"
)

// ownWriteWait bounds how long an admission read waits for its cache to
// reach the replica's latest write; past it, it answers from what the
// cache holds.
const ownWriteWait = 2 * time.Second

// ownWrites is the store revision of the replica's latest write of each
// tracked resource. The set is fixed at construction, so reads need no
// lock; a nil *ownWrites tracks nothing.
type ownWrites struct {
	revs map[string]*atomic.Int64
}

func newOwnWrites(resources ...string) *ownWrites {
	w := &ownWrites{revs: make(map[string]*atomic.Int64, len(resources))}
	for _, r := range resources {
		w.revs[r] = new(atomic.Int64)
	}
	return w
}

// note records a write of resource committed at rev.
func (w *ownWrites) note(resource string, rev int64) {
	if w == nil {
		return
	}
	v, ok := w.revs[resource]
	if !ok {
		return
	}
	for {
		cur := v.Load()
		if rev <= cur || v.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// latest is the revision of the replica's latest write of resource (0:
// none, or not tracked).
func (w *ownWrites) latest(resource string) int64 {
	if w == nil {
		return 0
	}
	if v, ok := w.revs[resource]; ok {
		return v.Load()
	}
	return 0
}

// waitOwnWrites waits, at most ownWriteWait, until ch has applied this
// replica's latest write of resource. A cache still behind then is read
// as it is, as an informer's lister would be.
func (s *Server) waitOwnWrites(ctx context.Context, ch *cacher, resource string) {
	rev := s.store.own.latest(resource)
	if rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, ownWriteWait)
	defer cancel()
	_ = ch.waitFor(ctx, rev)
}
