// This file holds consistent lists served from the watch cache (Kubernetes'
// ConsistentListFromCache): the store's version check that says whether its
// watch progress notifications can be trusted, the cache's wait until it is
// current to a revision (asking the store for progress while lists wait),
// pages cut from the cache with the store's continue tokens, and the
// counters of which path served a consistent list.

package apiserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

const (
	// consistentListWait bounds how long a consistent list waits for the
	// watch cache to reach the store's revision before it reads the store
	// (kube-apiserver's cacher waits up to 3 s too).
	consistentListWait = 3 * time.Second
	// progressRequestPeriod is how often, while lists wait, the cacher asks
	// the store again for a progress notification.
	progressRequestPeriod = 100 * time.Millisecond
)

// continueToken is the opaque state of a paginated list: where to resume
// and the revision every page is read at.
type continueToken struct {
	Key string `json:"k"`
	Rev int64  `json:"r"`
}

func encodeContinue(key string, rev int64) string {
	b, _ := json.Marshal(continueToken{Key: key, Rev: rev})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (continueToken, error) {
	var t continueToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil || t.Rev <= 0 || t.Key == "" {
		return t, apierrors.NewBadRequest("invalid continue token")
	}
	return t, nil
}

// progressOrderedVersion says whether an etcd server of version v sends a
// requested watch progress notification only after every event at or below
// its revision went out on the stream. etcd before 3.4.24 and 3.5.8 could
// let it overtake events in flight (etcd #15220); Kubernetes, after further
// fixes to progress requests, relies on it from 3.4.31 and 3.5.13 (its
// issue #123192), and so does this check. Any 3.6 qualifies.
//
// The kplane store reports 3.6.0 and qualifies by construction: its
// RequestProgressAll (raftstore/mvcc) puts the notification, at the
// store's revision, into the stream's one channel only once every watcher
// of the stream is synced, i.e. every event up to that revision is already
// in that channel (a write delivers its events to synced watchers under the
// store's lock, in the same step that advances the revision, and a watcher
// whose channel is full stops being synced until the sync loop has caught it
// up); the etcd layer (raftstore/etcdserver/watch.go) sends the channel in
// order, the notification with that same revision.
func progressOrderedVersion(v string) bool {
	var major, minor, patch int
	if _, err := fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch); err != nil {
		return false
	}
	switch {
	case major != 3:
		return major > 3
	case minor >= 6:
		return true
	case minor == 5:
		return patch >= 13
	case minor == 4:
		return patch >= 31
	}
	return false
}

// checkProgressOrdered asks every store endpoint for its version and
// records whether all of them order progress notifications after events.
// An endpoint that does not answer leaves the answer "no".
func (st *storage) checkProgressOrdered(ctx context.Context) error {
	ok := true
	for _, ep := range st.cli.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := st.cli.Status(sctx, ep)
		cancel()
		if err != nil {
			st.progressOrdered.Store(false)
			return fmt.Errorf("store status of %s: %w", ep, err)
		}
		ok = ok && progressOrderedVersion(resp.Version)
	}
	st.progressOrdered.Store(ok)
	return nil
}

// checkProgressSupport checks the store's version once (Run calls it before
// serving) and says whether every endpoint answered; if not, Run keeps
// retrying in the background (retryProgressSupport), and until then
// consistent lists read the store.
func (s *Server) checkProgressSupport(ctx context.Context) bool {
	if err := s.store.checkProgressOrdered(ctx); err != nil {
		s.log.Debug("store version check failed", "err", err)
		return false
	}
	s.log.Info("consistent lists", "fromWatchCache", s.store.progressOrdered.Load())
	return true
}

func (s *Server) retryProgressSupport(ctx context.Context) {
	backoff := time.Second
	for sleep(ctx, backoff) && !s.checkProgressSupport(ctx) {
		backoff = min(2*backoff, 30*time.Second)
	}
}

// consistentListStats counts consistent lists by the path that served them:
// an OpenTelemetry counter (kplane.apiserver.consistent_lists, by resource,
// source and reason) and totals tests read.
type consistentListStats struct {
	counter                   metric.Int64Counter // nil until registered
	fromCache, fromStore, lag atomic.Int64
}

func (cs *consistentListStats) record(ctx context.Context, r *resourceInfo, source, reason string) {
	switch {
	case source == "cache":
		cs.fromCache.Add(1)
	case reason == "timeout":
		cs.lag.Add(1)
		cs.fromStore.Add(1)
	default:
		cs.fromStore.Add(1)
	}
	if cs.counter != nil {
		cs.counter.Add(ctx, 1, metric.WithAttributes(attribute.String("resource", r.storedAs().Resource),
			attribute.String("source", source), attribute.String("reason", reason)))
	}
}

// listConsistentFromCache serves a consistent list (resourceVersion "", no
// continue token) from the watch cache when that is as good as reading the
// store: the store orders progress notifications after events, and the
// cache reaches, within consistentListWait, the store's current revision
// read linearizably now (so it holds every write acknowledged before this
// call, the caller's own included). served is false when the caller must
// read the store instead.
func (s *Server) listConsistentFromCache(ctx context.Context, r *resourceInfo, ns string, limit int64, sel *selector) (_ []proto.Message, _ *metav1.ListMeta, served bool) {
	if !s.store.progressOrdered.Load() {
		s.consistentLists.record(ctx, r, "store", "unsupported")
		return nil, nil, false
	}
	cur, err := s.store.revision(ctx)
	if err != nil {
		s.consistentLists.record(ctx, r, "store", "error")
		return nil, nil, false
	}
	want := max(cur, minRevision(ctx))
	ch := s.cacherFor(r)
	if !ch.waitFresh(ctx, want, consistentListWait) {
		s.consistentLists.record(ctx, r, "store", "timeout")
		return nil, nil, false
	}
	var items []proto.Message
	var at int64
	var next string
	if name, ok := sel.fields.RequiresExactMatch("metadata.name"); ok && (ns != "" || !r.Namespaced) {
		items, at = ch.single(s.store.key(r, ns, name), sel.matches)
	} else {
		items, at, next = ch.page(s.store.collectionKey(r, ns), sel.matches, limit)
	}
	if at < want {
		// Cannot happen (the cache never goes back); the store then.
		s.consistentLists.record(ctx, r, "store", "stale")
		return nil, nil, false
	}
	lm := &metav1.ListMeta{ResourceVersion: formatRV(at)}
	if next != "" {
		// The store's own token: the next page is read from the store at
		// the revision the cache was current at, starting at the key of
		// the first item past this page, as a store-read first page says.
		lm.Continue = encodeContinue(next, at)
	}
	s.consistentLists.record(ctx, r, "cache", "fresh")
	return items, lm, true
}

// page is snapshot narrowed to the keys under prefix, at most limit items
// (0: all), in the store's key order (bytewise, as sort.Strings), with the
// key of the first matching item past the page ("" if there is none).
func (c *cacher) page(prefix string, filter func(proto.Message) bool, limit int64) ([]proto.Message, int64, string) {
	c.mu.Lock()
	keys := make([]string, 0, len(c.state))
	objs := make(map[string]proto.Message, len(c.state))
	for k, obj := range c.state {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
			objs[k] = obj
		}
	}
	rev := c.rev
	c.mu.Unlock()
	sort.Strings(keys)
	size := len(keys)
	if limit > 0 && limit < int64(size) {
		size = int(limit)
	}
	out := make([]proto.Message, 0, size)
	for _, k := range keys {
		obj := objs[k]
		if filter != nil && !filter(obj) {
			continue
		}
		if limit > 0 && int64(len(out)) == limit {
			return out, rev, k
		}
		out = append(out, obj)
	}
	return out, rev, ""
}

// waitFresh blocks until the cache is current to revision rev (it has
// applied every event of its resource up to rev, learnt from an event at or
// after rev or from a progress notification), for at most timeout; it
// returns whether it is. While it waits, the cache's progress requester
// asks the store for progress notifications on the cache's watch stream.
func (c *cacher) waitFresh(ctx context.Context, rev int64, timeout time.Duration) bool {
	c.mu.Lock()
	if c.isReady && c.rev >= rev {
		c.mu.Unlock()
		return true
	}
	c.waiting++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
	}()
	select {
	case c.wantProgress <- struct{}{}:
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		c.mu.Lock()
		fresh, advanced, ready := c.isReady && c.rev >= rev, c.advanced, c.ready
		if c.isReady {
			ready = nil // closed: it would wake the loop at once, always
		}
		c.mu.Unlock()
		if fresh {
			return true
		}
		select {
		case <-advanced:
		case <-ready:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// requestProgress asks the store for a progress notification on the
// cache's watch stream whenever lists wait for the cache (waitFresh): at
// once, then again after each advance or progressRequestPeriod while any
// still wait. The notification answers every watch of that gRPC stream,
// so one request refreshes all the caches of this replica.
func (c *cacher) requestProgress(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wantProgress:
		}
		for {
			c.mu.Lock()
			waiting, wctx, advanced := c.waiting, c.watchCtx, c.advanced
			c.mu.Unlock()
			if waiting == 0 || ctx.Err() != nil {
				break
			}
			if wctx != nil && wctx.Err() == nil {
				if err := c.st.cli.RequestProgress(wctx); err != nil {
					c.log.Debug("requesting watch progress", "err", err)
				}
			}
			t := time.NewTimer(progressRequestPeriod)
			select {
			case <-ctx.Done():
			case <-advanced:
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// progressTo records a progress notification of the store watch: the cache
// is current to rev. Only trusted when the store orders notifications after
// events (progressOrderedVersion); otherwise ignored, and the revision only
// advances with events and re-lists.
func (c *cacher) progressTo(rev int64) {
	if !c.st.progressOrdered.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev <= c.rev {
		return
	}
	c.rev = rev
	c.markReadyLocked()
	c.signalLocked()
}
