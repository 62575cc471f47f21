// This file holds the tracer and its spans, and the attribute value
// length limit.

package leantrace

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

type tracer struct {
	embedded.Tracer
	p     *Provider
	scope instrumentation.Scope
}

var _ trace.Tracer = (*tracer)(nil)

// Start starts a span as a child of the span context in ctx (unless
// trace.WithNewRoot), sampled as the provider's Sampler decides. A span
// not sampled is not recorded: it only carries its span context (a new
// span ID in the parent's trace, the sampled flag off) to its children and
// to the requests it makes.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if ctx == nil {
		ctx = context.Background()
	}
	var cfg trace.SpanConfig
	if len(opts) > 0 {
		cfg = trace.NewSpanStartConfig(opts...)
	}
	var psc trace.SpanContext
	if !cfg.NewRoot() {
		psc = trace.SpanContextFromContext(ctx)
	}
	scc := trace.SpanContextConfig{TraceID: psc.TraceID(), SpanID: newSpanID(), TraceState: psc.TraceState()}
	if !scc.TraceID.IsValid() {
		scc.TraceID = newTraceID()
	}
	sampled := t.p.sampler.sample(psc, scc.TraceID)
	if sampled {
		scc.TraceFlags = psc.TraceFlags() | trace.FlagsSampled
	} else {
		scc.TraceFlags = psc.TraceFlags() &^ trace.FlagsSampled
	}
	sc := trace.NewSpanContext(scc)
	if !sampled {
		s := &nonRecordingSpan{sc: sc, p: t.p}
		return trace.ContextWithSpan(ctx, s), s
	}
	s := &Span{t: t, sc: sc, parentID: psc.SpanID(), parentFlags: psc.TraceFlags(), parentRemote: psc.IsRemote(),
		kind: uint8(validKind(cfg.SpanKind())), name: name, start: cfg.Timestamp()}
	if s.start.IsZero() {
		s.start = time.Now()
	}
	for _, l := range cfg.Links() {
		s.addLink(l)
	}
	if attrs := cfg.Attributes(); len(attrs) > 0 {
		s.setAttributes(attrs)
	}
	return trace.ContextWithSpan(ctx, s), s
}

// newTraceID and newSpanID draw random non-zero IDs, as the SDK's default
// ID generator does (math/rand/v2's per-thread ChaCha8).
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// validKind is the SDK's trace.ValidateSpanKind: unspecified and unknown
// kinds are internal.
func validKind(k trace.SpanKind) trace.SpanKind {
	switch k {
	case trace.SpanKindInternal, trace.SpanKindServer, trace.SpanKindClient,
		trace.SpanKindProducer, trace.SpanKindConsumer:
		return k
	}
	return trace.SpanKindInternal
}

// Span is a recording span. Until End it takes changes (from any
// goroutine); once ended it is immutable and its read methods, the SDK's
// ReadOnlySpan's, describe it to exporters.
//
// It is kept small (one 240-byte allocation, against the SDK's 1 KB span
// and 0.5 KB snapshot): of the parent's span context only what differs
// from the span's own is kept (its trace ID and trace state are the
// span's), and events and links, which few spans have, live apart.
type Span struct {
	embedded.Span
	t     *tracer
	sc    trace.SpanContext
	start time.Time

	parentID     trace.SpanID
	parentFlags  trace.TraceFlags
	parentRemote bool
	kind         uint8

	mu           sync.Mutex
	ended        bool
	attrsDirty   bool // attrs may hold a key twice
	end          time.Time
	name         string
	attrs        []attribute.KeyValue
	droppedAttrs int
	status       sdktrace.Status
	more         *eventsAndLinks
}

// eventsAndLinks are a span's events and links, made on the first.
type eventsAndLinks struct {
	events        []sdktrace.Event
	droppedEvents int
	links         []sdktrace.Link
	droppedLinks  int
}

// extra returns s.more, making it on first use (s.mu held).
func (s *Span) extra() *eventsAndLinks {
	if s.more == nil {
		s.more = &eventsAndLinks{}
	}
	return s.more
}

var _ trace.Span = (*Span)(nil)

// End ends the span (at trace.WithTimestamp's time if given) and hands it
// to the provider. Later calls do nothing. Called while panicking (as
// `defer span.End()`), it records the panic as an exception event, as the
// SDK does, and the panic goes on.
func (s *Span) End(opts ...trace.SpanEndOption) {
	et := s.start.Add(time.Since(s.start)) // keeps the monotonic reading
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	var cfg trace.SpanConfig
	if len(opts) > 0 {
		cfg = trace.NewSpanEndConfig(opts...)
	}
	if recovered := recover(); recovered != nil {
		defer panic(recovered)
		attrs := []attribute.KeyValue{semconv.ExceptionType(typeStr(recovered)), semconv.ExceptionMessage(fmt.Sprint(recovered))}
		if cfg.StackTrace() {
			attrs = append(attrs, semconv.ExceptionStacktrace(stackTrace()))
		}
		s.addEvent(semconv.ExceptionEventName, time.Now(), attrs)
	}
	s.ended = true
	s.end = et
	if ts := cfg.Timestamp(); !ts.IsZero() {
		s.end = ts
	}
	if s.attrsDirty {
		s.dedupeSmall()
	}
	s.mu.Unlock()
	s.t.p.ended(s)
}

// SetAttributes sets attributes; a key set again takes the new value.
// Past the attribute count limit new keys are dropped (and counted), but
// keys already set still take new values.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	if len(kv) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.setAttributes(kv)
	}
}

// setAttributes is SetAttributes with s.mu held (or s not yet shared).
func (s *Span) setAttributes(kv []attribute.KeyValue) {
	limit := s.t.p.limits.AttributeCountLimit
	if limit == 0 {
		s.droppedAttrs += len(kv)
		return
	}
	if limit > 0 && len(s.attrs)+len(kv) > limit {
		s.setAttributesOverLimit(limit, kv)
		return
	}
	if s.attrs == nil {
		// Room for a couple more: a server span gets its status code at
		// its end.
		s.attrs = make([]attribute.KeyValue, 0, len(kv)+2)
	}
	for _, a := range kv {
		if !a.Valid() {
			s.droppedAttrs++
			continue
		}
		s.attrs = append(s.attrs, s.norm(a))
	}
	s.attrsDirty = len(s.attrs) > 1
}

// setAttributesOverLimit adds kv to attributes that would then exceed
// limit: deduplicated first, then updates applied and new keys added while
// there is room, the rest counted as dropped.
func (s *Span) setAttributesOverLimit(limit int, kv []attribute.KeyValue) {
	index := s.dedupe()
	for _, a := range kv {
		if !a.Valid() {
			s.droppedAttrs++
			continue
		}
		if i, ok := index[a.Key]; ok {
			s.attrs[i] = s.norm(a)
			continue
		}
		if len(s.attrs) >= limit {
			s.droppedAttrs++
			continue
		}
		s.attrs = append(s.attrs, s.norm(a))
		index[a.Key] = len(s.attrs) - 1
	}
}

// dedupe leaves one attribute per key, at the key's first position with
// its last value, and returns where each key is.
func (s *Span) dedupe() map[attribute.Key]int {
	index := make(map[attribute.Key]int, len(s.attrs))
	unique := s.attrs[:0]
	for _, a := range s.attrs {
		if i, ok := index[a.Key]; ok {
			unique[i] = a
			continue
		}
		unique = append(unique, a)
		index[a.Key] = len(unique) - 1
	}
	clear(s.attrs[len(unique):])
	s.attrs = unique
	s.attrsDirty = false
	return index
}

// dedupeSmall is dedupe without the index: a span has a handful of
// attributes, where a scan beats building a map.
func (s *Span) dedupeSmall() {
	if len(s.attrs) > 16 {
		s.dedupe()
		return
	}
	unique := s.attrs[:0]
next:
	for _, a := range s.attrs {
		for i := range unique {
			if unique[i].Key == a.Key {
				unique[i] = a
				continue next
			}
		}
		unique = append(unique, a)
	}
	clear(s.attrs[len(unique):])
	s.attrs = unique
	s.attrsDirty = false
}

func (s *Span) norm(a attribute.KeyValue) attribute.KeyValue {
	if l := s.t.p.limits.AttributeValueLengthLimit; l >= 0 {
		a.Value = truncateValue(l, a.Value)
	}
	return a
}

// AddEvent records an event (at trace.WithTimestamp's time, else now).
// Past the event count limit the oldest event is dropped.
func (s *Span) AddEvent(name string, opts ...trace.EventOption) {
	c := trace.NewEventConfig(opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.addEvent(name, c.Timestamp(), c.Attributes())
	}
}

func (s *Span) addEvent(name string, at time.Time, attrs []attribute.KeyValue) {
	e := sdktrace.Event{Name: name, Time: at}
	e.Attributes, e.DroppedAttributeCount = limitAttrs(attrs, s.t.p.limits.AttributePerEventCountLimit)
	m := s.extra()
	m.events = evict(m.events, e, s.t.p.limits.EventCountLimit, &m.droppedEvents)
}

// RecordError records err as an exception event (exception.type and
// exception.message, and exception.stacktrace with trace.WithStackTrace).
// It does not set the span's status.
func (s *Span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	opts = append(opts, trace.WithAttributes(semconv.ExceptionType(typeStr(err)), semconv.ExceptionMessage(err.Error())))
	if c := trace.NewEventConfig(opts...); c.StackTrace() {
		opts = append(opts, trace.WithAttributes(semconv.ExceptionStacktrace(stackTrace())))
	}
	s.AddEvent(semconv.ExceptionEventName, opts...)
}

// AddLink links the span to another span context. A link with neither a
// valid span context nor attributes nor trace state is ignored; past the
// link count limit the oldest link is dropped.
func (s *Span) AddLink(l trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.addLink(l)
	}
}

func (s *Span) addLink(l trace.Link) {
	if !l.SpanContext.IsValid() && len(l.Attributes) == 0 && l.SpanContext.TraceState().Len() == 0 {
		return
	}
	link := sdktrace.Link{SpanContext: l.SpanContext}
	link.Attributes, link.DroppedAttributeCount = limitAttrs(l.Attributes, s.t.p.limits.AttributePerLinkCountLimit)
	m := s.extra()
	m.links = evict(m.links, link, s.t.p.limits.LinkCountLimit, &m.droppedLinks)
}

// limitAttrs keeps the first limit (negative: all) of an event's or a
// link's attributes and counts the rest as dropped; none is nil.
func limitAttrs(attrs []attribute.KeyValue, limit int) ([]attribute.KeyValue, int) {
	dropped := 0
	if limit >= 0 && len(attrs) > limit {
		attrs, dropped = attrs[:limit:limit], len(attrs)-limit
	}
	if len(attrs) == 0 {
		return nil, dropped
	}
	return attrs, dropped
}

// evict appends v to q, first dropping q's oldest element when q is at
// limit (negative: no limit).
func evict[T any](q []T, v T, limit int, dropped *int) []T {
	if limit == 0 {
		*dropped++
		return q
	}
	if limit > 0 && len(q) >= limit {
		copy(q, q[1:])
		q = q[:len(q)-1]
		*dropped++
	}
	return append(q, v)
}

// SetStatus sets the status: Error and Ok override Unset, Ok overrides
// Error, and nothing overrides Ok. Only an Error keeps its description.
func (s *Span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.status.Code > code {
		return
	}
	st := sdktrace.Status{Code: code}
	if code == codes.Error {
		st.Description = description
	}
	s.status = st
}

// SetName renames the span.
func (s *Span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.name = name
	}
}

// IsRecording reports whether the span still takes changes (until End).
func (s *Span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// SpanContext is the span's identity, what its children and requests
// carry.
func (s *Span) SpanContext() trace.SpanContext { return s.sc }

// TracerProvider is the provider that made the span.
func (s *Span) TracerProvider() trace.TracerProvider { return s.t.p }

// The read methods below are sdktrace.ReadOnlySpan's. They are meant for
// an ended span, which no longer changes; on a span still recording they
// race with its writers.

// Name is the span's name.
func (s *Span) Name() string { return s.name }

// Parent is the parent's span context (invalid for a root).
func (s *Span) Parent() trace.SpanContext {
	if !s.parentID.IsValid() {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: s.sc.TraceID(), SpanID: s.parentID,
		TraceFlags: s.parentFlags, TraceState: s.sc.TraceState(), Remote: s.parentRemote})
}

// SpanKind is the span's kind.
func (s *Span) SpanKind() trace.SpanKind { return trace.SpanKind(s.kind) }

// StartTime is when the span started.
func (s *Span) StartTime() time.Time { return s.start }

// EndTime is when the span ended (zero before End).
func (s *Span) EndTime() time.Time { return s.end }

// Attributes are the span's attributes, one per key.
func (s *Span) Attributes() []attribute.KeyValue { return s.attrs }

// Links are the span's links.
func (s *Span) Links() []sdktrace.Link {
	if s.more == nil {
		return nil
	}
	return s.more.links
}

// Events are the span's events.
func (s *Span) Events() []sdktrace.Event {
	if s.more == nil {
		return nil
	}
	return s.more.events
}

// Status is the span's status.
func (s *Span) Status() sdktrace.Status { return s.status }

// InstrumentationScope is the scope of the tracer that started the span.
func (s *Span) InstrumentationScope() instrumentation.Scope { return s.t.scope }

// Resource is the provider's resource.
func (s *Span) Resource() *resource.Resource { return s.t.p.res }

// DroppedAttributes is how many attributes the limits dropped.
func (s *Span) DroppedAttributes() int { return s.droppedAttrs }

// DroppedLinks is how many links the limits dropped.
func (s *Span) DroppedLinks() int {
	if s.more == nil {
		return 0
	}
	return s.more.droppedLinks
}

// DroppedEvents is how many events the limits dropped.
func (s *Span) DroppedEvents() int {
	if s.more == nil {
		return 0
	}
	return s.more.droppedEvents
}

// nonRecordingSpan is a span not sampled: a span context and nothing else.
type nonRecordingSpan struct {
	embedded.Span
	sc trace.SpanContext
	p  *Provider
}

var _ trace.Span = (*nonRecordingSpan)(nil)

func (s *nonRecordingSpan) SpanContext() trace.SpanContext          { return s.sc }
func (s *nonRecordingSpan) IsRecording() bool                       { return false }
func (s *nonRecordingSpan) SetStatus(codes.Code, string)            {}
func (s *nonRecordingSpan) SetAttributes(...attribute.KeyValue)     {}
func (s *nonRecordingSpan) End(...trace.SpanEndOption)              {}
func (s *nonRecordingSpan) RecordError(error, ...trace.EventOption) {}
func (s *nonRecordingSpan) AddEvent(string, ...trace.EventOption)   {}
func (s *nonRecordingSpan) AddLink(trace.Link)                      {}
func (s *nonRecordingSpan) SetName(string)                          {}
func (s *nonRecordingSpan) TracerProvider() trace.TracerProvider    { return s.p }

// typeStr names an error's or a panic value's type as the SDK does
// (exception.type): package path and name, or the type's string for
// unnamed and builtin types.
func typeStr(v any) string {
	t := reflect.TypeOf(v)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// stackTrace is the calling goroutine's stack, at most 2 KiB of it, as the
// SDK records it.
func stackTrace() string {
	b := make([]byte, 2048)
	return string(b[:runtime.Stack(b, false)])
}

// truncateValue shortens a string value (or each string of a string
// slice, or a byte slice) to limit characters, as the SDK's attribute
// value length limit does: a string is cut at a character boundary, and a
// string past the limit loses its invalid UTF-8 bytes.
func truncateValue(limit int, v attribute.Value) attribute.Value {
	switch v.Type() {
	case attribute.STRING:
		if s := v.AsString(); len(s) > limit {
			return attribute.StringValue(truncate(limit, s))
		}
	case attribute.STRINGSLICE:
		ss := v.AsStringSlice()
		changed := false
		for i, s := range ss {
			if len(s) > limit {
				ss[i], changed = truncate(limit, s), true
			}
		}
		if changed {
			return attribute.StringSliceValue(ss)
		}
	case attribute.BYTESLICE:
		if b := v.AsByteSlice(); len(b) > limit {
			return attribute.ByteSliceValue(b[:limit])
		}
	}
	return v
}

func truncate(limit int, s string) string {
	if len(s) <= limit {
		return s
	}
	if utf8.ValidString(s) {
		n := 0
		for i := range s {
			if n == limit {
				return s[:i]
			}
			n++
		}
		return s
	}
	var b strings.Builder
	for i, n := 0, 0; i < len(s) && n < limit; {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || size > 1 {
			b.WriteString(s[i : i+size])
			n++
		}
		i += size
	}
	return b.String()
}
