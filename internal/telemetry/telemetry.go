// Package telemetry holds what every kplane component shares for traces and
// metrics: an OpenTelemetry tracer provider configured from the standard
// OTEL_* environment, W3C trace-context propagation, a Prometheus registry
// served on /metrics (OpenTelemetry metrics through its Prometheus exporter,
// client-go work-queue metrics, hashicorp/raft's go-metrics), gRPC stats
// handlers and the trace annotation that carries one trace across the
// watch-driven hops (see annotation.go).
//
// Spans are made by OpenTelemetry's SDK tracer provider and its batch span
// processor and exported by OpenTelemetry's OTLP exporters (otlptracegrpc,
// otlptracehttp): the standard pieces, configured from the standard
// environment, maintained by OpenTelemetry rather than by us. kplane had
// its own span implementation and OTLP/gRPC encoder for a while; a span
// from them cost the request path about a third of the SDK's in
// microbenchmarks (some ten microseconds a create's spans), but the
// encoder left the create loop unchanged within noise. Our rule: keeping
// some 2,000 lines of our own beside the SDK needs a same-run A/B of 20+
// rounds showing at least 5 points of end-to-end throughput at 100 %
// sampling (BENCHMARKS.md, Tracing); short of that, the SDK.
//
// Sampling: unless OTEL_TRACES_SAMPLER names a sampler, a component that
// starts traces samples DefaultSampleRatio of the new ones (parent-based:
// a request arriving with a trace context follows its sampled flag), and
// OTEL_TRACES_SAMPLER_ARG alone sets that ratio (1: every request, as
// `kplane jaeger` and `kplane up --jaeger` ask for). Tracing every
// request costs the API service's pod creates several points of
// throughput; a tenth of them costs well under one.
//
// Tracing is off unless an OTLP endpoint is configured
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT): the
// tracer provider is then OpenTelemetry's no-op one, which creates no spans,
// records nothing and so writes no trace annotations: the cost is a
// function call per instrumented point.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// Config names the process's component.
type Config struct {
	// Service is service.name: "apiserver", "gateway", "store",
	// "scheduler", "controllers", "nodeagent". OTEL_SERVICE_NAME, when set,
	// wins, as the OpenTelemetry specification says.
	Service string
	// Instance is service.instance.id: what tells replicas apart (a store
	// member's name, a listen address). Empty: <hostname>-<pid>.
	Instance string
	// FollowOnly components start no trace of their own: they continue
	// the traces that reach them, through a request's context or an
	// object's trace annotation. The scheduler, controllers, node agents and
	// store act on streams of watch events and timers; as roots they would
	// make a trace of every lease renewal and resync. It sets the sampler
	// to parent-based never-sample-roots unless OTEL_TRACES_SAMPLER says
	// otherwise.
	FollowOnly bool
	// SpanProcessor, if set, receives every sampled span in addition to
	// (or, with no OTLP endpoint, instead of) the OTLP exporter: tests
	// pass a tracetest.SpanRecorder here.
	SpanProcessor sdktrace.SpanProcessor
	// Logger reports a malformed sampler setting and, once Install has
	// run, OpenTelemetry's errors (failed exports); nil discards them.
	Logger *slog.Logger
}

// Telemetry is one component's tracer and meter providers and its
// Prometheus registry. Close flushes and stops them.
type Telemetry struct {
	tracer   trace.TracerProvider
	provider *sdktrace.TracerProvider
	log      *slog.Logger
	meter    *sdkmetric.MeterProvider
	registry *prometheus.Registry
}

// Exporting reports whether the OTEL_* environment asks for trace export.
// OTEL_TRACES_EXPORTER=none turns it off even with an endpoint set.
func Exporting() bool {
	if strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")) == "none" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// New builds a component's telemetry from the OTEL_* environment: an OTLP
// span exporter (gRPC or HTTP, see Protocol) when an endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT,
// _HEADERS, _INSECURE, ... read by the exporter itself; the sampler from
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, see Sampler), otherwise
// no tracing at all. Metrics are always collected into
// the registry Handler serves. New sets no global state; Install does.
func New(ctx context.Context, cfg Config) (*Telemetry, error) {
	if cfg.Service == "" {
		return nil, errors.New("telemetry: a service name is required")
	}
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName(cfg.Service), semconv.ServiceInstanceID(cfg.Instance),
			semconv.ServiceNamespace("kplane")),
		resource.Environment(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	t := &Telemetry{registry: prometheus.NewRegistry(), log: cfg.Logger}
	t.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reader, err := otelprom.New(otelprom.WithRegisterer(t.registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	t.meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))

	var exp sdktrace.SpanExporter
	if Exporting() {
		if exp, err = newExporter(ctx); err != nil {
			return nil, err
		}
	}
	if exp == nil && cfg.SpanProcessor == nil {
		// Nothing would receive a span: create none.
		t.tracer = noop.NewTracerProvider()
		return t, nil
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	sampler, err := Sampler(os.Getenv, cfg.FollowOnly)
	if err != nil && cfg.Logger != nil {
		cfg.Logger.Warn("tracing: OTEL_TRACES_SAMPLER_ARG", "err", err, "sampler", sampler.Description())
	}
	if sampler != nil {
		opts = append(opts, sdktrace.WithSampler(sampler))
	}
	if exp != nil {
		opts = append(opts, sdktrace.WithBatcher(exp, batchOptions(os.Getenv)...))
	}
	if cfg.SpanProcessor != nil {
		opts = append(opts, sdktrace.WithSpanProcessor(cfg.SpanProcessor))
	}
	t.provider = sdktrace.NewTracerProvider(opts...)
	t.tracer = t.provider
	return t, nil
}

// Protocol is the OTLP transport for traces, as the OpenTelemetry
// specification has it: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL, else "grpc". The specification's preferred
// default is http/protobuf, but it allows an SDK to keep grpc where that
// was already its default, as it is kplane's (and every endpoint kplane
// writes, e.g. `kplane up --jaeger`'s, is Jaeger's OTLP gRPC port).
func Protocol() string {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return v
		}
	}
	return "grpc"
}

// newExporter is the OTLP span exporter for Protocol(): OpenTelemetry's
// otlptracegrpc or otlptracehttp, each reading the rest of the
// OTEL_EXPORTER_OTLP_* environment itself (_HEADERS, _INSECURE, _TIMEOUT,
// _COMPRESSION, _CERTIFICATE, _CLIENT_CERTIFICATE, _CLIENT_KEY, each also
// as _TRACES_...). With http/protobuf the endpoint is a base URL to which
// /v1/traces is appended (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as
// is).
func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	switch p := Protocol(); p {
	case "grpc":
		var opts []otlptracegrpc.Option
		if ep, ok := bareEndpoint(); ok {
			opts = append(opts, otlptracegrpc.WithEndpoint(ep))
		}
		e, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
		}
		return e, nil
	case "http/protobuf":
		e, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
		}
		return e, nil
	default:
		// http/json is in the specification, but Go's exporter does not
		// speak it.
		return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL %q is not supported (want grpc or http/protobuf)", p)
	}
}

// bareEndpoint is the gRPC endpoint when the environment gives it as a
// bare host:port (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
// OTEL_EXPORTER_OTLP_ENDPOINT), which gRPC takes as a target but the
// exporter's URL parsing does not: it would log "127.0.0.1:4317" as
// malformed and send to localhost:4317 instead. A URL (http://, https://,
// unix://, dns:///) is left to the exporter.
func bareEndpoint() (string, bool) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return v, !strings.Contains(v, "://")
		}
	}
	return "", false
}

// Install makes t the process's global tracer and meter provider and W3C
// trace context the global propagator, for libraries that only use the
// globals. Call it once, from main (components running client-go work
// queues then call workqueuemetrics.Install with t's Registry).
func (t *Telemetry) Install() {
	otel.SetTracerProvider(t.tracer)
	otel.SetMeterProvider(t.meter)
	otel.SetTextMapPropagator(Propagator())
	if log := t.log; log != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "err", err) }))
	}
}

// Close flushes buffered spans and stops the providers.
func (t *Telemetry) Close(ctx context.Context) error {
	var errs []error
	if t.provider != nil {
		errs = append(errs, t.provider.Shutdown(ctx))
	}
	errs = append(errs, t.meter.Shutdown(ctx))
	return errors.Join(errs...)
}

// TracerProvider is the component's tracer provider (no-op when tracing is
// off).
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tracer }

// MeterProvider is the component's meter provider; its instruments appear
// on /metrics.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.meter }

// Registry is the component's Prometheus registry, for collectors written
// against the Prometheus client.
func (t *Telemetry) Registry() *prometheus.Registry { return t.registry }

// Handler serves the registry in Prometheus' text format.
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{Registry: t.registry})
}

// Propagator is W3C trace context plus baggage: what kplane's components
// and their gRPC and HTTP instrumentation inject and extract.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// ServerHandler is the otelgrpc stats handler for a gRPC server: a span per
// call (continuing the caller's trace) and rpc.server.* metrics per method.
func ServerHandler(tp trace.TracerProvider, mp metric.MeterProvider) stats.Handler {
	return noPayloads{otelgrpc.NewServerHandler(grpcOptions(tp, mp)...)}
}

// ClientHandler is the otelgrpc stats handler for a gRPC client: a span per
// call, the trace context sent along, rpc.client.* metrics per method.
func ClientHandler(tp trace.TracerProvider, mp metric.MeterProvider) stats.Handler {
	return noPayloads{otelgrpc.NewClientHandler(grpcOptions(tp, mp)...)}
}

// ServerHandlerWithSpans is ServerHandler for a server whose handlers for
// some methods start their own span around all of a call's work (the
// store's raft.apply around a write): calls to those methods get no span of
// otelgrpc's, which would be a second span for the same interval and cost
// a tenth of a traced create's spans, but still their rpc.server.* metrics,
// and the caller's trace context is carried on, so the handler's own span
// is the caller's child. Every other method is traced as by ServerHandler.
func ServerHandlerWithSpans(tp trace.TracerProvider, mp metric.MeterProvider, ownSpan ...string) stats.Handler {
	h := &splitHandler{
		traced:  ServerHandler(tp, mp),
		ownSpan: noPayloads{otelgrpc.NewServerHandler(grpcOptions(noop.NewTracerProvider(), mp)...)},
		methods: make(map[string]bool, len(ownSpan)),
	}
	for _, m := range ownSpan {
		h.methods[m] = true
	}
	return h
}

// splitHandler sends a call's events to one of two handlers by its method,
// chosen at TagRPC and remembered in the call's context.
type splitHandler struct {
	traced, ownSpan stats.Handler
	methods         map[string]bool
}

type ownSpanKey struct{}

func (h *splitHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if h.methods[info.FullMethodName] {
		return context.WithValue(h.ownSpan.TagRPC(ctx, info), ownSpanKey{}, true)
	}
	return h.traced.TagRPC(ctx, info)
}

func (h *splitHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if ctx.Value(ownSpanKey{}) != nil {
		h.ownSpan.HandleRPC(ctx, s)
		return
	}
	h.traced.HandleRPC(ctx, s)
}

func (h *splitHandler) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return h.traced.TagConn(ctx, info)
}

func (h *splitHandler) HandleConn(ctx context.Context, s stats.ConnStats) {
	h.traced.HandleConn(ctx, s)
}

// noPayloads passes every RPC event on except two otelgrpc gets nothing
// worth its cost from:
//   - each message's payload event, which otelgrpc records nothing for
//     (message events are off): a watch stream sends one per event per
//     watcher, and the context lookups of otelgrpc's handler per message
//     were 8 % of the API service's CPU in the 10,000-watcher benchmark;
//   - a server's incoming-header event, from which otelgrpc only takes
//     the server's own listen address (server.address and server.port on
//     every server span: LocalAddr formatted, split and parsed, the span's
//     attributes grown, exported and stored per call). It is the same for
//     every call a process serves, and the resource's service.instance.id
//     already names the replica, so the trace loses nothing that tells
//     calls apart. Client spans keep server.address (the peer they called).
type noPayloads struct{ stats.Handler }

func (h noPayloads) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.InPayload, *stats.OutPayload:
		return
	case *stats.InHeader:
		if !s.Client {
			return
		}
	}
	h.Handler.HandleRPC(ctx, s)
}

// PropagatingClientHandler is ClientHandler without the span: it records
// the rpc.client.* metrics and sends the caller's trace context along, so
// the server's span is a child of the caller's own span. For clients whose
// caller already has a span around each call (the API service's store
// client: its store.Txn stage span), where a client span would be a second
// span for the same interval.
func PropagatingClientHandler(mp metric.MeterProvider) stats.Handler {
	// A no-op tracer's span carries its parent's span context, which the
	// handler then injects.
	return noPayloads{otelgrpc.NewClientHandler(grpcOptions(noop.NewTracerProvider(), mp)...)}
}

// DialOption is ClientHandler as a grpc.DialOption.
func (t *Telemetry) DialOption() grpc.DialOption {
	return grpc.WithStatsHandler(ClientHandler(t.tracer, t.meter))
}

// ServerOption is ServerHandler as a grpc.ServerOption.
func (t *Telemetry) ServerOption() grpc.ServerOption {
	return grpc.StatsHandler(ServerHandler(t.tracer, t.meter))
}

func grpcOptions(tp trace.TracerProvider, mp metric.MeterProvider) []otelgrpc.Option {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(mp), otelgrpc.WithPropagators(Propagator()),
		// Health checks and reflection are noise in a trace.
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool {
			return !strings.HasPrefix(info.FullMethodName, "/grpc.health.") && !strings.HasPrefix(info.FullMethodName, "/grpc.reflection.")
		}),
	}
}

// HTTPHandler wraps h with otelhttp: a server span per request, named after
// its method (and route when known), continuing a traceparent header, and
// http.server.* metrics.
func HTTPHandler(h http.Handler, operation string, tp trace.TracerProvider, mp metric.MeterProvider) http.Handler {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return otelhttp.NewHandler(h, operation,
		otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp), otelhttp.WithPropagators(Propagator()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "HTTP " + r.Method }),
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/livez", "/metrics":
				return false
			}
			return true
		}),
	)
}

// ServeMetrics serves /metrics on addr until ctx ends. An empty addr serves
// nothing. It returns once the listener is bound; errors after that are
// logged.
func (t *Telemetry) ServeMetrics(ctx context.Context, addr string, log *slog.Logger) (net.Addr, error) {
	if addr == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", t.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return lis.Addr(), nil
}
