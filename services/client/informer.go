// This file holds the Informer: a cache of one resource kept by list and
// watch, resuming after a broken watch and re-listing after 410, with
// indexes and handlers notified of every change.

package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
)

// ListerWatcher is what an Informer needs from the API service: a complete
// list with its resourceVersion, and a watch from a resourceVersion.
// ListWatch adapts a *Client to it.
type ListerWatcher[T proto.Message] interface {
	List(ctx context.Context) (items []T, resourceVersion string, err error)
	Watch(ctx context.Context, resourceVersion string) (Watch[T], error)
}

// Watch is an open watch stream: Next blocks for the next event (see
// Watcher.Next for its errors), Close ends it.
type Watch[T proto.Message] interface {
	Next() (Event[T], error)
	Close()
}

// ListWatch returns a ListerWatcher over c for one namespace ("" for all)
// with the given label and field selectors. Lists are paged by pageSize
// (0: unpaged); watches ask for bookmarks.
func ListWatch[T proto.Message](c *Client[T], namespace, labelSelector, fieldSelector string, pageSize int64) ListerWatcher[T] {
	return &clientLW[T]{c: c, ns: namespace, opts: ListOptions{LabelSelector: labelSelector, FieldSelector: fieldSelector, Limit: pageSize}}
}

type clientLW[T proto.Message] struct {
	c    *Client[T]
	ns   string
	opts ListOptions
}

func (l *clientLW[T]) List(ctx context.Context) ([]T, string, error) {
	return l.c.List(ctx, l.ns, l.opts)
}

func (l *clientLW[T]) Watch(ctx context.Context, rv string) (Watch[T], error) {
	o := l.opts
	o.ResourceVersion, o.AllowWatchBookmarks, o.Limit = rv, true, 0
	return l.c.Watch(ctx, l.ns, o)
}

// Handler receives an informer's notifications. Any func may be nil. They
// are called from the informer's goroutine, one at a time, in event order;
// they must not block (enqueue a key and return) and must not modify the
// objects they are given.
type Handler[T proto.Message] struct {
	OnAdd    func(obj T)
	OnUpdate func(oldObj, newObj T)
	OnDelete func(obj T)
}

// IndexFunc returns the index values of an object (e.g. its node name).
type IndexFunc[T proto.Message] func(obj T) []string

// NamespaceIndex is the name of the index every informer keeps by namespace.
const NamespaceIndex = "namespace"

// InformerOptions configure an Informer.
type InformerOptions[T proto.Message] struct {
	// Logger; nil discards.
	Logger *slog.Logger
	// Indexers are extra indexes by name (NamespaceIndex is always there).
	Indexers map[string]IndexFunc[T]
	// MinBackoff and MaxBackoff bound the wait between failed list or watch
	// attempts (defaults 100 ms and 10 s).
	MinBackoff, MaxBackoff time.Duration
}

// Informer keeps a local, indexed copy of one resource in step with the API
// service: it lists, then watches from the list's resourceVersion; it resumes
// a broken watch from the last resourceVersion it saw, and lists again when
// the API service answers 410 Expired/Gone (the window has moved past it).
// A re-list is applied as a diff, so handlers see the adds, updates and
// deletes that happened while the watch was down.
//
// Objects handed out by the informer are shared with its cache: never modify
// them; proto.Clone first.
type Informer[T proto.Message] struct {
	lw       ListerWatcher[T]
	log      *slog.Logger
	minB     time.Duration
	maxB     time.Duration
	handlers []Handler[T]
	store    *Indexer[T]
	synced   atomic.Bool
	started  atomic.Bool
	lastRV   atomic.Value // string
	relists  atomic.Int64
}

// NewInformer returns an informer; add handlers, then Run it.
func NewInformer[T proto.Message](lw ListerWatcher[T], opts InformerOptions[T]) *Informer[T] {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var zero T
	i := &Informer[T]{
		lw:    lw,
		log:   log.With("component", "informer", "kind", string(zero.ProtoReflect().Descriptor().Name())),
		minB:  opts.MinBackoff,
		maxB:  opts.MaxBackoff,
		store: NewIndexer(opts.Indexers),
	}
	if i.minB <= 0 {
		i.minB = 100 * time.Millisecond
	}
	if i.maxB <= 0 {
		i.maxB = 10 * time.Second
	}
	i.lastRV.Store("")
	return i
}

// AddEventHandler registers h. It must be called before Run.
func (i *Informer[T]) AddEventHandler(h Handler[T]) {
	if i.started.Load() {
		panic("client: AddEventHandler after Run")
	}
	i.handlers = append(i.handlers, h)
}

// Store is the informer's cache.
func (i *Informer[T]) Store() *Indexer[T] { return i.store }

// HasSynced reports whether the first list has been applied.
func (i *Informer[T]) HasSynced() bool { return i.synced.Load() }

// LastSyncResourceVersion is the resourceVersion of the last event or list applied.
func (i *Informer[T]) LastSyncResourceVersion() string { return i.lastRV.Load().(string) }

// Relists counts the lists made after the first (after 410s or failures).
func (i *Informer[T]) Relists() int64 { return i.relists.Load() }

// Run lists and watches until ctx is done. It returns ctx's error.
func (i *Informer[T]) Run(ctx context.Context) error {
	if i.started.Swap(true) {
		return errors.New("client: informer already running")
	}
	backoff := i.minB
	wait := func() bool {
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(2*backoff, i.maxB)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	first := true
	for ctx.Err() == nil {
		if !first {
			i.relists.Add(1)
		}
		items, rv, err := i.lw.List(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			i.log.Warn("list failed; retrying", "err", err, "backoff", backoff)
			if !wait() {
				break
			}
			continue
		}
		first = false
		i.replace(items, rv)
		i.synced.Store(true)
		backoff = i.minB
		// Watch from rv; resume after a broken stream, re-list after 410.
		for ctx.Err() == nil {
			gone, progressed, err := i.watch(ctx, i.LastSyncResourceVersion())
			if ctx.Err() != nil {
				break
			}
			if gone {
				i.log.Info("watch expired; re-listing", "err", err)
				break
			}
			if progressed {
				backoff = i.minB
			}
			// A clean end after progress (server timeout, slow-watcher
			// cut-off) resumes at once; anything else waits first, so a
			// server that keeps failing is not hammered.
			if err != nil && (!errors.Is(err, ErrWatchClosed) || !progressed) {
				i.log.Warn("watch ended; resuming", "err", err, "resourceVersion", i.LastSyncResourceVersion(), "backoff", backoff)
				if !wait() {
					break
				}
			}
		}
	}
	return ctx.Err()
}

// watch runs one watch stream until it ends. gone means the server said
// the resourceVersion is too old; progressed that at least one event came.
func (i *Informer[T]) watch(ctx context.Context, rv string) (gone, progressed bool, err error) {
	w, err := i.lw.Watch(ctx, rv)
	if err != nil {
		return apierrors.IsGone(err), false, err
	}
	defer w.Close()
	for {
		ev, err := w.Next()
		if err != nil {
			return apierrors.IsGone(err), progressed, err
		}
		progressed = true
		i.apply(ev)
	}
}

// apply applies one watch event to the cache and calls the handlers.
func (i *Informer[T]) apply(ev Event[T]) {
	if rv := ResourceVersion(ev.Object); rv != "" {
		defer i.lastRV.Store(rv)
	}
	switch ev.Type {
	case Added, Modified:
		old, existed := i.store.put(ev.Object)
		for _, h := range i.handlers {
			if existed && h.OnUpdate != nil {
				h.OnUpdate(old, ev.Object)
			} else if !existed && h.OnAdd != nil {
				h.OnAdd(ev.Object)
			}
		}
	case Deleted:
		i.store.remove(Key(ev.Object))
		for _, h := range i.handlers {
			if h.OnDelete != nil {
				h.OnDelete(ev.Object)
			}
		}
	case Bookmark:
	default:
		i.log.Warn("ignoring watch event of unknown type", "type", ev.Type)
	}
}

// replace makes the cache equal to items, calling handlers for the difference.
func (i *Informer[T]) replace(items []T, rv string) {
	seen := make(map[string]bool, len(items))
	for _, obj := range items {
		seen[Key(obj)] = true
		old, existed := i.store.put(obj)
		for _, h := range i.handlers {
			switch {
			case !existed && h.OnAdd != nil:
				h.OnAdd(obj)
			case existed && h.OnUpdate != nil && ResourceVersion(old) != ResourceVersion(obj):
				h.OnUpdate(old, obj)
			}
		}
	}
	for _, key := range i.store.Keys() {
		if seen[key] {
			continue
		}
		if old, ok := i.store.remove(key); ok {
			for _, h := range i.handlers {
				if h.OnDelete != nil {
					h.OnDelete(old)
				}
			}
		}
	}
	i.lastRV.Store(rv)
}

// Syncer is anything with HasSynced (every Informer).
type Syncer interface{ HasSynced() bool }

// WaitForCacheSync waits until every informer has synced or ctx is done,
// and reports whether they all synced.
func WaitForCacheSync(ctx context.Context, informers ...Syncer) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if !slices.ContainsFunc(informers, func(s Syncer) bool { return !s.HasSynced() }) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// Indexer is a thread-safe map of objects by key with secondary indexes.
type Indexer[T proto.Message] struct {
	mu       sync.RWMutex
	items    map[string]T
	indexers map[string]IndexFunc[T]
	indices  map[string]map[string]map[string]struct{} // index → value → keys
}

// NewIndexer returns an empty indexer with the namespace index and extra.
func NewIndexer[T proto.Message](extra map[string]IndexFunc[T]) *Indexer[T] {
	ix := &Indexer[T]{
		items:    map[string]T{},
		indexers: map[string]IndexFunc[T]{NamespaceIndex: func(o T) []string { return []string{Namespace(o)} }},
		indices:  map[string]map[string]map[string]struct{}{},
	}
	for name, f := range extra {
		if name == NamespaceIndex {
			panic(fmt.Sprintf("client: index name %q is reserved", NamespaceIndex))
		}
		ix.indexers[name] = f
	}
	for name := range ix.indexers {
		ix.indices[name] = map[string]map[string]struct{}{}
	}
	return ix
}

func (ix *Indexer[T]) put(obj T) (old T, existed bool) {
	key := Key(obj)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old, existed = ix.items[key]
	if existed {
		ix.unindex(key, old)
	}
	ix.items[key] = obj
	for name, f := range ix.indexers {
		for _, v := range f(obj) {
			set := ix.indices[name][v]
			if set == nil {
				set = map[string]struct{}{}
				ix.indices[name][v] = set
			}
			set[key] = struct{}{}
		}
	}
	return old, existed
}

func (ix *Indexer[T]) remove(key string) (old T, existed bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old, existed = ix.items[key]
	if existed {
		ix.unindex(key, old)
		delete(ix.items, key)
	}
	return old, existed
}

func (ix *Indexer[T]) unindex(key string, obj T) {
	for name, f := range ix.indexers {
		for _, v := range f(obj) {
			if set := ix.indices[name][v]; set != nil {
				delete(set, key)
				if len(set) == 0 {
					delete(ix.indices[name], v)
				}
			}
		}
	}
}

// Get returns the object with the given key ("namespace/name" or "name").
func (ix *Indexer[T]) Get(key string) (T, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	o, ok := ix.items[key]
	return o, ok
}

// GetByName returns the object namespace/name.
func (ix *Indexer[T]) GetByName(namespace, name string) (T, bool) {
	return ix.Get(KeyOf(namespace, name))
}

// List returns every object, in no particular order.
func (ix *Indexer[T]) List() []T {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]T, 0, len(ix.items))
	for _, o := range ix.items {
		out = append(out, o)
	}
	return out
}

// Keys returns every key.
func (ix *Indexer[T]) Keys() []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]string, 0, len(ix.items))
	for k := range ix.items {
		out = append(out, k)
	}
	return out
}

// Len is the number of objects.
func (ix *Indexer[T]) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.items)
}

// ByIndex returns the objects whose index named index has value.
func (ix *Indexer[T]) ByIndex(index, value string) ([]T, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	idx, ok := ix.indices[index]
	if !ok {
		return nil, fmt.Errorf("client: no index %q", index)
	}
	out := make([]T, 0, len(idx[value]))
	for key := range idx[value] {
		out = append(out, ix.items[key])
	}
	return out, nil
}

// ByNamespace returns the objects in namespace.
func (ix *Indexer[T]) ByNamespace(namespace string) []T {
	out, _ := ix.ByIndex(NamespaceIndex, namespace)
	return out
}
