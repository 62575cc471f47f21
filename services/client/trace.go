// This file continues an object's trace in a reconcile loop (see
// internal/telemetry for the trace annotation).
//
// Design note. A reconcile acts on one object (the key's) and continues its
// trace: its span is a child of the trace context recorded on that object.
// But a key is often enqueued by changes to other objects — a Service's
// Endpoints by its pods becoming ready, a dependent by its owner's
// deletion, a node by its Lease — and several such changes may fold into
// one reconcile, since keys are deduplicated. A span has one parent, so
// those other causes are recorded as links (TraceCauses): the event
// handler notes the trace of the object whose change enqueued the key, the
// reconcile takes them all and links to each trace but its parent's. A
// reconcile whose object records no trace is a child of its first cause.
// With tracing off no object carries the annotation and nothing is noted.

package client

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/telemetry"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// maxCauses bounds the links one reconcile span gets.
const maxCauses = 16

// TraceCauses records, per queue key, the traces of the changes that
// enqueued it since its last reconcile. The zero value is ready to use.
type TraceCauses struct {
	mu sync.Mutex
	m  map[string][]trace.SpanContext
}

// Add notes that the creation or deletion of an object with these
// annotations enqueued key. An object recording no trace notes nothing; a
// trace already noted for key is not noted twice; past maxCauses traces
// more are dropped.
func (c *TraceCauses) Add(key string, annotations map[string]string) {
	if c == nil {
		return
	}
	c.add(key, telemetry.ObjectSpanContext(annotations))
}

// AddChange notes that an object's update from old to cur annotations
// enqueued key, if that update was traced: if it recorded a trace other
// than the one old recorded. An untraced update (a heartbeat, a status
// write made outside any trace) leaves the annotation as it was and so
// notes nothing, rather than the stale trace of some earlier change.
func (c *TraceCauses) AddChange(key string, old, cur map[string]string) {
	if c == nil || old[telemetry.Annotation] == cur[telemetry.Annotation] {
		return
	}
	c.add(key, telemetry.ObjectSpanContext(cur))
}

func (c *TraceCauses) add(key string, sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.m[key]
	if len(cur) >= maxCauses {
		return
	}
	for _, x := range cur {
		if x.TraceID() == sc.TraceID() {
			return
		}
	}
	if c.m == nil {
		c.m = map[string][]trace.SpanContext{}
	}
	c.m[key] = append(cur, sc)
}

// Take returns and forgets the traces noted for key.
func (c *TraceCauses) Take(key string) []trace.SpanContext {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.m[key]
	delete(c.m, key)
	return s
}

// Trace says how a reconcile loop's spans continue the traces of what it
// acts on.
type Trace struct {
	// TracerProvider records the spans; nil uses the global one.
	TracerProvider trace.TracerProvider
	// Span names the reconcile span, "<controller>.reconcile".
	Span string
	// Annotations returns the annotations of the object key names, the
	// object the reconcile acts on, if it has one; nil means the reconcile
	// continues only the traces of its Causes.
	Annotations func(key string) map[string]string
	// Causes, if set, holds the traces of the other changes that enqueued
	// each key; the span links to them.
	Causes *TraceCauses
}

// Reconciler wraps r in a span named t.Span with attribute k8s.object (the
// key): a child of the trace recorded on the key's object (or, if that
// records none, of its first cause), linked to the traces of its other
// causes. The reconcile and every write it makes join that trace.
func (t Trace) Reconciler(r Reconciler) Reconciler {
	tp := t.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	tracer := tp.Tracer("github.com/kplane/kplane/services/client")
	return func(ctx context.Context, key string) (Result, error) {
		causes := t.Causes.Take(key)
		var parent trace.SpanContext
		if t.Annotations != nil {
			parent = telemetry.ObjectSpanContext(t.Annotations(key))
		}
		if !parent.IsValid() && len(causes) > 0 {
			parent, causes = causes[0], causes[1:]
		}
		opts := []trace.SpanStartOption{trace.WithAttributes(attribute.String("k8s.object", key))}
		for _, sc := range causes {
			if sc.TraceID() != parent.TraceID() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
		}
		if parent.IsValid() {
			if trace.SpanContextFromContext(ctx).IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: parent}))
			} else {
				ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
			}
		}
		ctx, s := tracer.Start(ctx, t.Span, opts...)
		defer s.End()
		res, err := r(ctx, key)
		if err != nil {
			s.SetStatus(codes.Error, err.Error())
		}
		return res, err
	}
}

// StoreAnnotations returns the annotations of the object key names in
// store: Trace.Annotations for a loop whose keys are store's.
func StoreAnnotations[T proto.Message](store *Indexer[T]) func(key string) map[string]string {
	return func(key string) map[string]string {
		obj, ok := store.Get(key)
		if !ok {
			return nil
		}
		if m, ok := any(obj).(interface{ GetMetadata() *metav1.ObjectMeta }); ok {
			return m.GetMetadata().GetAnnotations()
		}
		return nil
	}
}

// TracedReconciler wraps r in a span named span ("deployment.reconcile")
// that continues the trace recorded on the object key names in store: the
// reconcile, and every write it makes, join the trace of the change that
// caused it. tp nil uses the global tracer provider.
func TracedReconciler[T proto.Message](tp trace.TracerProvider, span string, store *Indexer[T], r Reconciler) Reconciler {
	return Trace{TracerProvider: tp, Span: span, Annotations: StoreAnnotations(store)}.Reconciler(r)
}
