// Package otlpexport is an OTLP/gRPC span exporter that writes ended spans
// (the SDK's, through ExportSpans, or any with their read methods, such as
// kplane's leantrace spans, through Export) straight into the
// ExportTraceServiceRequest wire format (encode.go) and sends those bytes
// with a raw-bytes gRPC codec, instead of building the generated OTLP
// structs and marshalling them as the SDK's otlptracegrpc exporter does.
// It sends what that exporter sends, is configured from the same
// OTEL_EXPORTER_OTLP_* environment (env.go), and retries as it does.
package otlpexport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// exportMethod is OTLP's trace export RPC.
const exportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

// The SDK exporter's defaults (otlptracegrpc's otlpconfig and retry).
const (
	defaultTimeout        = 10 * time.Second
	defaultMaxRequestSize = 64 << 20
	// maxKeptBuffer is the largest encoding buffer kept for the next
	// batch: a full batch of kplane's spans (2,048) is well under 1 MiB.
	maxKeptBuffer   = 8 << 20
	retryInitial    = 5 * time.Second
	retryMax        = 30 * time.Second
	retryMaxElapsed = time.Minute
)

// Config is where and how to export.
type Config struct {
	// Endpoint is the gRPC target, e.g. "127.0.0.1:4317".
	Endpoint string
	// Insecure sends in plain text; otherwise TLS (TLS's roots and client
	// certificate; nil: the host's roots).
	Insecure bool
	TLS      *tls.Config
	// Headers are sent with every export as gRPC metadata.
	Headers map[string]string
	// Timeout bounds one export call, retries included (0: 10 s).
	Timeout time.Duration
	// Gzip compresses requests.
	Gzip bool
	// Logger reports collectors' partial successes; nil discards them.
	Logger *slog.Logger
	// DialOptions are appended to the exporter's own (tests pass a
	// bufconn dialer).
	DialOptions []grpc.DialOption
}

// Exporter is a sdktrace.SpanExporter. The batch span processor calls
// ExportSpans from one goroutine; calls are serialised anyway, because
// they share one encoding buffer.
type Exporter struct {
	conn    *grpc.ClientConn
	md      metadata.MD
	timeout time.Duration
	// retryInitial is the first retry's backoff (tests shorten it).
	retryInitial time.Duration
	callOpts     []grpc.CallOption
	log          *slog.Logger
	// stop cancels exports in flight when Shutdown's context ends first.
	stopCtx context.Context
	stop    context.CancelFunc

	mu     sync.Mutex
	closed bool
	enc    encoder
	resp   []byte
}

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// New creates an exporter for cfg. Like the SDK's, it does not connect
// until the first export.
func New(cfg Config) (*Exporter, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("otlpexport: no endpoint")
	}
	var creds credentials.TransportCredentials
	if cfg.Insecure {
		creds = insecure.NewCredentials()
	} else {
		creds = credentials.NewTLS(cfg.TLS)
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent("kplane OTLP trace exporter"),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Endpoint, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlpexport: %w", err)
	}
	e := &Exporter{
		conn:         conn,
		timeout:      cfg.Timeout,
		retryInitial: retryInitial,
		callOpts:     []grpc.CallOption{grpc.ForceCodecV2(rawCodec{})},
		log:          cfg.Logger,
	}
	if e.timeout <= 0 {
		e.timeout = defaultTimeout
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Headers) > 0 {
		e.md = metadata.New(cfg.Headers)
	}
	if cfg.Gzip {
		e.callOpts = append(e.callOpts, grpc.UseCompressor(gzip.Name))
	}
	e.stopCtx, e.stop = context.WithCancel(context.Background())
	return e, nil
}

var errShutdown = errors.New("otlpexport: exporter is shut down")

// ExportSpans encodes the SDK's spans and sends them in one Export call,
// retrying as the SDK's exporter does (see retryable) within the export
// timeout.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	return Export(ctx, e, spans)
}

// Export is ExportSpans for the spans of any tracer that have the SDK's
// read methods (Span).
func Export[S Span](ctx context.Context, e *Exporter, spans []S) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errShutdown
	}
	n := encodeRequest(&e.enc, spans)
	if n == 0 {
		return nil
	}
	if len(e.enc.b) > defaultMaxRequestSize {
		return fmt.Errorf("otlpexport: request message too large: exceeded %d bytes", defaultMaxRequestSize)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, e.timeout, errors.New("otlpexport: export timeout"))
	defer cancel()
	defer context.AfterFunc(e.stopCtx, cancel)()
	if e.md.Len() > 0 {
		md := e.md
		if out, ok := metadata.FromOutgoingContext(ctx); ok {
			md = metadata.Join(md, out)
		}
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	err := e.send(ctx)
	if cap(e.enc.b) > maxKeptBuffer {
		// A batch of huge attributes should not pin its buffer for good.
		e.enc.b = nil
	}
	if err != nil {
		return fmt.Errorf("otlpexport: exporting %d spans: %w", n, err)
	}
	return nil
}

// send makes the Export call, retrying what the SDK's exporter retries:
// exponential backoff from 5 s (×1.5, ±50 % jitter, at most 30 s a wait),
// no longer than a minute in all, and never past ctx's deadline (the
// export timeout, 10 s by default, so in practice one or two retries).
func (e *Exporter) send(ctx context.Context) error {
	begin := time.Now()
	interval := e.retryInitial
	for {
		e.resp = e.resp[:0]
		err := e.conn.Invoke(ctx, exportMethod, &e.enc.b, &e.resp, e.callOpts...)
		if err == nil {
			e.partialSuccess()
			return nil
		}
		retry, throttle := retryable(err)
		if !retry {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		elapsed := time.Since(begin)
		if elapsed > retryMaxElapsed || elapsed+throttle > retryMaxElapsed {
			return fmt.Errorf("max retry time elapsed: %w", err)
		}
		delay := max(throttle, jitter(interval))
		interval = min(time.Duration(float64(interval)*1.5), retryMax)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + rand.Float64()))
}

// partialSuccess logs a collector's report of rejected spans, which the
// SDK's exporter hands to OpenTelemetry's global error handler. The
// response is almost always empty.
func (e *Exporter) partialSuccess() {
	if len(e.resp) == 0 {
		return
	}
	var resp coltracepb.ExportTraceServiceResponse
	if err := proto.Unmarshal(e.resp, &resp); err != nil {
		e.log.Warn("OTLP export: undecodable response", "err", err)
		return
	}
	if ps := resp.GetPartialSuccess(); ps != nil && (ps.GetRejectedSpans() != 0 || ps.GetErrorMessage() != "") {
		e.log.Warn("OTLP export: partial success", "rejected_spans", ps.GetRejectedSpans(), "message", ps.GetErrorMessage())
	}
}

// retryable is the SDK exporter's: transient codes are retried, after the
// server's RetryInfo delay if it sent one; ResourceExhausted only when the
// server sent a delay.
func retryable(err error) (bool, time.Duration) {
	s := status.Convert(err)
	switch s.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		_, d := throttleDelay(s)
		return true, d
	case codes.ResourceExhausted:
		return throttleDelay(s)
	}
	return false, 0
}

func throttleDelay(s *status.Status) (bool, time.Duration) {
	for _, d := range s.Details() {
		if t, ok := d.(*errdetails.RetryInfo); ok {
			return true, t.GetRetryDelay().AsDuration()
		}
	}
	return false, 0
}

// Shutdown closes the connection. An export in flight is cancelled if ctx
// ends before it does.
func (e *Exporter) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		e.mu.Lock()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		e.stop()
		<-done
	}
	defer e.mu.Unlock()
	e.stop()
	if e.closed {
		return nil
	}
	e.closed = true
	if err := e.conn.Close(); err != nil {
		return fmt.Errorf("otlpexport: %w", err)
	}
	return ctx.Err()
}

// rawCodec sends a request that is already in wire format (*[]byte) and
// receives the response's bytes into a *[]byte.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("otlpexport: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("otlpexport: cannot unmarshal into %T", v)
	}
	for _, buf := range data {
		*b = append(*b, buf.ReadOnlyData()...)
	}
	return nil
}

// Name is "proto": the content-type stays application/grpc+proto, which
// is what the bytes are.
func (rawCodec) Name() string { return "proto" }
