// This file holds the API service's start-up objects (the built-in
// namespaces and the configured bootstrap objects, created without the
// request path's checks) and the feeds that keep its in-process caches
// (RBAC, admission plugins) in step with its watch caches.

package apiserver

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// bootstrap waits for the caches, then creates the built-in namespaces and
// the configured bootstrap objects if absent (retrying until the store
// answers).
func (s *Server) bootstrap(ctx context.Context) error {
	for _, c := range s.cachers {
		if err := c.waitReady(ctx); err != nil {
			return err
		}
	}
	objs := []proto.Message{}
	for _, n := range protectedNamespaces {
		objs = append(objs, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: n}})
	}
	// As kube-apiserver's bootstrap: the system priority classes.
	for _, pc := range systemPriorityClasses() {
		objs = append(objs, pc)
	}
	objs = append(objs, s.cfg.Bootstrap...)
	for _, obj := range objs {
		for {
			err := s.createInternal(ctx, obj)
			if err == nil || apierrors.IsAlreadyExists(err) {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Warn("bootstrap object not created yet", "err", err)
			if !sleep(ctx, time.Second) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// createInternal creates obj with defaults and validation but without
// authentication, authorization or admission plugins: the service's own
// start-up objects.
func (s *Server) createInternal(ctx context.Context, obj proto.Message) error {
	var r *resourceInfo
	for _, ri := range s.resources {
		if ri.New().ProtoReflect().Descriptor() == obj.ProtoReflect().Descriptor() {
			r = ri
		}
	}
	if r == nil {
		return fmt.Errorf("bootstrap: unknown type %T", obj)
	}
	obj = proto.Clone(obj)
	setTypeMeta(r, obj)
	prepareForCreate(r, obj)
	setDefaults(obj)
	if err := validateObject(r, obj, nil); err != nil {
		return err
	}
	m := meta(obj)
	_, err := s.store.create(ctx, r, m.GetNamespace(), m.GetName(), obj)
	return err
}

// feed keeps sink in step with one resource: every object as ADDED first,
// then every change; after a cut-off it resumes from the last revision seen
// (or starts over if that fell out of the window). synced is called once,
// when the sink has been given every object the store held when feed
// started.
func (s *Server) feed(ctx context.Context, c *cacher, sink ObjectSink, synced func()) {
	var target int64
	for {
		var err error
		if target, err = s.store.lastModRevision(ctx, c.r); err == nil {
			break
		}
		s.log.Warn("reading the store's revision for a cache failed; retrying", "resource", c.r.Resource, "err", err)
		if !sleep(ctx, time.Second) {
			return
		}
	}
	var last int64
	for ctx.Err() == nil {
		// The cache may trail the store: wait until it has what the store
		// had, so the first delivery is complete.
		if synced != nil && c.waitFor(ctx, target) != nil {
			return
		}
		w, err := c.watch(ctx, last, watchFilter{}, false, nil)
		if apierrors.IsGone(err) {
			last = 0
			continue
		}
		if err != nil {
			if !sleep(ctx, time.Second) {
				return
			}
			continue
		}
		for _, e := range w.initial {
			last = deliverTo(sink, e, last)
		}
		w.initial = nil
		if synced != nil {
			synced()
			synced = nil
		}
		// The end of ctx finishes the watcher, as a re-list does.
		unregister := context.AfterFunc(ctx, func() { c.stop(w) })
		for {
			batch, ok := w.next()
			if !ok {
				break
			}
			for _, e := range batch {
				last = deliverTo(sink, e, last)
			}
		}
		unregister()
	}
}

func deliverTo(sink ObjectSink, e *watchEvent, last int64) int64 {
	switch e.typ {
	case eventAdded, eventModified:
		sink.Upsert(e.obj)
	case eventDeleted:
		sink.Delete(e.obj)
	}
	return max(last, e.rev)
}
