// This file holds the encoder: ended spans (Span) written straight into
// an OTLP ExportTraceServiceRequest in protobuf's wire format, appended to
// one reused buffer. The SDK's own exporter first converts every span into
// generated tracepb structs (a pointer per span, key-value, value, event,
// link and status) and then marshals those: at 100 % sampling that
// conversion and its garbage were about a third of the SDK's CPU per span.
//
// The output decodes to what the SDK's transform
// (go.opentelemetry.io/otel/exporters/otlp/otlptrace/internal/tracetransform)
// builds, field for field (encode_test.go checks it with proto.Equal), with
// one difference that decoding does not show: resources and scopes come in
// the order of their first span, where the SDK's come in map order.

package otlpexport

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the OTLP messages written here
// (opentelemetry/proto/{collector/trace,trace,resource,common}/v1).
const (
	requestResourceSpans protowire.Number = 1 // ExportTraceServiceRequest.resource_spans

	resourceSpansResource   protowire.Number = 1
	resourceSpansScopeSpans protowire.Number = 2
	resourceSpansSchemaURL  protowire.Number = 3

	resourceAttributes protowire.Number = 1

	scopeSpansScope     protowire.Number = 1
	scopeSpansSpans     protowire.Number = 2
	scopeSpansSchemaURL protowire.Number = 3

	scopeName       protowire.Number = 1
	scopeVersion    protowire.Number = 2
	scopeAttributes protowire.Number = 3

	spanTraceID           protowire.Number = 1
	spanSpanID            protowire.Number = 2
	spanTraceState        protowire.Number = 3
	spanParentSpanID      protowire.Number = 4
	spanName              protowire.Number = 5
	spanKind              protowire.Number = 6
	spanStartTime         protowire.Number = 7
	spanEndTime           protowire.Number = 8
	spanAttributes        protowire.Number = 9
	spanDroppedAttributes protowire.Number = 10
	spanEvents            protowire.Number = 11
	spanDroppedEvents     protowire.Number = 12
	spanLinks             protowire.Number = 13
	spanDroppedLinks      protowire.Number = 14
	spanStatus            protowire.Number = 15
	spanFlags             protowire.Number = 16

	eventTime              protowire.Number = 1
	eventName              protowire.Number = 2
	eventAttributes        protowire.Number = 3
	eventDroppedAttributes protowire.Number = 4

	linkTraceID           protowire.Number = 1
	linkSpanID            protowire.Number = 2
	linkAttributes        protowire.Number = 4
	linkDroppedAttributes protowire.Number = 5
	linkFlags             protowire.Number = 6

	statusMessage protowire.Number = 2
	statusCode    protowire.Number = 3

	keyValueKey   protowire.Number = 1
	keyValueValue protowire.Number = 2

	anyString protowire.Number = 1
	anyBool   protowire.Number = 2
	anyInt    protowire.Number = 3
	anyDouble protowire.Number = 4
	anyArray  protowire.Number = 5
	anyKvlist protowire.Number = 6
	anyBytes  protowire.Number = 7

	// ArrayValue.values and KeyValueList.values.
	listValues protowire.Number = 1
)

// OTLP's span flag bits above the W3C trace flags.
const (
	flagContextHasIsRemote = 0x100
	flagContextIsRemote    = 0x200
)

// OTLP's Status.StatusCode values.
const (
	statusUnset = 0
	statusOK    = 1
	statusError = 2
)

// Span is what the encoder reads of an ended span: the read side of the
// SDK's ReadOnlySpan (which satisfies it), so that spans of a tracer other
// than the SDK's (kplane's leantrace) are encoded by the same code.
type Span interface {
	Name() string
	SpanContext() trace.SpanContext
	Parent() trace.SpanContext
	SpanKind() trace.SpanKind
	StartTime() time.Time
	EndTime() time.Time
	Attributes() []attribute.KeyValue
	Links() []sdktrace.Link
	Events() []sdktrace.Event
	Status() sdktrace.Status
	InstrumentationScope() instrumentation.Scope
	Resource() *resource.Resource
	DroppedAttributes() int
	DroppedLinks() int
	DroppedEvents() int
}

var _ Span = sdktrace.ReadOnlySpan(nil)

// encoder builds one request at a time. Its buffer and groups are kept
// between requests, so that a steady stream of batches allocates nothing
// once they have grown to the largest batch. Not safe for concurrent use.
type encoder struct {
	b         []byte
	resources []resourceGroup
}

// resourceGroup is a batch's spans of one resource, by scope.
type resourceGroup struct {
	res    *resource.Resource
	key    attribute.Distinct
	scopes []scopeGroup
}

// scopeGroup is a resource's spans of one scope, as indexes into the
// batch.
type scopeGroup struct {
	scope instrumentation.Scope
	spans []int
}

// encodeRequest encodes spans as an ExportTraceServiceRequest into e.b
// (replacing what was there) and reports how many it encoded: nil spans are
// skipped, as the SDK's transform skips them.
func encodeRequest[S Span](e *encoder, spans []S) int {
	n := group(e, spans)
	e.b = e.b[:0]
	for i := range e.resources {
		rg := &e.resources[i]
		start := e.open(requestResourceSpans, 3)
		if rg.res != nil {
			rs := e.open(resourceSpansResource, 1)
			it := rg.res.Iter()
			for it.Next() {
				e.keyValue(resourceAttributes, it.Attribute())
			}
			e.close(rs)
		}
		for j := range rg.scopes {
			sg := &rg.scopes[j]
			ss := e.open(resourceSpansScopeSpans, 3)
			if sg.scope != (instrumentation.Scope{}) {
				sc := e.open(scopeSpansScope, 1)
				e.string(scopeName, sg.scope.Name)
				e.string(scopeVersion, sg.scope.Version)
				it := sg.scope.Attributes.Iter()
				for it.Next() {
					e.keyValue(scopeAttributes, it.Attribute())
				}
				e.close(sc)
			}
			for _, k := range sg.spans {
				encodeSpan(e, spans[k])
			}
			e.string(scopeSpansSchemaURL, sg.scope.SchemaURL)
			e.close(ss)
		}
		if rg.res != nil {
			e.string(resourceSpansSchemaURL, rg.res.SchemaURL())
		}
		e.close(start)
	}
	e.release()
	return n
}

// group sorts spans into e.resources by resource and scope, each in the
// order of its first span. A batch from one tracer provider has one
// resource and a handful of scopes, and consecutive spans often share
// both, so the last group matched is tried first.
func group[S Span](e *encoder, spans []S) int {
	e.resources = e.resources[:0]
	n := 0
	ri, si := -1, -1
	for k, s := range spans {
		if isNil(s) {
			continue
		}
		n++
		res, scope := s.Resource(), s.InstrumentationScope()
		if ri < 0 || e.resources[ri].res != res {
			ri = e.findResource(res)
			si = -1
		}
		rg := &e.resources[ri]
		if si < 0 || rg.scopes[si].scope != scope {
			si = -1
			for j := range rg.scopes {
				if rg.scopes[j].scope == scope {
					si = j
					break
				}
			}
			if si < 0 {
				rg.scopes = appendScope(rg.scopes, scope)
				si = len(rg.scopes) - 1
			}
		}
		rg.scopes[si].spans = append(rg.scopes[si].spans, k)
	}
	return n
}

// isNil reports whether a span is a nil interface or a nil pointer.
func isNil[S Span](s S) bool {
	var zero S
	return any(s) == any(zero)
}

// findResource returns the index of res's group, adding one if needed.
// Resources are told apart by their attributes, as the SDK's transform
// does; the pointer comparison is the common case's shortcut.
func (e *encoder) findResource(res *resource.Resource) int {
	key := res.Equivalent()
	for i := range e.resources {
		if e.resources[i].res == res || e.resources[i].key == key {
			return i
		}
	}
	// Reuse a previous batch's group (and its slices) when there is one.
	if len(e.resources) < cap(e.resources) {
		e.resources = e.resources[:len(e.resources)+1]
		rg := &e.resources[len(e.resources)-1]
		rg.res, rg.key, rg.scopes = res, key, rg.scopes[:0]
	} else {
		e.resources = append(e.resources, resourceGroup{res: res, key: key})
	}
	return len(e.resources) - 1
}

func appendScope(s []scopeGroup, scope instrumentation.Scope) []scopeGroup {
	if len(s) < cap(s) {
		s = s[:len(s)+1]
		s[len(s)-1].scope = scope
		s[len(s)-1].spans = s[len(s)-1].spans[:0]
		return s
	}
	return append(s, scopeGroup{scope: scope})
}

// release drops the references to the batch's resources and scopes, so
// that the encoder keeps nothing of a batch alive until the next.
func (e *encoder) release() {
	for i := range e.resources {
		rg := &e.resources[i]
		for j := range rg.scopes {
			rg.scopes[j].spans = rg.scopes[j].spans[:0]
			rg.scopes[j].scope = instrumentation.Scope{}
		}
		rg.scopes = rg.scopes[:0]
		rg.res, rg.key = nil, attribute.Distinct{}
	}
	e.resources = e.resources[:0]
}

func encodeSpan[S Span](e *encoder, s S) {
	start := e.open(scopeSpansSpans, 2)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	e.bytes(spanTraceID, tid[:])
	e.bytes(spanSpanID, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		e.string(spanTraceState, ts.String())
	}
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		e.bytes(spanParentSpanID, psid[:])
	}
	e.string(spanName, s.Name())
	if k := spanKindOf(s.SpanKind()); k != 0 {
		e.b = protowire.AppendTag(e.b, spanKind, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, k)
	}
	e.fixed64(spanStartTime, unixNano(s.StartTime().UnixNano()))
	e.fixed64(spanEndTime, unixNano(s.EndTime().UnixNano()))
	for _, kv := range s.Attributes() {
		e.keyValue(spanAttributes, kv)
	}
	e.uint32(spanDroppedAttributes, s.DroppedAttributes())
	for _, ev := range s.Events() {
		es := e.open(spanEvents, 1)
		e.fixed64(eventTime, unixNano(ev.Time.UnixNano()))
		e.string(eventName, ev.Name)
		for _, kv := range ev.Attributes {
			e.keyValue(eventAttributes, kv)
		}
		e.uint32(eventDroppedAttributes, ev.DroppedAttributeCount)
		e.close(es)
	}
	e.uint32(spanDroppedEvents, s.DroppedEvents())
	for _, l := range s.Links() {
		ls := e.open(spanLinks, 1)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e.bytes(linkTraceID, ltid[:])
		e.bytes(linkSpanID, lsid[:])
		// The SDK's transform leaves the link's trace_state out; so does
		// this, so that both send the same.
		for _, kv := range l.Attributes {
			e.keyValue(linkAttributes, kv)
		}
		e.uint32(linkDroppedAttributes, l.DroppedAttributeCount)
		e.b = protowire.AppendTag(e.b, linkFlags, protowire.Fixed32Type)
		e.b = protowire.AppendFixed32(e.b, flags(l.SpanContext.TraceFlags(), l.SpanContext))
		e.close(ls)
	}
	e.uint32(spanDroppedLinks, s.DroppedLinks())
	// The SDK's transform always sets a Status, so an unset one is an
	// empty message rather than none.
	st := s.Status()
	ss := e.open(spanStatus, 1)
	e.string(statusMessage, st.Description)
	if c := statusCodeOf(st.Code); c != statusUnset {
		e.b = protowire.AppendTag(e.b, statusCode, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, c)
	}
	e.close(ss)
	e.b = protowire.AppendTag(e.b, spanFlags, protowire.Fixed32Type)
	e.b = protowire.AppendFixed32(e.b, flags(sc.TraceFlags(), parent))
	e.close(start)
}

// keyValue writes a KeyValue as field num.
func (e *encoder) keyValue(num protowire.Number, kv attribute.KeyValue) {
	start := e.open(num, 1)
	e.string(keyValueKey, string(kv.Key))
	vs := e.open(keyValueValue, 1)
	e.value(kv.Value)
	e.close(vs)
	e.close(start)
}

// value writes an AnyValue's body. The value is a oneof: its field is
// written even when it holds the zero value (false, 0, ""), as the SDK's
// structs marshal it.
func (e *encoder) value(v attribute.Value) {
	switch v.Type() {
	case attribute.BOOL:
		e.b = protowire.AppendTag(e.b, anyBool, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		e.b = protowire.AppendTag(e.b, anyInt, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		e.b = protowire.AppendTag(e.b, anyDouble, protowire.Fixed64Type)
		e.b = protowire.AppendFixed64(e.b, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		e.b = protowire.AppendTag(e.b, anyString, protowire.BytesType)
		e.b = protowire.AppendString(e.b, v.AsString())
	case attribute.BYTESLICE:
		e.b = protowire.AppendTag(e.b, anyBytes, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		a := e.open(anyArray, 1)
		for _, x := range v.AsBoolSlice() {
			e.element(attribute.BoolValue(x))
		}
		e.close(a)
	case attribute.INT64SLICE:
		a := e.open(anyArray, 1)
		for _, x := range v.AsInt64Slice() {
			e.element(attribute.Int64Value(x))
		}
		e.close(a)
	case attribute.FLOAT64SLICE:
		a := e.open(anyArray, 1)
		for _, x := range v.AsFloat64Slice() {
			e.element(attribute.Float64Value(x))
		}
		e.close(a)
	case attribute.STRINGSLICE:
		a := e.open(anyArray, 1)
		for _, x := range v.AsStringSlice() {
			e.element(attribute.StringValue(x))
		}
		e.close(a)
	case attribute.SLICE:
		a := e.open(anyArray, 1)
		for _, x := range v.AsSlice() {
			e.element(x)
		}
		e.close(a)
	case attribute.MAP:
		m := e.open(anyKvlist, 1)
		for _, kv := range v.AsMap() {
			e.keyValue(listValues, kv)
		}
		e.close(m)
	case attribute.EMPTY:
		// An AnyValue with no value set.
	default:
		e.b = protowire.AppendTag(e.b, anyString, protowire.BytesType)
		e.b = protowire.AppendString(e.b, "INVALID")
	}
}

// element writes v as one of an ArrayValue's values.
func (e *encoder) element(v attribute.Value) {
	el := e.open(listValues, 1)
	e.value(v)
	e.close(el)
}

// open writes field num's tag and reserve bytes for its length, and
// returns where the field's body starts; close writes the length. reserve
// is a guess at the length's size (1 byte up to 127, 2 up to 16 KiB, 3 up
// to 2 MiB): a wrong guess costs moving the body once.
func (e *encoder) open(num protowire.Number, reserve int) int {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	for range reserve {
		e.b = append(e.b, 0)
	}
	return len(e.b)<<2 | reserve
}

func (e *encoder) close(mark int) {
	start, reserve := mark>>2, mark&3
	n := len(e.b) - start
	size := protowire.SizeVarint(uint64(n))
	if size != reserve {
		at := start - reserve + size
		if size > reserve {
			e.b = append(e.b, make([]byte, size-reserve)...)
		}
		copy(e.b[at:], e.b[start:start+n])
		e.b = e.b[:at+n]
	}
	protowire.AppendVarint(e.b[:start-reserve], uint64(n))
}

// string writes a proto3 string field; the empty string is the default and
// is left out.
func (e *encoder) string(num protowire.Number, s string) {
	if s == "" {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendString(e.b, s)
}

func (e *encoder) bytes(num protowire.Number, b []byte) {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendBytes(e.b, b)
}

func (e *encoder) fixed64(num protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.Fixed64Type)
	e.b = protowire.AppendFixed64(e.b, v)
}

// uint32 writes a dropped count, clamped to uint32 as the SDK does.
func (e *encoder) uint32(num protowire.Number, v int) {
	if v <= 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.VarintType)
	e.b = protowire.AppendVarint(e.b, uint64(min(int64(v), math.MaxUint32)))
}

func unixNano(ns int64) uint64 { return uint64(max(0, ns)) }

// flags are OTLP's span (or link) flags: the W3C trace flags, and whether
// the parent (for a link: the linked context) is remote.
func flags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagContextHasIsRemote
	if parent.IsRemote() {
		f |= flagContextIsRemote
	}
	return f
}

// spanKindOf maps the API's span kinds to OTLP's (the same numbers, but an
// unknown kind is UNSPECIFIED, as in the SDK's transform).
func spanKindOf(k trace.SpanKind) uint64 {
	switch k {
	case trace.SpanKindInternal, trace.SpanKindServer, trace.SpanKindClient,
		trace.SpanKindProducer, trace.SpanKindConsumer:
		return uint64(k)
	}
	return 0
}

func statusCodeOf(c codes.Code) uint64 {
	switch c {
	case codes.Ok:
		return statusOK
	case codes.Error:
		return statusError
	}
	return statusUnset
}
