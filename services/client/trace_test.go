// This file holds the tests of continuing an object's trace in a reconcile:
// the causes noted per key, and the reconcile span's parent and links.

package client

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kplane/kplane/internal/telemetry"
)

func traceparent(i int) map[string]string {
	return map[string]string{telemetry.Annotation: fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)}
}

func TestTraceCauses(t *testing.T) {
	var c TraceCauses
	c.Add("k", nil)                                  // no trace: nothing
	c.Add("k", traceparent(1))                       // noted
	c.Add("k", traceparent(1))                       // same trace: once
	c.AddChange("k", traceparent(2), traceparent(2)) // untraced update: nothing
	c.AddChange("k", traceparent(2), traceparent(3)) // traced update: noted
	for i := range 2 * maxCauses {
		c.Add("other", traceparent(100+i))
	}
	if got := c.Take("k"); len(got) != 2 || got[0].TraceID() != telemetry.ObjectSpanContext(traceparent(1)).TraceID() {
		t.Errorf("causes of k: %v", got)
	}
	if got := c.Take("k"); len(got) != 0 {
		t.Errorf("Take did not forget: %v", got)
	}
	if got := c.Take("other"); len(got) != maxCauses {
		t.Errorf("causes of other: %d, want the cap %d", len(got), maxCauses)
	}
}

func TestTraceReconciler(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	own := map[string]map[string]string{"withTrace": traceparent(7)}
	var causes TraceCauses
	r := Trace{TracerProvider: tp, Span: "x.reconcile", Causes: &causes,
		Annotations: func(k string) map[string]string { return own[k] }}.Reconciler(func(context.Context, string) (Result, error) { return Result{}, nil })

	// The object's trace is the parent; causes in other traces are links.
	causes.Add("withTrace", traceparent(8))
	causes.Add("withTrace", traceparent(7))
	// No trace on the object: the first cause is the parent.
	causes.Add("noTrace", traceparent(9))
	causes.Add("noTrace", traceparent(10))
	for _, k := range []string{"withTrace", "noTrace", "nothing"} {
		if _, err := r(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	check := func(s sdktrace.ReadOnlySpan, parent int, links ...int) {
		t.Helper()
		if want := telemetry.ObjectSpanContext(traceparent(parent)); s.Parent().SpanID() != want.SpanID() || s.SpanContext().TraceID() != want.TraceID() {
			t.Errorf("parent %v, want %v", s.Parent(), want)
		}
		if len(s.Links()) != len(links) {
			t.Fatalf("links %v, want %d", s.Links(), len(links))
		}
		for i, l := range links {
			if s.Links()[i].SpanContext.TraceID() != telemetry.ObjectSpanContext(traceparent(l)).TraceID() {
				t.Errorf("link %d: %v", i, s.Links()[i].SpanContext)
			}
		}
	}
	check(spans[0], 7, 8)
	check(spans[1], 9, 10)
	if spans[2].Parent().IsValid() || len(spans[2].Links()) != 0 {
		t.Errorf("no trace, no cause: want a root with no links, got parent %v links %v", spans[2].Parent(), spans[2].Links())
	}
}
