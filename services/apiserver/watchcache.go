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
	"github.com/kplane/kplane/proto/apierrors"
)

// Watch event types, as Kubernetes names them.
const (
	eventAdded    = "ADDED"
	eventModified = "MODIFIED"
	eventDeleted  = "DELETED"
	eventBookmark = "BOOKMARK"
)

// initialEventsEndAnnotation is metav1.InitialEventsAnnotationKey.
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

// watchEvent is one change as the cache saw it. obj is the object after the
// change (for a delete: its last state, with the delete's revision as its
// resourceVersion); prev is the object before (nil for a create). Events
// and their objects are shared by every watcher and never modified.
type watchEvent struct {
	typ string
	rev int64
	// initialEnd marks the bookmark that ends the initial events a client
	// asked for with sendInitialEvents=true; it carries Kubernetes'
	// k8s.io/initial-events-end annotation, which a watch-list client
	// (client-go's WatchListClient) waits for before it trusts its cache.
	initialEnd bool
	key        string
	obj        proto.Message
	prev       proto.Message

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
	// firstListAt, when set before run, is the revision of the first list
	// (a custom resource's cache starts at the revision its CRD became
	// servable, so that a watch from any object written since finds it in
	// the window); the current revision if that one is compacted.
	firstListAt int64

	mu sync.Mutex
	// readyAt: after a first list at firstListAt, the cache is ready
	// (complete) only once it has replayed the resource's writes up to
	// this revision, the last one at that time.
	readyAt int64
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
	// For consistent lists (consistentlist.go): watchCtx is the context of
	// the running store watch (nil between watches), whose gRPC stream
	// progress is requested on; waiting counts the lists waiting for the
	// cache to reach a revision; wantProgress wakes the progress requester.
	watchCtx     context.Context
	waiting      int
	wantProgress chan struct{}
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
	c.wantProgress = make(chan struct{}, 1)
	return c
}

// run lists and watches the store until ctx ends.
func (c *cacher) run(ctx context.Context) {
	go c.bookmarks(ctx)
	go c.requestProgress(ctx)
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
	c.mu.Lock()
	at := int64(0)
	if !c.isReady {
		at = c.firstListAt
	}
	c.mu.Unlock()
	var last int64
	if at > 0 {
		var err error
		if last, err = c.st.lastModRevision(ctx, c.r); err != nil {
			return err
		}
	}
	page, err := c.st.list(ctx, c.r, "", at, "", 0, nil)
	if err != nil && at > 0 {
		last = 0
		page, err = c.st.list(ctx, c.r, "", 0, "", 0, nil)
	}
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
	c.readyAt = last
	for w := range c.watchers {
		c.closeWatcherLocked(w, false)
	}
	c.markReadyLocked()
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
	// Progress is requested with this context: the etcd client picks the
	// gRPC watch stream by the context's metadata, so the request goes on
	// the stream this watch is on.
	c.mu.Lock()
	c.watchCtx = ctx
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.watchCtx = nil
		c.mu.Unlock()
	}()
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return err
		}
		if wr.IsProgressNotify() {
			// Trusted to advance the cache only when the store sends it
			// after every event at or below its revision: etcd before
			// 3.4.24/3.5.8 could send a requested one ahead of events still
			// in flight (etcd #15220), which would make the cache skip them
			// (progressTo checks; see progressOrderedVersion).
			c.progressTo(wr.Header.Revision)
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
	c.markReadyLocked()
	if len(c.events) > 2*c.window {
		drop := len(c.events) - c.window
		c.start = c.events[drop-1].rev
		c.events = append([]*watchEvent(nil), c.events[drop:]...)
	}
	c.signalLocked()
	return nil
}

// markReadyLocked makes the cache ready once its state is complete: after
// its first list, or (first listed at an earlier revision) once it has
// replayed the writes up to readyAt.
func (c *cacher) markReadyLocked() {
	if !c.isReady && c.rev >= c.readyAt {
		c.isReady = true
		close(c.ready)
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

func rvOf(obj proto.Message) int64 {
	rv, _ := parseRV(meta(obj).GetResourceVersion())
	return rv
}

func (c *cacher) signalLocked() {
	close(c.advanced)
	c.advanced = make(chan struct{})
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

// single is snapshot for the one object stored under key: it, if filter
// keeps it, and the cache's revision.
func (c *cacher) single(key string, filter func(proto.Message) bool) ([]proto.Message, int64) {
	c.mu.Lock()
	obj, ok := c.state[key]
	rev := c.rev
	c.mu.Unlock()
	if !ok || (filter != nil && !filter(obj)) {
		return []proto.Message{}, rev
	}
	return []proto.Message{obj}, rev
}

// bookmark is a BOOKMARK event's object: an empty object of the resource
// with only the revision (and, ending the initial events, Kubernetes'
// annotation saying so).
func (e *watchEvent) bookmark(r *resourceInfo) proto.Message {
	bm := r.New()
	m := meta(bm)
	m.ResourceVersion = formatRV(e.rev)
	if e.initialEnd {
		m.Annotations = map[string]string{initialEventsEndAnnotation: "true"}
	}
	setTypeMeta(r, bm)
	return bm
}
