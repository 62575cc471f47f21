package telemetry

import (
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
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
