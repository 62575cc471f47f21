// This file holds the tests that start a whole `kplane up` of the real
// binary: what it serves by default.

package localcluster_test

import (
	"bytes"
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

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
)

// kplaneBin is the kplane binary TestMain builds for `kplane up`.
var kplaneBin string

func TestMain(m *testing.M) {
	os.Exit(testutil.RunWithKplane(m, &kplaneBin))
}

// TestUpDefaults: what `kplane up` gives by default. Every process serves
// Prometheus metrics, `kplane status` lists where, and the API endpoint
// serves the gateway's at /metrics to the admin (kubectl get --raw
// /metrics); Secrets are encrypted at rest; the audit log follows the
// default audit Policy.
func TestUpDefaults(t *testing.T) {
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
	for _, group := range [][]localcluster.ProcessStatus{st.APIServer, st.Gateway, st.Scheduler, st.Controllers, st.NodeAgent, st.DNS} {
		for _, p := range group {
			urls[p.Name] = p.Metrics
		}
	}
	if len(urls) != 7 {
		t.Errorf("status lists %d processes (%v), want 7", len(urls), urls)
	}
	// The cluster DNS answers for the kube-dns Service the node agents
	// name in ClusterFirst pods' resolv.conf.
	if len(st.DNS) != 1 {
		t.Fatalf("status lists DNS processes %v, want one", st.DNS)
	}
	// The built-in runtime's pods have no network: no Service proxy runs.
	if len(st.Proxy) != 0 {
		t.Errorf("status lists proxy processes %v with the built-in runtime, want none", st.Proxy)
	}
	dnsClient := &dns.Client{Timeout: 2 * time.Second}
	q := new(dns.Msg).SetQuestion("kube-dns.kube-system.svc."+localcluster.ClusterDomain+".", dns.TypeA)
	var answer string
	for range 100 {
		if r, _, err := dnsClient.Exchange(q, st.DNS[0].Endpoint); err == nil && len(r.Answer) == 1 {
			answer = r.Answer[0].(*dns.A).A.String()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if answer != localcluster.DNSServiceIP {
		t.Errorf("kube-dns.kube-system.svc.cluster.local from %s: got %q, want %s", st.DNS[0].Endpoint, answer, localcluster.DNSServiceIP)
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

	// A Secret, created through the gateway, is stored encrypted and
	// audited at Metadata level (no body) under the Audit-Id it was
	// answered with.
	resp, err := https.Post(cp.GatewayURL+"/api/v1/namespaces/default/secrets", "application/json",
		strings.NewReader(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s1"},"stringData":{"password":"hunter2"}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create secret: %d %s", resp.StatusCode, body)
	}
	auditID := resp.Header.Get("Audit-Id")
	storeTLS, err := loadTLS(cp.Store.CAFile, cp.Store.ClientCertFile, cp.Store.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(cp.Store.Endpoints(), ","), TLS: storeTLS,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	got, err := cli.Get(ctx, "/registry/secrets/default/s1")
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("the Secret in the store: %v, %v", got, err)
	}
	if v := got.Kvs[0].Value; !bytes.HasPrefix(v, []byte("k8s:enc:secretbox:v1:key1:")) || bytes.Contains(v, []byte("hunter2")) {
		t.Errorf("the Secret as stored: %.60q, want secretbox ciphertext", v)
	}

	var lines []string
	for _, p := range []string{"apiserver-1-audit.log"} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.Split(string(b), "\n")...)
	}
	found := false
	for _, l := range lines {
		if !strings.Contains(l, auditID) || !strings.Contains(l, `"verb":"create"`) {
			continue
		}
		found = true
		if !strings.Contains(l, `"level":"Metadata"`) || !strings.Contains(l, `"stage":"ResponseComplete"`) ||
			!strings.Contains(l, `"requestURI":"/api/v1/namespaces/default/secrets"`) || strings.Contains(l, "hunter2") {
			t.Errorf("the Secret's audit event: %s", l)
		}
	}
	if !found {
		t.Errorf("no audit event with ID %q in %d lines", auditID, len(lines))
	}
}

func loadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
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
