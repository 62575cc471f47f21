// This file holds the tests that hold leantrace to the OpenTelemetry SDK:
// the same spans, limits and sampling decisions from the same scripts, plus
// its batching, queue and environment settings.

package leantrace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// recorded is what both tracers are compared on: an ended span with its
// IDs replaced by their order of appearance and the times the test did
// not choose left out.
type recorded struct {
	Name                 string
	Trace, ID, Parent    int
	Flags                trace.TraceFlags
	TraceState           string
	ParentRemote         bool
	Kind                 trace.SpanKind
	Attributes           []attribute.KeyValue
	Events               []event
	Links                []link
	Status               sdktrace.Status
	Dropped              [3]int // attributes, events, links
	Scope                instrumentation.Scope
	Resource             string
	Start, End           time.Time // only those the test set
	Sampled, ContextSeen bool
}

type event struct {
	Name       string
	Attributes []attribute.KeyValue
	Dropped    int
	Time       time.Time // only a time the test set
	HasStack   bool
}

type link struct {
	Trace, ID  int
	Attributes []attribute.KeyValue
	Dropped    int
}

// fixed is the one time the script sets explicitly; other times are
// "now" and are not compared.
var fixed = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// ids numbers trace and span IDs by first appearance.
type ids struct {
	traces map[trace.TraceID]int
	spans  map[trace.SpanID]int
}

func (m *ids) trace(id trace.TraceID) int {
	if !id.IsValid() {
		return 0
	}
	if _, ok := m.traces[id]; !ok {
		m.traces[id] = len(m.traces) + 1
	}
	return m.traces[id]
}

func (m *ids) span(id trace.SpanID) int {
	if !id.IsValid() {
		return 0
	}
	if _, ok := m.spans[id]; !ok {
		m.spans[id] = len(m.spans) + 1
	}
	return m.spans[id]
}

func normalize(m *ids, s sdktrace.ReadOnlySpan) recorded {
	keep := func(t time.Time) time.Time {
		if t.Equal(fixed) || t.Equal(fixed.Add(time.Second)) {
			return t
		}
		return time.Time{}
	}
	r := recorded{
		Name: s.Name(), Trace: m.trace(s.SpanContext().TraceID()), ID: m.span(s.SpanContext().SpanID()),
		Parent: m.span(s.Parent().SpanID()), Flags: s.SpanContext().TraceFlags(), TraceState: s.SpanContext().TraceState().String(),
		ParentRemote: s.Parent().IsRemote(), Kind: s.SpanKind(), Attributes: s.Attributes(), Status: s.Status(),
		Dropped: [3]int{s.DroppedAttributes(), s.DroppedEvents(), s.DroppedLinks()}, Scope: s.InstrumentationScope(),
		Resource: s.Resource().String(), Start: keep(s.StartTime()), End: keep(s.EndTime()),
	}
	for _, e := range s.Events() {
		ev := event{Name: e.Name, Dropped: e.DroppedAttributeCount, Time: keep(e.Time)}
		for _, a := range e.Attributes {
			if a.Key == "exception.stacktrace" {
				ev.HasStack = strings.Contains(a.Value.AsString(), "goroutine")
				continue
			}
			ev.Attributes = append(ev.Attributes, a)
		}
		r.Events = append(r.Events, ev)
	}
	for _, l := range s.Links() {
		r.Links = append(r.Links, link{Trace: m.trace(l.SpanContext.TraceID()), ID: m.span(l.SpanContext.SpanID()), Attributes: l.Attributes, Dropped: l.DroppedAttributeCount})
	}
	return r
}

// script makes spans through tp the way instrumentation does, and returns
// the span contexts of what it started (the unsampled spans too), in
// order, so that the non-recording spans' contexts are compared as well.
type script func(t *testing.T, tp trace.TracerProvider) []trace.SpanContext

var res = resource.NewSchemaless(attribute.String("service.name", "test"))

// run runs the script against the SDK and against leantrace, with the
// same sampler and limits, and returns what each recorded.
func run(t *testing.T, sdkSampler sdktrace.Sampler, ours Sampler, limits sdktrace.SpanLimits, s script) (sdk, lean []recorded, sdkCtx, leanCtx []recorded) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	stp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdkSampler), sdktrace.WithRawSpanLimits(limits),
		sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res))
	sdkSCs := s(t, stp)
	var mu sync.Mutex
	var ended []*Span
	ltp := New(Config{Resource: res, Sampler: &ours, Limits: &limits, OnEnd: func(s *Span) {
		mu.Lock()
		defer mu.Unlock()
		ended = append(ended, s)
	}})
	leanSCs := s(t, ltp)

	sdkIDs := &ids{traces: map[trace.TraceID]int{}, spans: map[trace.SpanID]int{}}
	leanIDs := &ids{traces: map[trace.TraceID]int{}, spans: map[trace.SpanID]int{}}
	// The started contexts first, so that IDs are numbered in start order.
	ctxRec := func(m *ids, scs []trace.SpanContext) []recorded {
		var out []recorded
		for _, sc := range scs {
			out = append(out, recorded{Trace: m.trace(sc.TraceID()), ID: m.span(sc.SpanID()), Flags: sc.TraceFlags(),
				TraceState: sc.TraceState().String(), Sampled: sc.IsSampled(), ContextSeen: sc.IsValid()})
		}
		return out
	}
	sdkCtx, leanCtx = ctxRec(sdkIDs, sdkSCs), ctxRec(leanIDs, leanSCs)
	for _, s := range rec.Ended() {
		sdk = append(sdk, normalize(sdkIDs, s))
	}
	for _, s := range ended {
		lean = append(lean, normalize(leanIDs, Snapshot(s)))
	}
	return sdk, lean, sdkCtx, leanCtx
}

func unlimited() sdktrace.SpanLimits {
	return sdktrace.SpanLimits{AttributeValueLengthLimit: -1, AttributeValueDepthLimit: -1, AttributeCountLimit: -1,
		EventCountLimit: -1, LinkCountLimit: -1, AttributePerEventCountLimit: -1, AttributePerLinkCountLimit: -1}
}

var remoteParent = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID: trace.TraceID{0x0a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
	SpanID:  trace.SpanID{0x0b, 1, 2, 3, 4, 5, 6, 7}, TraceFlags: trace.FlagsSampled, Remote: true,
})

func withState(sc trace.SpanContext, kv string) trace.SpanContext {
	ts, err := trace.ParseTraceState(kv)
	if err != nil {
		panic(err)
	}
	return sc.WithTraceState(ts)
}

type customErr struct{}

func (customErr) Error() string { return "custom" }

// The scripts: each is what some instrumentation does with spans.
var scripts = map[string]script{
	"server span with stages": func(t *testing.T, tp trace.TracerProvider) []trace.SpanContext {
		g := tp.Tracer("otelgrpc", trace.WithInstrumentationVersion("0.72.0"), trace.WithSchemaURL("https://opentelemetry.io/schemas/1.37.0"))
		a := tp.Tracer("apiserver", trace.WithInstrumentationAttributes(attribute.String("k", "v")))
		ctx, root := g.Start(trace.ContextWithRemoteSpanContext(context.Background(), withState(remoteParent, "vendor=x")),
			"kplane.core.v1.PodService/CreatePod", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("rpc.method", "CreatePod"), attribute.String("rpc.system.name", "grpc")))
		scs := []trace.SpanContext{root.SpanContext()}
		for _, n := range []string{"authn", "authz", "admission.mutate", "validate", "admission.validate", "store.Txn"} {
			_, s := a.Start(ctx, n)
			if n == "authz" {
				s.SetStatus(codes.Error, "forbidden")
			}
			scs = append(scs, s.SpanContext())
			s.End()
		}
		root.SetAttributes(attribute.String("rpc.response.status_code", "OK"), attribute.String("rpc.method", "renamed"))
		root.SetStatus(codes.Unset, "ignored")
		root.End()
		return scs
	},
	"every span call": func(t *testing.T, tp trace.TracerProvider) []trace.SpanContext {
		tr := tp.Tracer("x")
		ctx, s := tr.Start(context.Background(), "first", trace.WithTimestamp(fixed), trace.WithSpanKind(trace.SpanKind(99)),
			trace.WithLinks(trace.Link{SpanContext: remoteParent, Attributes: []attribute.KeyValue{attribute.Int("l", 1)}},
				trace.Link{}), trace.WithAttributes(attribute.String("", "invalid key"), attribute.Bool("b", true)))
		s.SetName("renamed")
		s.AddEvent("ev", trace.WithTimestamp(fixed), trace.WithAttributes(attribute.Int64("n", 7), attribute.Int64("n", 8)))
		s.AddEvent("now")
		s.RecordError(errors.New("plain"))
		s.RecordError(customErr{}, trace.WithStackTrace(true))
		s.RecordError(nil)
		s.AddLink(trace.Link{SpanContext: remoteParent})
		s.SetAttributes(attribute.Float64("f", 1.5), attribute.Int64Slice("is", []int64{1, 2}), attribute.Bool("b", false))
		s.SetStatus(codes.Error, "bad")
		s.SetStatus(codes.Ok, "fine")
		s.SetStatus(codes.Error, "worse")
		_, child := tr.Start(ctx, "child", trace.WithSpanKind(trace.SpanKindClient))
		child.End(trace.WithTimestamp(fixed.Add(time.Second)))
		s.End(trace.WithTimestamp(fixed.Add(time.Second)))
		// Changes after End change nothing; a second End ends nothing.
		s.SetName("late")
		s.SetAttributes(attribute.String("late", "x"))
		s.AddEvent("late")
		s.SetStatus(codes.Error, "late")
		s.End()
		_, root := tr.Start(ctx, "new root", trace.WithNewRoot())
		root.End()
		if s.IsRecording() {
			t.Error("an ended span is recording")
		}
		return []trace.SpanContext{s.SpanContext(), child.SpanContext(), root.SpanContext()}
	},
	"panic at End": func(t *testing.T, tp trace.TracerProvider) []trace.SpanContext {
		var sc trace.SpanContext
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Errorf("recovered %v, want the panic to go on", r)
				}
			}()
			_, s := tp.Tracer("x").Start(context.Background(), "panics")
			sc = s.SpanContext()
			defer s.End()
			panic("boom")
		}()
		return []trace.SpanContext{sc}
	},
	"concurrent changes": func(t *testing.T, tp trace.TracerProvider) []trace.SpanContext {
		_, s := tp.Tracer("x").Start(context.Background(), "shared")
		var wg sync.WaitGroup
		// Eight goroutines change one span: what each writes is the same,
		// so the result does not depend on their order (the race detector
		// checks the locking).
		for range 8 {
			wg.Go(func() {
				s.SetAttributes(attribute.Int("same", 1))
				s.AddEvent("e")
			})
		}
		wg.Wait()
		s.End()
		return []trace.SpanContext{s.SpanContext()}
	},
}

// TestSameAsSDK runs each script through the OpenTelemetry SDK and through
// leantrace and requires the same spans: names, parentage, trace flags and
// state, kinds, attributes, events, links, statuses, dropped counts,
// scopes, resources and the times the script set.
func TestSameAsSDK(t *testing.T) {
	for name, s := range scripts {
		t.Run(name, func(t *testing.T) {
			sdk, lean, sdkCtx, leanCtx := run(t, sdktrace.ParentBased(sdktrace.AlwaysSample()), ParentBased(AlwaysOn()), unlimited(), s)
			compare(t, sdk, lean, sdkCtx, leanCtx)
		})
	}
}

func compare(t *testing.T, sdk, lean, sdkCtx, leanCtx []recorded) {
	t.Helper()
	opts := []cmp.Option{cmpopts.EquateEmpty(), cmp.AllowUnexported(attribute.Value{}), cmpopts.IgnoreUnexported(instrumentation.Scope{}),
		cmp.Transformer("set", func(s attribute.Set) []attribute.KeyValue { return s.ToSlice() })}
	if d := cmp.Diff(sdkCtx, leanCtx, opts...); d != "" {
		t.Errorf("started span contexts differ (-sdk +leantrace):\n%s", d)
	}
	if d := cmp.Diff(sdk, lean, opts...); d != "" {
		t.Errorf("recorded spans differ (-sdk +leantrace):\n%s", d)
	}
}

// TestLimitsSameAsSDK: the span limits drop and keep what the SDK's do.
func TestLimitsSameAsSDK(t *testing.T) {
	limits := sdktrace.SpanLimits{AttributeValueLengthLimit: 4, AttributeValueDepthLimit: -1, AttributeCountLimit: 3,
		EventCountLimit: 2, LinkCountLimit: 1, AttributePerEventCountLimit: 1, AttributePerLinkCountLimit: 0}
	s := func(t *testing.T, tp trace.TracerProvider) []trace.SpanContext {
		tr := tp.Tracer("x")
		_, s := tr.Start(context.Background(), "limited", trace.WithAttributes(attribute.String("a", "ααααααα"), attribute.String("b", "bb")),
			trace.WithLinks(trace.Link{SpanContext: remoteParent, Attributes: []attribute.KeyValue{attribute.Int("x", 1)}}))
		s.SetAttributes(attribute.StringSlice("c", []string{"abcdef", "ab"}), attribute.String("d", "dropped"), attribute.String("a", "updated past the limit"),
			attribute.String("", "invalid"), attribute.ByteSlice("e", []byte("bytes")), attribute.String("b", "b\xffb\xffbbbb"))
		s.SetAttributes(attribute.String("b", "ok\xff"))
		for i := range 4 {
			s.AddEvent(fmt.Sprint("event", i), trace.WithAttributes(attribute.Int("i", i), attribute.Int("j", i)))
		}
		s.AddLink(trace.Link{SpanContext: remoteParent.WithSpanID(trace.SpanID{9})})
		s.End()
		_, none := tr.Start(context.Background(), "none")
		none.End()
		return []trace.SpanContext{s.SpanContext()}
	}
	sdk, lean, sdkCtx, leanCtx := run(t, sdktrace.AlwaysSample(), AlwaysOn(), limits, s)
	compare(t, sdk, lean, sdkCtx, leanCtx)

	// With every limit at zero the SDK reports no dropped events or links
	// (its snapshot copies those counts only when some are kept); leantrace
	// reports them, as OTLP's dropped_*_count fields mean.
	zero := sdktrace.SpanLimits{AttributeValueLengthLimit: 0, AttributeValueDepthLimit: -1}
	sdk, lean, sdkCtx, leanCtx = run(t, sdktrace.AlwaysSample(), AlwaysOn(), zero, s)
	if got := lean[0].Dropped; got != [3]int{9, 4, 2} {
		t.Errorf("zero limits: dropped %v, want [9 4 2]", got)
	}
	lean[0].Dropped[1], lean[0].Dropped[2] = 0, 0
	compare(t, sdk, lean, sdkCtx, leanCtx)
}

// TestSamplersSameAsSDK: each sampler, over roots and local and remote
// parents sampled or not, samples what the SDK's samples, and unsampled
// spans carry the same flags and trace state on.
func TestSamplersSameAsSDK(t *testing.T) {
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: remoteParent.TraceID(), SpanID: remoteParent.SpanID(), Remote: true})
	s := func(t *testing.T, tp trace.TracerProvider) []trace.SpanContext {
		tr := tp.Tracer("x")
		var scs []trace.SpanContext
		// Roots over many trace IDs, so that a ratio sampler says both.
		for i := range 64 {
			_, s := tr.Start(context.Background(), fmt.Sprint("root", i))
			scs = append(scs, s.SpanContext())
			s.End()
		}
		for _, parent := range []trace.SpanContext{remoteParent, withState(unsampled, "v=1")} {
			ctx, s := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "child of remote")
			_, local := tr.Start(ctx, "child of local")
			scs = append(scs, s.SpanContext(), local.SpanContext())
			local.End()
			s.End()
		}
		return scs
	}
	for _, c := range []struct {
		name string
		sdk  sdktrace.Sampler
		ours Sampler
	}{
		{"always_on", sdktrace.AlwaysSample(), AlwaysOn()},
		{"always_off", sdktrace.NeverSample(), AlwaysOff()},
		{"traceidratio 0.5", sdktrace.TraceIDRatioBased(0.5), TraceIDRatio(0.5)},
		{"parentbased_always_on", sdktrace.ParentBased(sdktrace.AlwaysSample()), ParentBased(AlwaysOn())},
		{"parentbased_always_off", sdktrace.ParentBased(sdktrace.NeverSample()), ParentBased(AlwaysOff())},
		{"parentbased_traceidratio 0.25", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.25)), ParentBased(TraceIDRatio(0.25))},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, want := c.ours.Description(), c.sdk.Description(); got != want {
				t.Errorf("description: got %q, want %q", got, want)
			}
			// Trace IDs are random, so the ratio samplers are compared on
			// the same IDs: leantrace's decision for each of the SDK's.
			if strings.Contains(c.name, "ratio") {
				for range 1000 {
					tid := newTraceID()
					got := c.ours.sample(trace.SpanContext{}, tid)
					want := c.sdk.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid}).Decision == sdktrace.RecordAndSample
					if got != want {
						t.Fatalf("trace %s: sampled %v, want %v", tid, got, want)
					}
				}
				return
			}
			sdk, lean, sdkCtx, leanCtx := run(t, c.sdk, c.ours, unlimited(), s)
			compare(t, sdk, lean, sdkCtx, leanCtx)
		})
	}
}

func TestSamplerFromEnv(t *testing.T) {
	for _, c := range []struct {
		sampler, arg string
		want         Sampler
		ok, err      bool
	}{
		{"", "", Sampler{}, false, false},
		{"always_on", "", AlwaysOn(), true, false},
		{" Always_Off ", "", AlwaysOff(), true, false},
		{"traceidratio", "", TraceIDRatio(1), true, false},
		{"traceidratio", "0.1", TraceIDRatio(0.1), true, false},
		{"traceidratio", "2", TraceIDRatio(1), true, true},
		{"traceidratio", "x", TraceIDRatio(1), true, true},
		{"parentbased_always_on", "", ParentBased(AlwaysOn()), true, false},
		{"parentbased_always_off", "", ParentBased(AlwaysOff()), true, false},
		{"parentbased_traceidratio", "0.5", ParentBased(TraceIDRatio(0.5)), true, false},
		{"parentbased_traceidratio", "-1", ParentBased(TraceIDRatio(1)), true, true},
		{"jaeger_remote", "", ParentBased(AlwaysOn()), true, true},
	} {
		env := map[string]string{"OTEL_TRACES_SAMPLER": c.sampler, "OTEL_TRACES_SAMPLER_ARG": c.arg}
		s, ok, err := SamplerFromEnv(func(k string) string { return env[k] })
		if ok != c.ok || (err != nil) != c.err || s != c.want {
			t.Errorf("%q %q: got %q, %v, %v; want %q, %v, error %v", c.sampler, c.arg, s.Description(), ok, err, c.want.Description(), c.ok, c.err)
		}
	}
}

func TestBatchFromEnv(t *testing.T) {
	def := Batch{MaxQueueSize: 16384, MaxExportBatchSize: 2048}
	env := map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_BSP_MAX_QUEUE_SIZE": "100"}
	got, err := BatchFromEnv(func(k string) string { return env[k] }, def)
	want := Batch{MaxQueueSize: 100, MaxExportBatchSize: 2048, ScheduleDelay: 200 * time.Millisecond}
	if err != nil || got != want {
		t.Errorf("got %+v, %v; want %+v", got, err, want)
	}
	env["OTEL_BSP_EXPORT_TIMEOUT"] = "soon"
	if got, err := BatchFromEnv(func(k string) string { return env[k] }, def); err == nil || got != def {
		t.Errorf("a malformed value: got %+v, %v; want the defaults and an error", got, err)
	}
}

// exporter records the batches it is given.
type exporter struct {
	mu       sync.Mutex
	batches  [][]*Span
	shutdown bool
	fail     error
	block    chan struct{}
}

func (e *exporter) ExportSpans(_ context.Context, spans []*Span) error {
	if e.block != nil {
		<-e.block
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.batches = append(e.batches, append([]*Span(nil), spans...))
	return e.fail
}

func (e *exporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shutdown = true
	return nil
}

func (e *exporter) sizes() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n []int
	for _, b := range e.batches {
		n = append(n, len(b))
	}
	return n
}

func startEnd(tp trace.TracerProvider, n int) {
	tr := tp.Tracer("x")
	for range n {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
}

// TestBatching: a full batch is exported without waiting for the schedule
// delay; what is left goes at the delay, at ForceFlush and at Shutdown;
// nothing is exported after Shutdown.
func TestBatching(t *testing.T) {
	exp := &exporter{}
	tp := New(Config{Exporter: exp, Batch: Batch{MaxQueueSize: 100, MaxExportBatchSize: 10, ScheduleDelay: time.Hour}})
	startEnd(tp, 25)
	deadline := time.Now().Add(10 * time.Second)
	for len(exp.sizes()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("full batches not exported: %v", exp.sizes())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exp.sizes(); !cmp.Equal(got, []int{10, 10, 5}) {
		t.Errorf("batches after ForceFlush: got %v, want [10 10 5]", got)
	}
	startEnd(tp, 3)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exp.sizes(); !cmp.Equal(got, []int{10, 10, 5, 3}) || !exp.shutdown {
		t.Errorf("after Shutdown: batches %v, exporter shut down %v; want [10 10 5 3], true", got, exp.shutdown)
	}
	startEnd(tp, 3)
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exp.sizes(); len(got) != 4 {
		t.Errorf("spans exported after Shutdown: %v", got)
	}
	if err := tp.Shutdown(context.Background()); !errors.Is(err, ErrShutdown) {
		t.Errorf("second Shutdown: got %v, want ErrShutdown", err)
	}
	if _, s := tp.Tracer("after").Start(context.Background(), "x"); s.IsRecording() {
		t.Error("a tracer obtained after Shutdown records")
	}
}

// TestScheduleDelay: spans short of a batch are exported once the delay
// passes.
func TestScheduleDelay(t *testing.T) {
	exp := &exporter{}
	tp := New(Config{Exporter: exp, Batch: Batch{MaxExportBatchSize: 100, ScheduleDelay: 20 * time.Millisecond}})
	defer tp.Shutdown(context.Background())
	startEnd(tp, 3)
	deadline := time.Now().Add(10 * time.Second)
	for !cmp.Equal(exp.sizes(), []int{3}) {
		if time.Now().After(deadline) {
			t.Fatalf("got %v, want [3] after the schedule delay", exp.sizes())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestQueueFull: while the exporter is stuck, spans past the queue's size
// are dropped, not queued without bound, and the rest are exported once
// it moves; an export error loses only its batch.
func TestQueueFull(t *testing.T) {
	exp := &exporter{block: make(chan struct{}), fail: errors.New("collector down")}
	tp := New(Config{Exporter: exp, Batch: Batch{MaxQueueSize: 10, MaxExportBatchSize: 5, ScheduleDelay: time.Hour}})
	startEnd(tp, 5) // a full batch: the exporter takes it and blocks
	deadline := time.Now().Add(10 * time.Second)
	for {
		tp.mu.Lock()
		n := len(tp.queue)
		tp.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the export goroutine did not take the first batch")
		}
		time.Sleep(5 * time.Millisecond)
	}
	startEnd(tp, 25) // 10 queue, 15 dropped
	tp.mu.Lock()
	queued, dropped := len(tp.queue), tp.dropped
	tp.mu.Unlock()
	if queued != 10 || dropped != 15 {
		t.Errorf("queued %d, dropped %d; want 10 and 15", queued, dropped)
	}
	close(exp.block)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exp.sizes(); !cmp.Equal(got, []int{5, 5, 5}) {
		t.Errorf("batches: got %v, want [5 5 5]", got)
	}
}

// TestNoExporter: without an exporter spans go to OnEnd only, and
// Shutdown and ForceFlush return at once.
func TestNoExporter(t *testing.T) {
	n := 0
	tp := New(Config{OnEnd: func(*Span) { n++ }})
	startEnd(tp, 3)
	if n != 3 {
		t.Errorf("OnEnd saw %d spans, want 3", n)
	}
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Error(err)
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// TestSpanSize: a span stays one small allocation (the package comment
// and the Span doc count on it).
func TestSpanSize(t *testing.T) {
	if n := unsafe.Sizeof(Span{}); n > 240 {
		t.Errorf("Span is %d bytes, want at most 240", n)
	}
}

// TestTracerPerScope: one tracer per instrumentation scope.
func TestTracerPerScope(t *testing.T) {
	tp := New(Config{})
	if tp.Tracer("a") != tp.Tracer("a") {
		t.Error("two tracers for one scope")
	}
	if tp.Tracer("a") == tp.Tracer("a", trace.WithInstrumentationVersion("1")) {
		t.Error("one tracer for two scopes")
	}
}

// BenchmarkCreateTrace makes a traced pod create's spans in the API
// service (the gRPC server span and six stage spans) through the SDK with
// its batch span processor and through leantrace, both handing batches to
// an exporter that does nothing, to compare what the spans themselves
// cost on the request path.
//
//	go test ./internal/telemetry/leantrace -run XXX -bench CreateTrace -benchmem
func BenchmarkCreateTrace(b *testing.B) {
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter(),
		sdktrace.WithMaxQueueSize(16384), sdktrace.WithMaxExportBatchSize(2048)), sdktrace.WithResource(res))
	defer sdk.Shutdown(context.Background())
	lean := New(Config{Resource: res, Exporter: &discard{}, Batch: Batch{MaxQueueSize: 16384, MaxExportBatchSize: 2048}})
	defer lean.Shutdown(context.Background())
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"sdk", sdk}, {"leantrace", lean}} {
		b.Run(c.name, func(b *testing.B) {
			g, a := c.tp.Tracer("otelgrpc"), c.tp.Tracer("apiserver")
			stages := []string{"authn", "authz", "admission.mutate", "validate", "admission.validate", "store.Txn"}
			b.ReportAllocs()
			for b.Loop() {
				ctx, root := g.Start(context.Background(), "kplane.core.v1.PodService/CreatePod", trace.WithSpanKind(trace.SpanKindServer),
					trace.WithAttributes(attribute.String("rpc.method", "kplane.core.v1.PodService/CreatePod"), attribute.String("rpc.system.name", "grpc")))
				for _, n := range stages {
					_, s := a.Start(ctx, n)
					s.End()
				}
				root.SetAttributes(attribute.String("rpc.response.status_code", "OK"))
				root.End()
			}
		})
	}
}

type discard struct{}

func (discard) ExportSpans(context.Context, []*Span) error { return nil }
func (discard) Shutdown(context.Context) error             { return nil }
