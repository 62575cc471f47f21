// This file holds the read verbs on the request path: get and list (a
// consistent read from the watch cache once it has caught up with the store,
// see consistentlist.go, or from the store; other lists from the watch cache
// when it is recent enough) and watch.

package apiserver

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/identity"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	watchstreamv1 "github.com/kplane/kplane/proto/kplane/watchstream/v1"
)

func (s *Server) get(ctx context.Context, r *resourceInfo, ns, name, rv string) (_ proto.Message, err error) {
	c := s.begin(ctx, "get", r, "", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	if rv == "" {
		return s.store.get(ctx, r, ns, name)
	}
	want, err := parseRV(rv)
	if err != nil {
		return nil, err
	}
	want = max(want, minRevision(ctx))
	ch := s.cacherFor(r)
	if err := ch.waitReady(ctx); err != nil {
		return nil, err
	}
	ch.mu.Lock()
	obj, ok := ch.state[s.store.key(r, ns, name)]
	cur := ch.rev
	ch.mu.Unlock()
	if cur < want {
		// The cache is behind what the client has seen: the store is not.
		return s.store.get(ctx, r, ns, name)
	}
	if !ok {
		return nil, apierrors.NewNotFound(r.Group, r.Resource, name)
	}
	return obj, nil
}

func (s *Server) list(ctx context.Context, r *resourceInfo, ns string, o listOptions) (_ []proto.Message, _ *metav1.ListMeta, err error) {
	c := s.begin(ctx, "list", r, "", ns, selectorName(o.FieldSelector))
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, nil, err
	}
	sel, err := parseSelectorFor(r, ns, o.LabelSelector, o.FieldSelector, o.Selectable)
	if err != nil {
		return nil, nil, err
	}
	if o.Limit < 0 {
		return nil, nil, apierrors.NewBadRequest("limit must not be negative")
	}
	rev, err := parseRV(o.ResourceVersion)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case o.Continue != "":
		if o.ResourceVersion != "" && o.ResourceVersion != "0" {
			return nil, nil, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
		}
		tok, err := decodeContinue(o.Continue)
		if err != nil {
			return nil, nil, err
		}
		return s.listStore(ctx, r, ns, tok.Rev, tok.Key, o.Limit, sel, true)
	case o.ResourceVersion == "":
		// The default: a consistent list. From the watch cache once it is
		// current to the store's revision (consistentlist.go), else a
		// linearizable read of the store.
		if items, lm, ok := s.listConsistentFromCache(ctx, r, ns, o.Limit, sel); ok {
			return items, lm, nil
		}
		return s.listStore(ctx, r, ns, 0, "", o.Limit, sel, false)
	case o.ResourceVersionMatch == "Exact":
		return s.listStore(ctx, r, ns, rev, "", o.Limit, sel, false)
	case o.ResourceVersionMatch != "" && o.ResourceVersionMatch != "NotOlderThan":
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("unsupported resourceVersionMatch %q", o.ResourceVersionMatch))
	}
	// resourceVersion "0" (any) or N (not older than N): the watch cache
	// if it is that recent (and as recent as the caller's own last write,
	// when a front proxy says which), else the store (always at least as
	// recent).
	rev = max(rev, minRevision(ctx))
	ch := s.cacherFor(r)
	if err := ch.waitReady(ctx); err != nil {
		return nil, nil, err
	}
	var items []proto.Message
	var at int64
	if name, ok := sel.fields.RequiresExactMatch("metadata.name"); ok && (ns != "" || !r.Namespaced) {
		// One object by name (a node agent's watch of a ConfigMap or
		// Secret starts so): its key alone, as kube-apiserver's cacher
		// answers a selection that matches a single key.
		items, at = ch.single(s.store.key(r, ns, name), sel.matches)
	} else {
		items, at = ch.snapshot(sel.matches)
	}
	if at >= rev {
		return items, &metav1.ListMeta{ResourceVersion: formatRV(at)}, nil
	}
	items, lm, err := s.listStore(ctx, r, ns, 0, "", o.Limit, sel, false)
	if err != nil {
		return nil, nil, err
	}
	if cur, _ := parseRV(lm.ResourceVersion); cur < rev {
		// A revision the store has not reached: as kube-apiserver, give it
		// a moment to arrive, then answer 504 with the cause reflectors
		// retry on.
		return s.listFuture(ctx, r, ns, rev, o.Limit, sel)
	}
	return items, lm, nil
}

// tooLargeRVWait is how long a list at a resourceVersion ahead of the store
// waits for the store to reach it (kube-apiserver's watch cache waits 3 s).
const tooLargeRVWait = 3 * time.Second

// listFuture serves a not-older-than list at rev once the store reaches
// rev, or answers Too large resource version after tooLargeRVWait.
func (s *Server) listFuture(ctx context.Context, r *resourceInfo, ns string, rev, limit int64, sel *selector) ([]proto.Message, *metav1.ListMeta, error) {
	end := time.Now().Add(tooLargeRVWait)
	for {
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, storeErr(ctx.Err())
		case <-t.C:
		}
		cur, err := s.store.revision(ctx)
		if err != nil {
			return nil, nil, err
		}
		if cur >= rev {
			return s.listStore(ctx, r, ns, 0, "", limit, sel, false)
		}
		if time.Now().After(end) {
			return nil, nil, apierrors.NewTooLargeResourceVersion(rev, cur)
		}
	}
}

func (s *Server) listStore(ctx context.Context, r *resourceInfo, ns string, rev int64, from string, limit int64, sel *selector, fromContinue bool) ([]proto.Message, *metav1.ListMeta, error) {
	page, err := s.store.list(ctx, r, ns, rev, from, limit, sel)
	if err != nil {
		// A list at a compacted revision is Expired with the store's
		// message ("The resourceVersion for the provided list is too
		// old."), as kube-apiserver answers a list it reads from etcd; a
		// continue token's has its own.
		if fromContinue && apierrors.ReasonOf(err) == apierrors.ReasonExpired {
			return nil, nil, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
		}
		return nil, nil, err
	}
	return page.items, &metav1.ListMeta{ResourceVersion: formatRV(page.rev), Continue: page.next}, nil
}

// watch serves one client watch. build makes the RPC's response message
// for an event; send is the stream's SendMsg. Each event is encoded once,
// however many watchers it goes to (see preEncoded).
func (s *Server) watch(ctx context.Context, r *resourceInfo, ns string, o listOptions, build func(typ string, obj proto.Message) proto.Message, send func(any) error) error {
	return s.runWatch(ctx, r, ns, o, watchSink{
		encode: func(e *watchEvent) (any, trace.SpanContext, error) {
			return e.encoded(func() proto.Message {
				if e.typ == eventBookmark {
					return build(eventBookmark, e.bookmark(r))
				}
				return build(e.typ, e.obj)
			})
		},
		send: send,
	})
}

// watchSink is what a watch does with each event: encode gives what to
// send for it (computed once per event, shared by its watchers) and the
// trace context its object records; send sends that.
type watchSink struct {
	encode func(e *watchEvent) (any, trace.SpanContext, error)
	send   func(any) error
}

// runWatch authorizes one client watch, starts it on the resource's cache
// and hands every event to sink until the call ends or the watcher is cut
// off.
func (s *Server) runWatch(ctx context.Context, r *resourceInfo, ns string, o listOptions, sink watchSink) (err error) {
	c := s.begin(ctx, "watch", r, "", ns, selectorName(o.FieldSelector))
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return err
	}
	sel, err := parseSelectorFor(r, ns, o.LabelSelector, o.FieldSelector, o.Selectable)
	if err != nil {
		return err
	}
	rev, err := parseRV(o.ResourceVersion)
	if err != nil {
		return err
	}
	if o.ResourceVersion == "" && o.SendInitialEvents != nil && *o.SendInitialEvents {
		// As kube-apiserver, a watch-list without a resourceVersion starts
		// from a consistent read: the initial events hold every write the
		// store acknowledged before the call, so the cache catches up first.
		last, err := s.store.lastModRevision(ctx, r)
		if err != nil {
			return err
		}
		if err := s.cacherFor(r).waitFor(ctx, max(last, minRevision(ctx))); err != nil {
			return err
		}
	}
	var filter watchFilter
	if ns != "" || !sel.empty() {
		filter = watchFilter{key: sel.key(), match: sel.matchesWith, exact: sel.fields.RequiresExactMatch}
	}
	if o.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(o.TimeoutSeconds)*time.Second)
		defer cancel()
	}
	ch := s.cacherFor(r)
	w, err := ch.watch(ctx, rev, filter, o.AllowWatchBookmarks, o.SendInitialEvents)
	if err != nil {
		return err
	}
	defer ch.stop(w)
	// The watch is established: send the headers now, so a client can tell
	// even before the first event (audit stage ResponseStarted).
	_ = grpc.SendHeader(ctx, metadata.Pairs(watchstreamv1.EstablishedHeader, "true"))
	s.auditResponseStarted(c)
	deliver := func(e *watchEvent) error {
		enc, sc, err := sink.encode(e)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if sc.IsValid() {
			// Hop "watch delivery": a span in the trace of the change
			// being delivered, when that change was traced.
			_, span := s.tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), sc), "watch.deliver",
				trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithAttributes(attribute.String("k8s.resource", r.Resource), attribute.String("watch.event", e.typ),
					attribute.String("k8s.object", e.key)))
			defer span.End()
		}
		return sink.send(enc)
	}
	for _, e := range w.initial {
		if err := deliver(e); err != nil {
			return err
		}
	}
	w.initial = nil
	// The end of the call finishes the watcher like a cut-off does, so the
	// loop waits on its one notification channel: a receive from one
	// channel costs the runtime far less than a select over two (each of
	// which it locks, and queues this goroutine on, per event), which with
	// 10,000 watchers is paid 10,000 times per event.
	unregister := context.AfterFunc(ctx, func() { ch.stop(w) })
	defer unregister()
	for {
		batch, ok := w.next()
		if !ok {
			break
		}
		for _, e := range batch {
			if err := deliver(e); err != nil {
				return err
			}
		}
	}
	// Cut off (too slow), the cache re-listed, or the call ended: end the
	// stream cleanly; the client resumes from its last resourceVersion.
	return nil
}

// minRevision is the revision a front proxy asks cache-served reads to
// reflect (identity.MinRevisionKey): its caller's latest write. 0 if none.
func minRevision(ctx context.Context) int64 {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return 0
	}
	v := md.Get(identity.MinRevisionKey)
	if len(v) == 0 {
		return 0
	}
	rev, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || rev < 0 {
		return 0
	}
	return rev
}
