// This file holds the exporter's benchmark: one batch shaped like a traced
// pod create's spans.

package otlpexport

import (
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// createBatch is a batch of 2,048 spans shaped like a traced pod create's
// in the API service (kplane's batch size; BENCHMARKS.md, Tracing).
func createBatch() []sdktrace.ReadOnlySpan {
	res := resource.NewSchemaless(attribute.String("service.name", "apiserver"),
		attribute.String("service.instance.id", "a"), attribute.String("service.namespace", "kplane"))
	grpcScope := instrumentation.Scope{Name: "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc", Version: "0.72.0"}
	stageScope := instrumentation.Scope{Name: "github.com/kplane/kplane/services/apiserver"}
	names := []string{"authn", "authz", "admission.mutate", "validate", "admission.validate", "store.Txn"}
	now := time.Now()
	var spans []sdktrace.ReadOnlySpan
	for i := 0; len(spans) < 2048; i++ {
		var tid trace.TraceID
		var root trace.SpanID
		tid[0], tid[1], root[0] = byte(i), byte(i>>8), 1
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: root, TraceFlags: trace.FlagsSampled})
		for j, n := range names {
			sid := root
			sid[1] = byte(j + 1)
			spans = append(spans, tracetest.SpanStub{Name: n, Parent: sc, Resource: res, InstrumentationScope: stageScope,
				SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
				SpanKind:    trace.SpanKindInternal, StartTime: now, EndTime: now.Add(time.Microsecond)}.Snapshot())
		}
		spans = append(spans, tracetest.SpanStub{Name: "kplane.core.v1.PodService/CreatePod", SpanContext: sc,
			Resource: res, InstrumentationScope: grpcScope, SpanKind: trace.SpanKindServer, StartTime: now, EndTime: now.Add(time.Millisecond),
			Attributes: []attribute.KeyValue{attribute.String("rpc.method", "kplane.core.v1.PodService/CreatePod"),
				attribute.String("rpc.system.name", "grpc"), attribute.String("rpc.response.status_code", "OK")}}.Snapshot())
	}
	return spans
}

// BenchmarkExport exports one batch per op, through the SDK's
// otlptracegrpc exporter and through ours, to a loopback server that
// takes the request's bytes without decoding them, so that what is
// measured (time and allocations per op) is the exporters' side.
//
//	go test ./internal/telemetry/otlpexport -run XXX -bench Export -benchmem
func BenchmarkExport(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, s grpc.ServerStream) error {
		var req []byte
		if err := s.RecvMsg(&req); err != nil {
			return err
		}
		empty := []byte{}
		return s.SendMsg(&empty)
	}))
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	ctx := context.Background()
	spans := createBatch()
	sdkExp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(lis.Addr().String()), otlptracegrpc.WithInsecure())
	if err != nil {
		b.Fatal(err)
	}
	ours, err := New(Config{Endpoint: lis.Addr().String(), Insecure: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		exp  sdktrace.SpanExporter
	}{{"sdk", sdkExp}, {"otlpexport", ours}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.exp.ExportSpans(ctx, spans); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
		})
	}
	_ = sdkExp.Shutdown(ctx)
	_ = ours.Shutdown(ctx)
}
