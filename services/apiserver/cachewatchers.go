// This file holds the watch cache's watchers: each one's queue of events,
// the filters shared by watchers with equal selectors, the dispatch of an
// event to them, bookmarks, and starting a watch from a resourceVersion
// (with its initial events) or cutting a slow watcher off.

package apiserver

import (
	"context"
	"fmt"
	"sync"
	"time"
	"weak"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// watchFilter selects what a watcher sees. Filters with the same key select
// the same objects.
type watchFilter struct {
	key string
	// match reports whether obj is selected; memo, when not nil, holds (or
	// is given) obj's field set.
	match func(obj proto.Message, memo *objectFields) bool
	// exact, when not nil, reports the value match requires a field to
	// equal, if it requires one (fields.Selector.RequiresExactMatch).
	exact func(field string) (value string, ok bool)
}

// filterGroup is the filter shared by the watchers with one key, with what
// it made of the last event dispatched (under the cacher's mu).
type filterGroup struct {
	f    watchFilter
	refs int
	last *watchEvent // the event out was computed for
	out  *watchEvent // transform(last, f.match)
}

// cacheWatcher is one client watch. The cacher queues events for it
// without blocking; a watcher with buffer events queued (besides the batch
// its goroutine is sending) is cut off: removed and finished.
//
// The queue is a slice that grows with what is actually waiting, not a
// channel of the buffer's size: a channel allocates its whole buffer up
// front (8 KB of pointers per watcher at the default 1,000), and the
// garbage collector scans all of it on every cycle, for 10,000 watchers 80
// MB of mostly empty slots, more than half the service's live heap.
type cacheWatcher struct {
	initial   []*watchEvent
	group     *filterGroup // nil: every event
	indexed   bool         // kept under index in the cacher's indexed map
	index     string
	minRev    int64
	bookmarks bool
	cutOff    bool // set before the watcher is finished because it was too slow
	closed    bool

	// notify has room for one signal: something was queued or the watcher
	// finished since its goroutine last looked.
	notify chan struct{}
	qmu    sync.Mutex
	queue  []*watchEvent // in order, not yet taken by next
	spare  []*watchEvent // the batch next returned last, reused once its caller is done
	done   bool          // finished: nothing more will be queued
}

func newCacheWatcher(bookmarks bool) *cacheWatcher {
	return &cacheWatcher{notify: make(chan struct{}, 1), bookmarks: bookmarks}
}

// push queues e unless limit events are already waiting; it never blocks.
func (w *cacheWatcher) push(e *watchEvent, limit int) bool {
	w.qmu.Lock()
	if len(w.queue) >= limit || w.done {
		w.qmu.Unlock()
		return false
	}
	w.queue = append(w.queue, e)
	w.qmu.Unlock()
	w.signal()
	return true
}

// finish tells the watcher's goroutine that nothing more will come: next
// returns what is still queued, then false.
func (w *cacheWatcher) finish() {
	w.qmu.Lock()
	w.done = true
	w.qmu.Unlock()
	w.signal()
}

func (w *cacheWatcher) signal() {
	select {
	case w.notify <- struct{}{}:
	default: // a signal is already pending
	}
}

// next blocks until events are queued and returns them, in order; the
// batch is the caller's until its next call. It returns false once the
// watcher is finished and everything queued before was returned. Only the
// watcher's own goroutine calls it.
func (w *cacheWatcher) next() ([]*watchEvent, bool) {
	for {
		w.qmu.Lock()
		if len(w.queue) > 0 {
			batch := w.queue
			reuse := w.spare // the previous batch: its caller is done with it
			clear(reuse)
			if cap(reuse) > 64 {
				reuse = nil // a burst's backing array is not kept for good
			}
			w.queue, w.spare = reuse[:0], batch
			w.qmu.Unlock()
			return batch, true
		}
		if w.done {
			w.qmu.Unlock()
			return nil, false
		}
		w.qmu.Unlock()
		<-w.notify
	}
}

// transform is what a watcher with filter should see of event e: nil if
// nothing. The caller holds the cacher's mu (derived events are memoized on
// e).
func transform(e *watchEvent, filter func(proto.Message, *objectFields) bool) *watchEvent {
	if filter == nil {
		return e
	}
	cur := e.typ != eventDeleted && filter(e.obj, &e.objFields)
	prev := e.prev != nil && filter(e.prev, &e.prevFields)
	switch {
	case e.typ == eventDeleted:
		if prev {
			return e
		}
	case cur && (prev || e.typ == eventAdded):
		return e
	case cur:
		// Started matching: the watcher sees it added.
		if e.added == nil {
			e.added = &watchEvent{typ: eventAdded, rev: e.rev, key: e.key, obj: e.obj}
		}
		return e.added
	case prev:
		// Stopped matching: the watcher sees it deleted, at this revision.
		if e.deleted == nil {
			e.deleted = &watchEvent{typ: eventDeleted, rev: e.rev, key: e.key, obj: e.obj}
		}
		return e.deleted
	}
	return nil
}

// indexFor is the field the watchers of r's objects are indexed by, and
// how to read it: a pod's spec.nodeName, which every node agent's watch
// selects on, and a ConfigMap's or Secret's metadata.name, which each of a
// node agent's single-object watches selects on (thousands of them across
// the nodes; kube-apiserver's cacher scopes watchers by name too).
func indexFor(r *resourceInfo) (string, func(proto.Message) string) {
	switch {
	case r.Group == "" && r.Resource == "pods":
		return "spec.nodeName", func(obj proto.Message) string {
			p, _ := obj.(*corev1.Pod)
			return p.GetSpec().GetNodeName()
		}
	case r.Group == "" && (r.Resource == "configmaps" || r.Resource == "secrets") && r.custom == nil:
		return "metadata.name", func(obj proto.Message) string {
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				return o.GetMetadata().GetName()
			case *corev1.Secret:
				return o.GetMetadata().GetName()
			}
			return ""
		}
	}
	return "", nil
}

// dispatchLocked queues e for every watcher it may concern: the unindexed
// ones, and the indexed ones under the index values of e's object and of
// its previous object (a watcher requiring another value matches neither,
// so transform would give it nothing).
func (c *cacher) dispatchLocked(e *watchEvent) {
	for w := range c.unindexed {
		c.dispatchToLocked(w, e)
	}
	if c.indexOf == nil || len(c.indexed) == 0 {
		return
	}
	v := c.indexOf(e.obj)
	for w := range c.indexed[v] {
		c.dispatchToLocked(w, e)
	}
	if e.prev != nil {
		if pv := c.indexOf(e.prev); pv != v {
			for w := range c.indexed[pv] {
				c.dispatchToLocked(w, e)
			}
		}
	}
}

func (c *cacher) dispatchToLocked(w *cacheWatcher, e *watchEvent) {
	if e.rev <= w.minRev {
		return
	}
	te := e
	if g := w.group; g != nil {
		if g.last != e {
			g.last, g.out = e, transform(e, g.f.match)
		}
		te = g.out
	}
	if te == nil {
		return
	}
	if !w.push(te, c.buffer) {
		c.closeWatcherLocked(w, true)
	}
}

// addWatcherLocked registers w, under its index value if its filter
// requires one.
func (c *cacher) addWatcherLocked(w *cacheWatcher, wf watchFilter) {
	c.watchers[w] = struct{}{}
	if c.indexField != "" && wf.exact != nil {
		w.index, w.indexed = wf.exact(c.indexField)
	}
	if !w.indexed {
		c.unindexed[w] = struct{}{}
		return
	}
	set := c.indexed[w.index]
	if set == nil {
		set = map[*cacheWatcher]struct{}{}
		c.indexed[w.index] = set
	}
	set[w] = struct{}{}
}

func (c *cacher) closeWatcherLocked(w *cacheWatcher, cutOff bool) {
	if w.closed {
		return
	}
	w.closed = true
	w.cutOff = cutOff
	delete(c.watchers, w)
	if !w.indexed {
		delete(c.unindexed, w)
	} else if set := c.indexed[w.index]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(c.indexed, w.index)
		}
	}
	if g := w.group; g != nil {
		if g.refs--; g.refs == 0 {
			delete(c.groups, g.f.key)
		}
	}
	w.finish()
	if cutOff {
		c.log.Info("watcher cut off: it fell behind", "buffer", c.buffer)
	}
}

// bookmarks sends a BOOKMARK with the cache's revision to every watcher that
// asked for them, every period. Bookmarks go through the watcher's queue,
// so they are never ahead of an event not yet delivered.
func (c *cacher) bookmarks(ctx context.Context) {
	t := time.NewTicker(c.bookmark)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		ev := &watchEvent{typ: eventBookmark, rev: c.rev}
		for w := range c.watchers {
			if !w.bookmarks || c.rev <= w.minRev {
				continue
			}
			_ = w.push(ev, c.buffer) // full: the next event or bookmark will do
		}
		c.mu.Unlock()
	}
}

// watch registers a watcher from resourceVersion rv: 0 sends ADDED for every
// existing object first (unless sendInitial is false); otherwise the events
// after rv, which must be inside the window. A nil wf.match selects every
// event.
func (c *cacher) watch(ctx context.Context, rv int64, wf watchFilter, bookmarks bool, sendInitial *bool) (*cacheWatcher, error) {
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	filter := wf.match
	w := newCacheWatcher(bookmarks)
	initial := rv == 0
	if sendInitial != nil {
		initial = *sendInitial
	}
	switch {
	case rv == 0 || (initial && rv <= c.rev):
		if initial {
			for k, obj := range c.state {
				if filter == nil || filter(obj, nil) {
					w.initial = append(w.initial, c.initialEventLocked(k, obj))
				}
			}
		}
		if initial && bookmarks {
			// Tell the client where the initial state ends.
			w.initial = append(w.initial, &watchEvent{typ: eventBookmark, rev: c.rev, initialEnd: sendInitial != nil && *sendInitial})
		}
		w.minRev = c.rev
	case rv < c.start:
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, c.start+1))
	default:
		for _, e := range c.events {
			if e.rev <= rv {
				continue
			}
			if te := transform(e, filter); te != nil {
				w.initial = append(w.initial, te)
			}
		}
		w.minRev = max(rv, c.rev)
	}
	if filter != nil {
		g := c.groups[wf.key]
		if g == nil {
			g = &filterGroup{f: wf}
			c.groups[wf.key] = g
		}
		g.refs++
		w.group = g
	}
	c.addWatcherLocked(w, wf)
	return w, nil
}

// stop removes w.
func (c *cacher) stop(w *cacheWatcher) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeWatcherLocked(w, false)
}

// initialEventLocked returns the ADDED event giving a new watcher the
// object at key k, shared with every other watcher given it while it is
// current (see initial).
func (c *cacher) initialEventLocked(k string, obj proto.Message) *watchEvent {
	if e := c.initial[k].Value(); e != nil && e.obj == obj {
		return e
	}
	e := &watchEvent{typ: eventAdded, rev: rvOf(obj), key: k, obj: obj}
	c.initial[k] = weak.Make(e)
	return e
}
