// This file holds the watch cache: per resource, the current state and a
// window of recent events from the store, served to many watchers with
// selectors, bookmarks and indexed dispatch, relisting after compaction.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
	"weak"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/telemetry"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apierrors"
)

// Watch event types, as Kubernetes names them.
const (
	eventAdded    = "ADDED"
	eventModified = "MODIFIED"
	eventDeleted  = "DELETED"
	eventBookmark = "BOOKMARK"
)

// watchEvent is one change as the cache saw it. obj is the object after the
// change (for a delete: its last state, with the delete's revision as its
// resourceVersion); prev is the object before (nil for a create). Events
// and their objects are shared by every watcher and never modified.
type watchEvent struct {
	typ  string
	rev  int64
	key  string
	obj  proto.Message
	prev proto.Message

	// The event's wire form, encoded by the first watcher that sends it,
	// and the trace context its object records (annotation), read then too.
	once sync.Once
	enc  *preEncoded
	err  error
	sc   trace.SpanContext

	// The event as a line of Kubernetes' JSON watch stream in its
	// StreamWatch messages, rendered and encoded by the first JSON watcher
	// that sends it (watchjson.go).
	jsonOnce   sync.Once
	jsonChunks []*preEncoded
	jsonSC     trace.SpanContext
	jsonErr    error

	// The event as watchers whose selector it starts or stops matching see
	// it (ADDED, DELETED), made by transform under the cacher's mu the first
	// time a watcher needs it and shared like the event, so that it too is
	// encoded once however many watchers it goes to.
	added, deleted *watchEvent

	// The field sets of obj and prev, built by the first selector with a
	// field requirement that needs them (under the cacher's mu) and shared
	// by every other one.
	objFields, prevFields objectFields
}

// encoded returns the event's response message, marshalled once, and the
// trace context its object records.
func (e *watchEvent) encoded(build func() proto.Message) (*preEncoded, trace.SpanContext, error) {
	e.once.Do(func() {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(build())
		e.enc, e.err = newPreEncoded(b), err
		if e.typ != eventBookmark {
			e.sc = telemetry.ObjectSpanContext(meta(e.obj).GetAnnotations())
		}
	})
	return e.enc, e.sc, e.err
}

// cacher is the watch multiplexer of one resource: one store watch feeding
// the current state, a window of recent events and any number of watchers.
//
// Invariants (under mu): every event with a revision in (start, rev] is in
// events, in order; state is the store's content at rev.
type cacher struct {
	r        *resourceInfo
	st       *storage
	log      *slog.Logger
	window   int           // events kept
	buffer   int           // per-watcher channel size
	bookmark time.Duration // bookmark period
	// indexField names the field watchers are indexed by ("" for none),
	// and indexOf reads it from an object.
	indexField string
	indexOf    func(proto.Message) string

	mu      sync.Mutex
	ready   chan struct{} // closed once the first list is in
	isReady bool
	rev     int64
	start   int64
	events  []*watchEvent
	state   map[string]proto.Message
	// initial holds, weakly, the ADDED event by which new watchers get a
	// key's current object (their initial state), so that watchers starting
	// while it is current share one event and its one encoding instead of
	// encoding a large object once each. An entry lives while some watcher
	// still holds the event (weakly: once none does, the encoding is freed)
	// and goes when the key's object changes.
	initial  map[string]weak.Pointer[watchEvent]
	watchers map[*cacheWatcher]struct{}
	// The watchers again, split for dispatch: those whose filter requires
	// the resource's index field (indexField, e.g. a pod's spec.nodeName)
	// to equal a value are kept under that value, the rest in unindexed.
	// An event goes to unindexed and to the watchers under its object's
	// and its previous object's values only: with one node agent watch
	// per node, an event is looked at by the two nodes it concerns, not by
	// every node (Kubernetes' cacher does the same with its indexed
	// triggers on spec.nodeName).
	unindexed map[*cacheWatcher]struct{}
	indexed   map[string]map[*cacheWatcher]struct{}
	// groups holds the watchers' filters by key: watchers with equal
	// selectors share one, so an event is matched once per distinct
	// selector, not once per watcher.
	groups map[string]*filterGroup
	// advanced is closed (and replaced) whenever rev advances.
	advanced chan struct{}
}

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

func newCacher(r *resourceInfo, st *storage, log *slog.Logger, window, buffer int, bookmark time.Duration) *cacher {
	c := &cacher{
		r: r, st: st, log: log.With("resource", r.Resource),
		window: window, buffer: buffer, bookmark: bookmark,
		ready:     make(chan struct{}),
		state:     map[string]proto.Message{},
		initial:   map[string]weak.Pointer[watchEvent]{},
		watchers:  map[*cacheWatcher]struct{}{},
		unindexed: map[*cacheWatcher]struct{}{},
		indexed:   map[string]map[*cacheWatcher]struct{}{},
		groups:    map[string]*filterGroup{},
	}
	c.indexField, c.indexOf = indexFor(r)
	c.advanced = make(chan struct{})
	return c
}

// run lists and watches the store until ctx ends.
func (c *cacher) run(ctx context.Context) {
	go c.bookmarks(ctx)
	backoff := 100 * time.Millisecond
	c.mu.Lock()
	needList := !c.isReady
	c.mu.Unlock()
	for ctx.Err() == nil {
		if needList {
			if err := c.relist(ctx); err != nil {
				c.log.Warn("listing for the watch cache failed", "err", err)
				if !sleep(ctx, backoff) {
					break
				}
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
			needList = false
		}
		err := c.watchStore(ctx)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			needList = true
		}
		c.log.Warn("store watch ended; resuming", "err", err, "relist", needList)
		if !sleep(ctx, backoff) {
			break
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	c.mu.Lock()
	for w := range c.watchers {
		c.closeWatcherLocked(w, false)
	}
	c.mu.Unlock()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// relist reads the whole collection with a linearizable read and replaces
// the cache's state. It never goes back in time: a list older than what the
// cache has seen is refused. Watchers are closed (they resume, and get Gone
// if they were behind the new window).
func (c *cacher) relist(ctx context.Context) error {
	page, err := c.st.list(ctx, c.r, "", 0, "", 0, nil)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if page.rev < c.rev {
		return fmt.Errorf("list at revision %d is older than the cache's %d", page.rev, c.rev)
	}
	state := make(map[string]proto.Message, len(page.items))
	for _, obj := range page.items {
		m := meta(obj)
		state[c.st.key(c.r, m.GetNamespace(), m.GetName())] = obj
	}
	c.state = state
	clear(c.initial)
	c.events = nil
	c.start, c.rev = page.rev, page.rev
	for w := range c.watchers {
		c.closeWatcherLocked(w, false)
	}
	if !c.isReady {
		c.isReady = true
		close(c.ready)
	}
	c.signalLocked()
	return nil
}

// watchStore follows the store from the cache's revision until the watch
// fails or ctx ends.
func (c *cacher) watchStore(ctx context.Context) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	c.mu.Lock()
	from := c.rev + 1
	c.mu.Unlock()
	// No WithPrevKV: the object before each change is the cache's own
	// state at the previous revision (see apply), so the store need not
	// read, send and the cache decode every object twice.
	wch := c.st.cli.Watch(ctx, c.st.collectionKey(c.r, ""),
		clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return err
		}
		if wr.IsProgressNotify() {
			// Not trusted to advance the cache: etcd before 3.4.24/3.5.8
			// could send a requested progress notification ahead of events
			// still in flight (etcd #15220), which would make the cache skip
			// them. The revision only advances with events and re-lists.
			continue
		}
		if err := c.apply(wr.Events); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("store watch channel closed")
}

// apply turns store events into watch events, updates the state and the
// window, and dispatches them.
//
// The object before a change (prev, and a delete's last state) is taken
// from the state, not from the store's previous value: the store watch
// delivers every change after the state's revision, in order, so under mu
// state[key] is exactly the value the change replaced (as Kubernetes' watch
// cache takes an event's PrevObject from its own store).
func (c *cacher) apply(evs []*clientv3.Event) error {
	// Decoding needs no lock; only the new values are decoded.
	objs := make([]proto.Message, len(evs))
	for i, e := range evs {
		if e.Type != mvccpb.PUT {
			continue
		}
		obj, err := c.st.decode(c.r, string(e.Kv.Key), e.Kv.Value, e.Kv.ModRevision)
		if err != nil {
			return err
		}
		objs[i] = obj
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range evs {
		we := &watchEvent{key: string(e.Kv.Key), rev: e.Kv.ModRevision}
		if we.rev <= c.rev {
			continue // already seen (a resumed store watch)
		}
		prev := c.state[we.key]
		switch e.Type {
		case mvccpb.PUT:
			we.obj = objs[i]
			we.typ = eventModified
			if e.IsCreate() {
				we.typ = eventAdded
			} else {
				we.prev = prev
			}
			c.state[we.key] = we.obj
			delete(c.initial, we.key)
		case mvccpb.DELETE:
			if prev == nil {
				// Not in the state: nothing a watcher could have seen.
				continue
			}
			we.typ = eventDeleted
			we.prev = prev
			last := proto.Clone(prev)
			meta(last).ResourceVersion = formatRV(we.rev)
			we.obj = last
			delete(c.state, we.key)
			delete(c.initial, we.key)
		default:
			continue
		}
		c.events = append(c.events, we)
		c.dispatchLocked(we)
		c.rev = we.rev
	}
	if len(c.events) > 2*c.window {
		drop := len(c.events) - c.window
		c.start = c.events[drop-1].rev
		c.events = append([]*watchEvent(nil), c.events[drop:]...)
	}
	c.signalLocked()
	return nil
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
// selects on.
func indexFor(r *resourceInfo) (string, func(proto.Message) string) {
	if r.Group == "" && r.Resource == "pods" {
		return "spec.nodeName", func(obj proto.Message) string {
			p, _ := obj.(*corev1.Pod)
			return p.GetSpec().GetNodeName()
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

// waitReady blocks until the first list is in.
func (c *cacher) waitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return apierrors.NewTimeout("the watch cache of " + c.r.Resource + " is not ready yet")
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
			w.initial = append(w.initial, &watchEvent{typ: eventBookmark, rev: c.rev})
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

func rvOf(obj proto.Message) int64 {
	rv, _ := parseRV(meta(obj).GetResourceVersion())
	return rv
}

func (c *cacher) signalLocked() {
	close(c.advanced)
	c.advanced = make(chan struct{})
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

// waitFor blocks until the cache has applied revision rev (an event of
// this resource at or after rev) or ctx ends.
func (c *cacher) waitFor(ctx context.Context, rev int64) error {
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	for {
		c.mu.Lock()
		cur, advanced := c.rev, c.advanced
		c.mu.Unlock()
		if cur >= rev {
			return nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-advanced:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return apierrors.NewTimeout(fmt.Sprintf("Too large resource version: %d, current: %d", rev, cur))
		}
		t.Stop()
	}
}

// snapshot returns the cached objects matching filter, in key order, and
// the revision they are current at. The lock is held only to copy the
// references; filtering and sorting happen outside it.
func (c *cacher) snapshot(filter func(proto.Message) bool) ([]proto.Message, int64) {
	c.mu.Lock()
	keys := make([]string, 0, len(c.state))
	objs := make(map[string]proto.Message, len(c.state))
	for k, obj := range c.state {
		keys = append(keys, k)
		objs[k] = obj
	}
	rev := c.rev
	c.mu.Unlock()
	sort.Strings(keys)
	out := make([]proto.Message, 0, len(keys))
	for _, k := range keys {
		if obj := objs[k]; filter == nil || filter(obj) {
			out = append(out, obj)
		}
	}
	return out, rev
}
