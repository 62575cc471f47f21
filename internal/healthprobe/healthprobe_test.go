// This file holds the tests of the probes against real loopback servers:
// a gRPC server with and without the health service, an HTTPS server
// answering 200 and 503.

package healthprobe

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func serveGRPC(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestGRPC(t *testing.T) {
	hs := health.NewServer()
	serving := serveGRPC(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, hs) })
	without := serveGRPC(t, func(*grpc.Server) {})
	ctx := context.Background()
	if err := GRPC(ctx, serving, nil); err != nil {
		t.Errorf("SERVING: got %v, want healthy", err)
	}
	if err := GRPC(ctx, without, nil); err != nil {
		t.Errorf("no health service (Unimplemented): got %v, want healthy", err)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := GRPC(ctx, serving, nil); err == nil || !strings.Contains(err.Error(), "NOT_SERVING") {
		t.Errorf("NOT_SERVING: got %v, want unhealthy", err)
	}
}

func TestHTTPS(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte("not ready: store"))
	}))
	defer srv.Close()
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	ctx := context.Background()
	if err := HTTPS(ctx, srv.URL+"/readyz", tlsCfg); err != nil {
		t.Errorf("200: got %v, want healthy", err)
	}
	status.Store(http.StatusServiceUnavailable)
	if err := HTTPS(ctx, srv.URL+"/readyz", tlsCfg); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "not ready: store") {
		t.Errorf("503: got %v, want unhealthy with the body", err)
	}
}

func TestProbeNeedsExactlyOneTarget(t *testing.T) {
	for _, o := range []Options{{}, {GRPC: "127.0.0.1:1", HTTPS: "https://127.0.0.1:1"}} {
		if err := Probe(context.Background(), o); err == nil || !strings.Contains(err.Error(), "exactly one of --grpc and --https") {
			t.Errorf("%+v: got %v, want exactly one asked for", o, err)
		}
	}
}
