package localcluster_test

// This file holds the tests that start a whole `kplane up` of the real
// binary: what it serves by default.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
)

// kplaneBin is the kplane binary TestMain builds for `kplane up`.
var kplaneBin string

func TestMain(m *testing.M) {
	os.Exit(testutil.RunWithKplane(m, &kplaneBin))
}

// TestUpServesMetrics: every process `kplane up` starts serves Prometheus
// metrics, `kplane status` lists where, and the API endpoint serves the
// gateway's at /metrics to the admin (kubectl get --raw /metrics).
func TestUpServesMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kplane up")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cp, err := localcluster.Up(ctx, localcluster.UpConfig{Binary: kplaneBin, DataDir: dir,
		StoreMembers: 1, APIServers: 1, Schedulers: 1, ControllerManagers: 1, Nodes: 1})
	if err != nil {
		t.Fatalf("kplane up: %v", err)
	}
	t.Cleanup(cp.Stop)

	st, err := localcluster.GetStatus(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	urls := map[string]string{}
	for _, s := range st.Store {
		urls[s.Name] = s.Metrics
	}
	for _, group := range [][]localcluster.ProcessStatus{st.APIServer, st.Gateway, st.Scheduler, st.Controllers, st.NodeAgent} {
		for _, p := range group {
			urls[p.Name] = p.Metrics
		}
	}
	if len(urls) != 6 {
		t.Errorf("status lists %d processes (%v), want 6", len(urls), urls)
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	for name, u := range urls {
		if u == "" {
			t.Errorf("%s: status lists no metrics URL", name)
			continue
		}
		code, body := get(t, plain, u)
		if code != http.StatusOK || !strings.Contains(body, "# TYPE ") {
			t.Errorf("%s: GET %s: %d %.200s, want Prometheus metrics", name, u, code, body)
		}
	}

	caPEM, err := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	admin, err := tls.LoadX509KeyPair(filepath.Join(dir, "pki", "admin.crt"), filepath.Join(dir, "pki", "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	https := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{admin}, MinVersion: tls.VersionTLS12}}}
	if code, body := get(t, https, cp.GatewayURL+"/api/v1/namespaces"); code != http.StatusOK {
		t.Fatalf("list namespaces as admin: %d %.300s", code, body)
	}
	if code, body := get(t, https, cp.GatewayURL+"/metrics"); code != http.StatusOK || !strings.Contains(body, "http_server_request_duration_seconds_count") {
		t.Errorf("GET /metrics on the API endpoint as admin: %d %.300s, want the gateway's HTTP metrics", code, body)
	}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}
