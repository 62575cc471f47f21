// Package leantrace is kplane's implementation of the OpenTelemetry trace
// API (go.opentelemetry.io/otel/trace): a tracer provider whose spans cost
// a fraction of the OpenTelemetry SDK's on the request path, for the
// components that trace every request at 100 % sampling.
//
// Why not the SDK. At 100 % sampling a pod create makes eight spans (the
// API service's gRPC server span and its six stage spans, the store's
// raft.apply). With the SDK each costs some 3 µs of CPU on the request
// path on these machines (BENCHMARKS.md, Tracing): a recording span of
// about 1 KB and, at End, a snapshot of it (two large allocations), four
// walks up the request's context chain (the parent, the sampler, the
// sampler's trace state), and a channel send per span that wakes the batch
// span processor's goroutine once for every span. That was a third of
// tracing's cost per create, and the rest of it (the exporter, Jaeger's
// ingest) is per byte and per span whatever the SDK. Here a span is one
// 240-byte allocation (besides the context that carries it), the parent
// is read from the context once, End appends the span to a queue under a
// mutex, and the export goroutine wakes once per full batch (or per
// schedule delay), encodes the spans it is handed straight into OTLP and
// ships them.
//
// What it keeps of the SDK: the API's semantics (parent and remote parent,
// sampling and trace flags, trace state carried on, span kinds, status
// precedence, attribute deduplication with the last value winning, the
// span limits of OTEL_SPAN_*_LIMIT and OTEL_ATTRIBUTE_*_LIMIT, events and
// links evicting the oldest past their limit, RecordError's exception
// event, a panic recorded at End), the samplers of OTEL_TRACES_SAMPLER, the
// batch processor's OTEL_BSP_* settings, and the SDK's read-only view of an
// ended span (Span has ReadOnlySpan's read methods, so an exporter written
// for the SDK's spans reads these too). leantrace_test.go runs the same
// calls through both and compares what they record. What it leaves out:
// the SDK's span processors and ID generator hooks, child-span counts, the
// attribute value depth limit and map deduplication of the SLICE and MAP
// attribute types (kept as given), execution-tracer tasks and the SDK's
// self-observability metrics.
package leantrace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// Exporter receives the ended, sampled spans in batches, from one
// goroutine at a time. It must not keep the slice past the call (the spans
// themselves it may).
type Exporter interface {
	ExportSpans(ctx context.Context, spans []*Span) error
	Shutdown(ctx context.Context) error
}

// Batch is how ended spans are queued and exported: the SDK batch span
// processor's settings (OTEL_BSP_*, see BatchFromEnv).
type Batch struct {
	// MaxQueueSize bounds the spans waiting for export; past it, ended
	// spans are dropped (and counted). Default 2,048.
	MaxQueueSize int
	// MaxExportBatchSize is the most spans in one export, and a queue that
	// long is exported without waiting for ScheduleDelay. Default 512.
	MaxExportBatchSize int
	// ScheduleDelay is the longest a span waits in the queue. Default 5 s.
	ScheduleDelay time.Duration
	// ExportTimeout bounds one export call. Default 30 s.
	ExportTimeout time.Duration
}

// The SDK's defaults (sdk/trace.DefaultMaxQueueSize and friends).
const (
	defaultMaxQueueSize       = 2048
	defaultMaxExportBatchSize = 512
	defaultScheduleDelay      = 5 * time.Second
	defaultExportTimeout      = 30 * time.Second
)

func (b Batch) withDefaults() Batch {
	if b.MaxQueueSize <= 0 {
		b.MaxQueueSize = defaultMaxQueueSize
	}
	if b.MaxExportBatchSize <= 0 {
		b.MaxExportBatchSize = defaultMaxExportBatchSize
	}
	// As the SDK: a batch is never larger than the queue.
	b.MaxExportBatchSize = min(b.MaxExportBatchSize, b.MaxQueueSize)
	if b.ScheduleDelay <= 0 {
		b.ScheduleDelay = defaultScheduleDelay
	}
	if b.ExportTimeout <= 0 {
		b.ExportTimeout = defaultExportTimeout
	}
	return b
}

// Config configures a Provider.
type Config struct {
	// Resource describes the process (service.name and so on).
	Resource *resource.Resource
	// Sampler decides which new spans are recorded and exported; nil is
	// the SDK's default, ParentBased(AlwaysOn).
	Sampler *Sampler
	// Limits are the span limits; nil reads them from the environment as
	// the SDK does (sdktrace.NewSpanLimits).
	Limits *sdktrace.SpanLimits
	// Exporter receives the ended sampled spans in batches (see Batch);
	// nil exports nothing.
	Exporter Exporter
	Batch    Batch
	// OnEnd, if set, is called with every ended sampled span, on the
	// goroutine that ends it, before it is queued for export. Tests use it
	// to record spans as they end.
	OnEnd func(*Span)
	// Logger reports export errors and dropped spans; nil discards them.
	Logger *slog.Logger
}

// Provider is a trace.TracerProvider. Shutdown flushes and stops it.
type Provider struct {
	embedded.TracerProvider

	res     *resource.Resource
	sampler Sampler
	limits  sdktrace.SpanLimits
	onEnd   func(*Span)
	exp     Exporter
	batch   Batch
	log     *slog.Logger

	tmu     sync.Mutex
	tracers map[instrumentation.Scope]*tracer

	// mu guards the queue of ended spans and its spare.
	mu      sync.Mutex
	queue   []*Span
	spare   []*Span
	dropped int
	closed  bool

	isShutdown atomic.Bool
	kick       chan struct{}
	flushes    chan chan struct{}
	stop       chan struct{}
	done       chan struct{}
	stopOnce   sync.Once
}

var _ trace.TracerProvider = (*Provider)(nil)

// New starts a Provider (and, with an Exporter, its export goroutine).
func New(cfg Config) *Provider {
	p := &Provider{
		res:     cfg.Resource,
		onEnd:   cfg.OnEnd,
		exp:     cfg.Exporter,
		batch:   cfg.Batch.withDefaults(),
		log:     cfg.Logger,
		tracers: map[instrumentation.Scope]*tracer{},
		kick:    make(chan struct{}, 1),
		flushes: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if p.res == nil {
		p.res = resource.Empty()
	}
	if cfg.Sampler != nil {
		p.sampler = *cfg.Sampler
	} else {
		p.sampler = ParentBased(AlwaysOn())
	}
	if cfg.Limits != nil {
		p.limits = *cfg.Limits
	} else {
		p.limits = sdktrace.NewSpanLimits()
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.exp != nil {
		go p.run()
	} else {
		close(p.done)
	}
	return p
}

// Tracer returns the tracer of the named instrumentation scope; one per
// scope, made on first use.
func (p *Provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	if p.isShutdown.Load() {
		return noop.NewTracerProvider().Tracer(name, opts...)
	}
	c := trace.NewTracerConfig(opts...)
	scope := instrumentation.Scope{Name: name, Version: c.InstrumentationVersion(), SchemaURL: c.SchemaURL(), Attributes: c.InstrumentationAttributes()}
	p.tmu.Lock()
	defer p.tmu.Unlock()
	t, ok := p.tracers[scope]
	if !ok {
		t = &tracer{p: p, scope: scope}
		p.tracers[scope] = t
	}
	return t
}

// ended takes a span that has just ended: to OnEnd, and into the export
// queue unless the queue is full or the provider shut down.
func (p *Provider) ended(s *Span) {
	if p.isShutdown.Load() {
		return
	}
	if p.onEnd != nil {
		p.onEnd(s)
	}
	if p.exp == nil {
		return
	}
	p.mu.Lock()
	if p.closed || len(p.queue) >= p.batch.MaxQueueSize {
		if !p.closed {
			p.dropped++
		}
		p.mu.Unlock()
		return
	}
	p.queue = append(p.queue, s)
	full := len(p.queue) >= p.batch.MaxExportBatchSize
	p.mu.Unlock()
	if full {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// run is the export goroutine: it exports full batches as they fill, and
// all that is queued when the schedule delay passes, when asked to flush,
// and a last time when stopped.
func (p *Provider) run() {
	defer close(p.done)
	t := time.NewTimer(p.batch.ScheduleDelay)
	defer t.Stop()
	for {
		var flushed chan struct{}
		all, stopping := true, false
		select {
		case <-p.kick:
			all = false
		case <-t.C:
		case flushed = <-p.flushes:
		case <-p.stop:
			stopping = true
		}
		p.exportQueued(all)
		if flushed != nil {
			close(flushed)
		}
		if stopping {
			return
		}
		if all {
			t.Reset(p.batch.ScheduleDelay)
		}
	}
}

// exportQueued exports the queue in batches: all that it holds now, or
// only its full batches, leaving the rest to fill; then the full batches
// that filled meanwhile.
func (p *Provider) exportQueued(all bool) {
	size := p.batch.MaxExportBatchSize
	for ; ; all = false {
		p.mu.Lock()
		n := len(p.queue)
		if !all {
			n -= n % size
		}
		if n == 0 {
			p.mu.Unlock()
			return
		}
		var batch []*Span
		if n == len(p.queue) {
			batch = p.queue
			p.queue, p.spare = p.spare[:0], nil
		} else {
			batch = append(p.spare[:0], p.queue[:n]...)
			p.spare = nil
			rest := copy(p.queue, p.queue[n:])
			clear(p.queue[rest:])
			p.queue = p.queue[:rest]
		}
		dropped := p.dropped
		p.dropped = 0
		p.mu.Unlock()
		if dropped > 0 {
			p.log.Warn("trace export queue full: spans dropped", "dropped", dropped, "max_queue_size", p.batch.MaxQueueSize)
		}
		for rest := batch; len(rest) > 0; {
			k := min(len(rest), size)
			p.export(rest[:k])
			rest = rest[k:]
		}
		clear(batch)
		p.mu.Lock()
		p.spare = batch[:0]
		p.mu.Unlock()
	}
}

func (p *Provider) export(spans []*Span) {
	ctx, cancel := context.WithTimeout(context.Background(), p.batch.ExportTimeout)
	defer cancel()
	if err := p.exp.ExportSpans(ctx, spans); err != nil {
		p.log.Warn("trace export failed", "spans", len(spans), "err", err)
	}
}

// ForceFlush exports every span ended so far, waiting until that is done or
// ctx ends.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p.exp == nil || p.isShutdown.Load() {
		return nil
	}
	ch := make(chan struct{})
	select {
	case p.flushes <- ch:
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("leantrace: flush: %w", ctx.Err())
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("leantrace: flush: %w", ctx.Err())
	}
}

// ErrShutdown is returned by a second Shutdown.
var ErrShutdown = errors.New("leantrace: provider already shut down")

// Shutdown exports what is queued, stops the export goroutine and shuts the
// exporter down. Spans ended afterwards are not exported, and tracers
// obtained afterwards start no recording spans. Only the first call does
// anything.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.isShutdown.CompareAndSwap(false, true) {
		return ErrShutdown
	}
	if p.exp == nil {
		return nil
	}
	p.stopOnce.Do(func() { close(p.stop) })
	var err error
	select {
	case <-p.done:
	case <-ctx.Done():
		err = fmt.Errorf("leantrace: shutdown: %w", ctx.Err())
	}
	p.mu.Lock()
	p.closed = true
	p.queue, p.spare = nil, nil
	p.mu.Unlock()
	if serr := p.exp.Shutdown(ctx); serr != nil {
		err = errors.Join(err, fmt.Errorf("leantrace: shutdown: %w", serr))
	}
	return err
}

// Snapshot is the SDK's read-only view of an ended span, for code written
// against the SDK's spans: its span processors (a test's span recorder)
// and its exporters. It copies the span into a tracetest.SpanStub, the
// SDK's own way to build one outside its tracer.
func Snapshot(s *Span) sdktrace.ReadOnlySpan {
	return tracetest.SpanStub{
		Name: s.Name(), SpanContext: s.SpanContext(), Parent: s.Parent(), SpanKind: s.SpanKind(),
		StartTime: s.StartTime(), EndTime: s.EndTime(), Attributes: s.Attributes(), Events: s.Events(), Links: s.Links(),
		Status: s.Status(), DroppedAttributes: s.DroppedAttributes(), DroppedEvents: s.DroppedEvents(),
		DroppedLinks: s.DroppedLinks(), Resource: s.Resource(), InstrumentationScope: s.InstrumentationScope(),
	}.Snapshot()
}

// SDKExporter adapts an exporter of the SDK's (otlptracehttp, say) to the
// Provider: each batch is handed over as Snapshots.
func SDKExporter(e sdktrace.SpanExporter) Exporter { return sdkExporter{e} }

type sdkExporter struct{ e sdktrace.SpanExporter }

func (x sdkExporter) ExportSpans(ctx context.Context, spans []*Span) error {
	ro := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		ro[i] = Snapshot(s)
	}
	return x.e.ExportSpans(ctx, ro)
}

func (x sdkExporter) Shutdown(ctx context.Context) error { return x.e.Shutdown(ctx) }
