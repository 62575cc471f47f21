// This file holds the exporter's tests against an OTLP/gRPC receiver on
// loopback: the same requests as the SDK's exporter, its environment
// settings, and its retries.

package otlpexport

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// receiver is an OTLP/gRPC trace collector on loopback that keeps every
// request, the metadata and compression it arrived with, and can be told
// to fail the next calls.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu          sync.Mutex
	reqs        []*coltracepb.ExportTraceServiceRequest
	md          []metadata.MD
	compression []string
	fail        []error
	partial     *coltracepb.ExportTracePartialSuccess
}

func (r *receiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	md, _ := metadata.FromIncomingContext(ctx)
	r.md = append(r.md, md)
	if len(r.fail) > 0 {
		err := r.fail[0]
		r.fail = r.fail[1:]
		return nil, err
	}
	r.reqs = append(r.reqs, req)
	return &coltracepb.ExportTraceServiceResponse{PartialSuccess: r.partial}, nil
}

func (r *receiver) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (r *receiver) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (r *receiver) HandleConn(context.Context, stats.ConnStats)                       {}
func (r *receiver) HandleRPC(_ context.Context, s stats.RPCStats) {
	if h, ok := s.(*stats.InHeader); ok && !h.Client {
		r.mu.Lock()
		r.compression = append(r.compression, h.Compression)
		r.mu.Unlock()
	}
}

func (r *receiver) requests() []*coltracepb.ExportTraceServiceRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

func startReceiver(t *testing.T, opts ...grpc.ServerOption) *receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{addr: lis.Addr().String()}
	srv := grpc.NewServer(append(opts, grpc.StatsHandler(r))...)
	coltracepb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return r
}

// testSpans covers every field the encoder writes: two resources (one
// with a schema URL), scopes with and without version, schema URL and
// attributes (and the zero scope), every attribute type, events, links,
// statuses, dropped counts, trace state and flags, remote parents, every
// kind, and bodies long enough to need 2-, 3- and 4-byte lengths.
func testSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	res1 := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.37.0",
		attribute.String("service.name", "apiserver"), attribute.Int("n", 3))
	res2 := resource.NewSchemaless(attribute.String("service.name", "store"),
		attribute.StringSlice("tags", []string{"a", "", "c"}), attribute.Bool("f", false))
	scopes := []instrumentation.Scope{
		{Name: "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc", Version: "0.72.0"},
		{Name: "kplane", Version: "v1", SchemaURL: "https://opentelemetry.io/schemas/1.30.0",
			Attributes: attribute.NewSet(attribute.String("scope.attr", "x"), attribute.Int64("z", 0))},
		{},
	}
	ts, err := trace.ParseTraceState("vendor1=abc,vendor2=def")
	if err != nil {
		t.Fatal(err)
	}
	allTypes := []attribute.KeyValue{
		attribute.Bool("bool", true), attribute.Bool("bool.false", false),
		attribute.Int64("int", -42), attribute.Int64("int.zero", 0),
		attribute.Float64("float", 3.25), attribute.Float64("float.zero", 0),
		attribute.String("string", "héllo"), attribute.String("string.empty", ""),
		attribute.BoolSlice("bools", []bool{true, false}),
		attribute.Int64Slice("ints", []int64{1, -2, 0}),
		attribute.Float64Slice("floats", []float64{0.5, 0}),
		attribute.StringSlice("strings", []string{"a", ""}),
		attribute.StringSlice("strings.none", nil),
		attribute.ByteSlice("bytes", []byte{0, 1, 255}),
		attribute.Slice("mixed", attribute.StringValue("s"), attribute.Int64Value(7), attribute.BoolValue(false),
			attribute.SliceValue(attribute.Float64Value(1.5)), attribute.Value{}),
		attribute.Map("map", attribute.String("k", "v"), attribute.Int64("i", 0),
			attribute.Map("inner", attribute.Bool("b", true))),
		{Key: "empty"},
	}
	var spans []sdktrace.ReadOnlySpan
	base := time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC)
	for i := range 40 {
		var tid trace.TraceID
		var sid, psid trace.SpanID
		tid[0], tid[15], sid[7], psid[6] = byte(i+1), 0xab, byte(i+1), byte(i+1)
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
		stub := tracetest.SpanStub{
			Name:                 "span-" + string(rune('a'+i%26)),
			SpanContext:          sc,
			SpanKind:             trace.SpanKind(i % 7), // 6 is unknown: UNSPECIFIED
			StartTime:            base.Add(time.Duration(i) * time.Millisecond),
			EndTime:              base.Add(time.Duration(i)*time.Millisecond + 1234),
			Resource:             []*resource.Resource{res1, res2}[i%2],
			InstrumentationScope: scopes[i%3],
		}
		switch i % 5 {
		case 0:
			stub.Attributes = allTypes
			stub.DroppedAttributes = 3
			stub.Status = sdktrace.Status{Code: codes.Error, Description: "it broke"}
		case 1:
			stub.SpanContext = sc.WithTraceState(ts)
			stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: psid, Remote: true, TraceFlags: trace.FlagsSampled})
			stub.Status = sdktrace.Status{Code: codes.Ok}
			stub.Events = []sdktrace.Event{
				{Name: "ev1", Time: base.Add(time.Microsecond), Attributes: allTypes[:5], DroppedAttributeCount: 2},
				{Name: "ev2", Time: base.Add(2 * time.Microsecond)},
				{Name: "", Time: time.Unix(0, 0).Add(-time.Second)}, // before 1970: 0
			}
			stub.DroppedEvents = 4
		case 2:
			stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: psid})
			stub.Links = []sdktrace.Link{
				{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: psid, TraceState: ts, Remote: true, TraceFlags: trace.FlagsSampled}),
					Attributes: allTypes[6:9], DroppedAttributeCount: 1},
				{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})},
			}
			stub.DroppedLinks = 5
			stub.ChildSpanCount = 2
		case 3:
			// Bodies of 200 B, 20 KiB and 3 MiB: lengths of 2, 3 and 4
			// bytes at every level.
			size := []int{200, 20 << 10, 3 << 20}[i%3]
			stub.Attributes = []attribute.KeyValue{attribute.String("big", strings.Repeat("x", size))}
		case 4:
			stub.Name = ""
			stub.StartTime, stub.EndTime = time.Time{}, time.Time{}
		}
		spans = append(spans, stub.Snapshot())
	}
	return spans
}

// normalize orders the resource spans (the SDK's come in map order) and
// their scope spans, so that two requests with the same content compare
// equal.
func normalize(reqs []*coltracepb.ExportTraceServiceRequest) []*tracepb.ResourceSpans {
	var rss []*tracepb.ResourceSpans
	for _, r := range reqs {
		rss = append(rss, r.GetResourceSpans()...)
	}
	key := func(m proto.Message) string {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		return string(b)
	}
	for _, rs := range rss {
		slices.SortStableFunc(rs.ScopeSpans, func(a, b *tracepb.ScopeSpans) int {
			return cmp.Compare(key(a.GetScope())+a.GetSchemaUrl(), key(b.GetScope())+b.GetSchemaUrl())
		})
	}
	slices.SortStableFunc(rss, func(a, b *tracepb.ResourceSpans) int {
		return cmp.Compare(key(a.GetResource()), key(b.GetResource()))
	})
	return rss
}

// TestSameAsSDK exports the same spans through the SDK's otlptracegrpc
// exporter and through ours, to one receiver each, and requires that the
// receivers decoded the same requests.
func TestSameAsSDK(t *testing.T) {
	ctx := context.Background()
	spans := testSpans(t)
	recvSDK := startReceiver(t, grpc.MaxRecvMsgSize(64<<20))
	recvOurs := startReceiver(t, grpc.MaxRecvMsgSize(64<<20))

	sdkExp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(recvSDK.addr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	ours, err := New(Config{Endpoint: recvOurs.addr, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	// Twice, so that the second batch reuses the encoder's buffer and
	// groups; then a batch of one resource and scope.
	for _, batch := range [][]sdktrace.ReadOnlySpan{spans, spans, spans[1:2]} {
		if err := sdkExp.ExportSpans(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if err := ours.ExportSpans(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := ours.ExportSpans(ctx, nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	for _, e := range []sdktrace.SpanExporter{sdkExp, ours} {
		if err := e.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, want := recvOurs.requests(), recvSDK.requests()
	if len(got) != 3 || len(want) != 3 {
		t.Fatalf("got %d requests from ours, %d from the SDK's, want 3 each", len(got), len(want))
	}
	for i := range got {
		g, w := normalize(got[i:i+1]), normalize(want[i:i+1])
		if len(g) != len(w) {
			t.Fatalf("request %d: got %d resource spans, want %d", i, len(g), len(w))
		}
		for j := range g {
			if !proto.Equal(g[j], w[j]) {
				t.Errorf("request %d, resource %d differs (-ours +SDK):\n%s", i, j, gocmp.Diff(g[j], w[j], protocmp.Transform()))
			}
		}
	}
	if err := ours.ExportSpans(ctx, spans); err == nil {
		t.Error("export after Shutdown: got no error")
	}
}

// TestEnvConfig reads the environment as the SDK's exporter does.
func TestEnvConfig(t *testing.T) {
	files := map[string][]byte{}
	read := func(name string) ([]byte, error) {
		if b, ok := files[name]; ok {
			return b, nil
		}
		return nil, os.ErrNotExist
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr string
	}{
		{name: "http URL is plain text, path ignored",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317/x"},
			want: Config{Endpoint: "127.0.0.1:4317", Insecure: true, Timeout: 10 * time.Second}},
		{name: "https URL is TLS",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4317"},
			want: Config{Endpoint: "collector:4317", Timeout: 10 * time.Second}},
		{name: "host:port is TLS unless insecure",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "10.0.0.1:4317", "OTEL_EXPORTER_OTLP_INSECURE": "TRUE"},
			want: Config{Endpoint: "10.0.0.1:4317", Insecure: true, Timeout: 10 * time.Second}},
		{name: "TRACES_ variables win",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b:2",
				"OTEL_EXPORTER_OTLP_HEADERS": "x=1,y=2", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "api-key=a%20b , z = 3",
				"OTEL_EXPORTER_OTLP_TIMEOUT": "5000", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "250",
				"OTEL_EXPORTER_OTLP_COMPRESSION": "none", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
			},
			want: Config{Endpoint: "b:2", Headers: map[string]string{"api-key": "a b", "z": "3"}, Timeout: 250 * time.Millisecond, Gzip: true}},
		{name: "insecure=false overrides an http URL",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "false"},
			want: Config{Endpoint: "a:1", Timeout: 10 * time.Second}},
		{name: "unset endpoint is the SDK's default",
			env:  map[string]string{},
			want: Config{Endpoint: "localhost:4317", Timeout: 10 * time.Second}},
		{name: "bad timeout", env: map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, wantErr: "timeout"},
		{name: "bad header", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, wantErr: "header"},
		{name: "missing certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nope"}, wantErr: "CA certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConfigFromEnv(func(k string) string { return tc.env[k] }, read)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one about %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := gocmp.Diff(tc.want, got, gocmp.Comparer(func(a, b *tls.Config) bool { return a == b })); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
		})
	}
}

// exportOne sends one span through an exporter built from env.
func exportOne(t *testing.T, env map[string]string) error {
	t.Helper()
	cfg, err := ConfigFromEnv(func(k string) string { return env[k] }, os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Shutdown(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.ExportSpans(ctx, testSpans(t)[1:2])
}

// TestEnvExport: headers arrive, gzip is used when asked for, and TLS
// works with a CA and a client certificate from files.
func TestEnvExport(t *testing.T) {
	t.Run("insecure, headers, gzip", func(t *testing.T) {
		r := startReceiver(t)
		err := exportOne(t, map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT":    "http://" + r.addr,
			"OTEL_EXPORTER_OTLP_HEADERS":     "Api-Key=s%3Dcret,tenant=t1",
			"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
		})
		if err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.reqs) != 1 || len(r.reqs[0].GetResourceSpans()) != 1 {
			t.Fatalf("got %d requests, want 1 with one resource", len(r.reqs))
		}
		if got := r.md[0].Get("api-key"); len(got) != 1 || got[0] != "s=cret" {
			t.Errorf("api-key header: got %q, want [s=cret]", got)
		}
		if got := r.md[0].Get("tenant"); len(got) != 1 || got[0] != "t1" {
			t.Errorf("tenant header: got %q, want [t1]", got)
		}
		if len(r.compression) != 1 || r.compression[0] != "gzip" {
			t.Errorf("compression: got %q, want [gzip]", r.compression)
		}
	})
	t.Run("no compression by default", func(t *testing.T) {
		r := startReceiver(t)
		if err := exportOne(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + r.addr}); err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.compression) != 1 || r.compression[0] != "" {
			t.Errorf("compression: got %q, want none", r.compression)
		}
	})

	dir := t.TempDir()
	ca, caKey := newCert(t, dir, "ca", nil, nil)
	srvCert := tlsPair(t, dir, "server", ca, caKey)
	tlsPair(t, dir, "client", ca, caKey)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	r := startReceiver(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{srvCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	})))
	endpoint := "https://" + r.addr
	t.Run("TLS with CA and client certificate", func(t *testing.T) {
		err := exportOne(t, map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT":           endpoint,
			"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": filepath.Join(dir, "ca.pem"),
			"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": filepath.Join(dir, "client.pem"),
			"OTEL_EXPORTER_OTLP_CLIENT_KEY":         filepath.Join(dir, "client-key.pem"),
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(r.requests()); n != 1 {
			t.Fatalf("got %d requests, want 1", n)
		}
	})
	t.Run("TLS without the client certificate fails", func(t *testing.T) {
		err := exportOne(t, map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT":    endpoint,
			"OTEL_EXPORTER_OTLP_CERTIFICATE": filepath.Join(dir, "ca.pem"),
			"OTEL_EXPORTER_OTLP_TIMEOUT":     "300",
		})
		if err == nil {
			t.Fatal("got no error")
		}
	})
	t.Run("plain text to a TLS server fails", func(t *testing.T) {
		err := exportOne(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + r.addr, "OTEL_EXPORTER_OTLP_TIMEOUT": "300"})
		if err == nil {
			t.Fatal("got no error")
		}
	})
}

// TestRetry: Unavailable is retried, InvalidArgument is not, and a
// partial success is not an error.
func TestRetry(t *testing.T) {
	r := startReceiver(t)
	r.fail = []error{status.Error(grpccodes.Unavailable, "busy")}
	r.partial = &coltracepb.ExportTracePartialSuccess{RejectedSpans: 1, ErrorMessage: "one too old"}
	var logs bytes.Buffer
	e, err := New(Config{Endpoint: r.addr, Insecure: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Shutdown(context.Background()) }()
	e.retryInitial = time.Millisecond
	ctx := context.Background()
	if err := e.ExportSpans(ctx, testSpans(t)[:2]); err != nil {
		t.Fatalf("export after one Unavailable: %v", err)
	}
	if n := len(r.requests()); n != 1 {
		t.Fatalf("got %d requests accepted, want 1", n)
	}
	if !strings.Contains(logs.String(), "one too old") {
		t.Errorf("partial success not logged: %q", logs.String())
	}
	r.mu.Lock()
	r.fail = []error{status.Error(grpccodes.InvalidArgument, "bad"), nil}
	r.mu.Unlock()
	if err := e.ExportSpans(ctx, testSpans(t)[:2]); status.Code(err) != grpccodes.InvalidArgument {
		t.Fatalf("got %v, want InvalidArgument, not retried", err)
	}
	if n := len(r.requests()); n != 1 {
		t.Fatalf("got %d requests accepted, want still 1", n)
	}
}

// newCert writes a certificate (self-signed if parent is nil) and its key
// as name.pem and name-key.pem in dir.
func newCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+"-key.pem", "EC PRIVATE KEY", kder)
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func tlsPair(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) tls.Certificate {
	t.Helper()
	newCert(t, dir, name, ca, caKey)
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}
