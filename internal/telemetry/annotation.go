// This file holds the trace annotation: how one trace crosses the
// asynchronous, watch-driven hops.
//
// Design note. A pod's life is a chain of independent writes and watches:
// kubectl creates it, the scheduler sees it in a watch and binds it, the node
// agent sees the binding and starts it. No request links those hops, so the
// trace context has to travel on the object itself. The API service writes
// the W3C traceparent of the request that created or last changed an object
// into the annotation Annotation, in the same store Txn as the change; a
// component acting on the object's watch event starts its span as a child of
// that context (StartFromObject), and the writes it makes from there carry
// the trace on to the next object. So a Deployment's apply, its ReplicaSet,
// its Pods, their bindings and their status updates are one trace.
//
// Child spans rather than links: each hop has one cause — the last change to
// the object it reconciles — and a child shows in Jaeger's waterfall in
// causal order. A link is used only where a span already belongs to another
// trace when it meets the object (StartFromObject with a span already in
// ctx), since a span has one parent.
//
// The key is in kplane's own domain, trace.kplane.io/traceparent: the
// kubernetes.io and k8s.io prefixes are reserved to the Kubernetes project,
// and Kubernetes defines no object-level trace annotation (its API server
// tracing stops at the request). The value is exactly a W3C traceparent, so
// any OpenTelemetry propagator reads it and `kubectl get -o yaml` shows a
// trace id one can paste into Jaeger. Only a sampled request writes it; with
// tracing off objects are untouched.

package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Annotation holds the W3C traceparent of the request that created or last
// changed an object.
const Annotation = "trace.kplane.io/traceparent"

// AnnotationValue is the traceparent of ctx's span, or "" when ctx holds no
// sampled span (tracing off, or not sampled).
func AnnotationValue(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// ParseTraceParent parses a traceparent value; the result is invalid if v is
// not one.
func ParseTraceParent(v string) trace.SpanContext {
	if v == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": v})
	return trace.SpanContextFromContext(ctx)
}

// ObjectSpanContext is the remote span context recorded on an object's
// annotations; invalid if there is none.
func ObjectSpanContext(annotations map[string]string) trace.SpanContext {
	return ParseTraceParent(annotations[Annotation])
}

// StartFromObject starts span name for work on an object whose annotations
// are given: as a child of the object's recorded trace context when ctx holds
// no span, with a link to it when ctx's span already belongs to a trace, and
// as a plain span when the object records none.
func StartFromObject(ctx context.Context, tracer trace.Tracer, name string, annotations map[string]string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if sc := ObjectSpanContext(annotations); sc.IsValid() {
		if trace.SpanContextFromContext(ctx).IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		} else {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	return tracer.Start(ctx, name, opts...)
}
