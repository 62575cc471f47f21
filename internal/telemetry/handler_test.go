// This file holds the tests and benchmark of the gRPC server stats handler:
// one span per call with its rpc.* attributes, none of its own for a method
// that makes its own span (which is the caller's child), and rpc.server.*
// metrics for both.

package telemetry

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// serveCall drives one unary call's events through a server stats handler
// the way grpc-go does.
func serveCall(h stats.Handler) {
	ctx := h.TagRPC(context.Background(), &stats.RPCTagInfo{FullMethodName: "/kplane.core.v1.PodService/CreatePod"})
	now := time.Now()
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6443}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}
	h.HandleRPC(ctx, &stats.Begin{BeginTime: now})
	h.HandleRPC(ctx, &stats.InHeader{FullMethod: "/kplane.core.v1.PodService/CreatePod", LocalAddr: local, RemoteAddr: remote})
	h.HandleRPC(ctx, &stats.InPayload{Length: 100})
	h.HandleRPC(ctx, &stats.OutHeader{})
	h.HandleRPC(ctx, &stats.OutPayload{Length: 100})
	h.HandleRPC(ctx, &stats.End{BeginTime: now, EndTime: now.Add(time.Millisecond)})
}

func TestServerHandlerSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	serveCall(ServerHandler(tp, sdkmetric.NewMeterProvider()))
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name() != "kplane.core.v1.PodService/CreatePod" {
		t.Errorf("span name %q", s.Name())
	}
	got := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		got[kv.Key] = kv.Value.Emit()
	}
	for k, v := range map[attribute.Key]string{"rpc.method": "kplane.core.v1.PodService/CreatePod", "rpc.system.name": "grpc", "rpc.response.status_code": "OK"} {
		if got[k] != v {
			t.Errorf("attribute %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	// The listen address is left out (see noPayloads).
	for _, k := range []attribute.Key{"server.address", "server.port"} {
		if _, ok := got[k]; ok {
			t.Errorf("attribute %s recorded on a server span", k)
		}
	}
}

// callWith drives one unary call of method through a server stats handler,
// with the caller's trace context in the incoming metadata, and runs work
// in the call's context as grpc-go runs the method's handler.
func callWith(h stats.Handler, method string, parent trace.SpanContext, work func(context.Context)) {
	md := metadata.MD{}
	Propagator().Inject(trace.ContextWithSpanContext(context.Background(), parent), metadataCarrier(md))
	ctx := h.TagRPC(metadata.NewIncomingContext(context.Background(), md), &stats.RPCTagInfo{FullMethodName: method})
	now := time.Now()
	h.HandleRPC(ctx, &stats.Begin{BeginTime: now})
	work(ctx)
	h.HandleRPC(ctx, &stats.OutHeader{})
	h.HandleRPC(ctx, &stats.End{BeginTime: now, EndTime: now.Add(time.Millisecond)})
}

type metadataCarrier metadata.MD

func (c metadataCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c metadataCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// TestServerHandlerWithSpans: a method whose handler makes its own span
// gets no otelgrpc span, and that span is the caller's child; other
// methods get otelgrpc's; both get their rpc.server.* metrics.
func TestServerHandlerWithSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	h := ServerHandlerWithSpans(tp, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), "/etcdserverpb.KV/Txn")
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	own := func(ctx context.Context) {
		_, s := tp.Tracer("test").Start(ctx, "raft.apply")
		s.End()
	}
	callWith(h, "/etcdserverpb.KV/Txn", parent, own)
	callWith(h, "/etcdserverpb.KV/Range", parent, func(context.Context) {})

	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
		if s.SpanContext().TraceID() != parent.TraceID() || s.Parent().SpanID() != parent.SpanID() {
			t.Errorf("span %s: trace %s parent %s, want the caller's (%s, %s)", s.Name(), s.SpanContext().TraceID(), s.Parent().SpanID(), parent.TraceID(), parent.SpanID())
		}
	}
	if want := []string{"raft.apply", "etcdserverpb.KV/Range"}; !slices.Equal(names, want) {
		t.Errorf("spans %v, want %v", names, want)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	methods := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "rpc.server.call.duration" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				v, _ := dp.Attributes.Value("rpc.method")
				methods[v.AsString()] += dp.Count
			}
		}
	}
	if methods["etcdserverpb.KV/Txn"] != 1 || methods["etcdserverpb.KV/Range"] != 1 {
		t.Errorf("rpc.server.call.duration counts by method %v, want one call each of Txn and Range", methods)
	}
}

// BenchmarkServerHandler is one unary call's span through kplane's server
// handler against otelgrpc's own with the same options, into a batch span
// processor with a discarding exporter: the handler's share of a traced
// call (allocs/op and B/op are what load on the machine does not change).
func BenchmarkServerHandler(b *testing.B) {
	for _, c := range []struct {
		name string
		h    func(*sdktrace.TracerProvider, *sdkmetric.MeterProvider) stats.Handler
	}{
		{"otelgrpc", func(tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) stats.Handler {
			return otelgrpc.NewServerHandler(grpcOptions(tp, mp)...)
		}},
		{"kplane", func(tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) stats.Handler {
			return ServerHandler(tp, mp)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			defer tp.Shutdown(context.Background())
			h := c.h(tp, sdkmetric.NewMeterProvider())
			b.ReportAllocs()
			for b.Loop() {
				serveCall(h)
			}
		})
	}
}
