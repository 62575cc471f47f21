// This file holds the tests of the certificate allow-lists of the client
// and peer ports (--client-cert-allowed-cn, --peer-cert-allowed-hostname
// and the like): a certificate the trusted CA signed still needs an
// allowed common name or hostname.

package raftstore_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/raftstore"
)

// testCA signs the certificates of one test.
type testCA struct {
	t    *testing.T
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
	n    int64
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	ca := &testCA{t: t, dir: t.TempDir()}
	ca.key = mustKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-store-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	ca.file = filepath.Join(ca.dir, "ca.crt")
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

func mustKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes a certificate for server and client auth with common name
// cn, valid for the DNS names or IP addresses in hosts; it returns the
// certificate and key files.
func (ca *testCA) issue(cn string, hosts ...string) (certFile, keyFile string) {
	ca.t.Helper()
	ca.n++
	key := mustKey(ca.t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.n + 1),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	name := fmt.Sprintf("cert-%d", ca.n)
	certFile, keyFile = filepath.Join(ca.dir, name+".crt"), filepath.Join(ca.dir, name+".key")
	writePEM(ca.t, certFile, "CERTIFICATE", der)
	writePEM(ca.t, keyFile, "EC PRIVATE KEY", keyDER)
	return certFile, keyFile
}

// lockedBuffer collects a logger's output from the store's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// handshake dials addr with the certificate and reports the handshake's
// error. TLS 1.2 makes the server's verdict on the client certificate part
// of the handshake (with TLS 1.3 it would come with the first read).
func handshake(t *testing.T, addr, caFile, certFile, keyFile string) error {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	d := tls.Dialer{Config: &tls.Config{
		Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: "127.0.0.1",
		MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12,
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// TestCertAllowLists runs one member with mutual TLS on both ports and an
// allow-list on one of them, and dials that port with certificates the
// same CA signed: an allowed one completes the handshake, another is
// refused with etcd's error and the refusal is logged with its common name
// and address.
func TestCertAllowLists(t *testing.T) {
	ca := newTestCA(t)
	memberCert, memberKey := ca.issue("m0", "127.0.0.1", "localhost")
	apiCert, apiKey := ca.issue("kplane-apiserver")
	nodeCert, nodeKey := ca.issue("system:node:node-1")
	hostCert, hostKey := ca.issue("some-client", "store.example")

	type dial struct {
		certFile, keyFile, cn string
		allowed               bool
	}
	tests := []struct {
		name   string
		peer   bool // the allow-list and the dials are the peer port's
		allow  raftstore.TLSInfo
		dials  []dial
		assert string
	}{
		{name: "client port, allowed CNs", allow: raftstore.TLSInfo{AllowedCNs: []string{"m0", "kplane-apiserver"}},
			dials: []dial{
				{apiCert, apiKey, "kplane-apiserver", true},
				{memberCert, memberKey, "m0", true},
				{nodeCert, nodeKey, "system:node:node-1", false},
			}},
		{name: "client port, allowed hostnames", allow: raftstore.TLSInfo{AllowedHostnames: []string{"store.example", "127.0.0.1"}},
			dials: []dial{
				{hostCert, hostKey, "some-client", true},
				{memberCert, memberKey, "m0", true},
				{apiCert, apiKey, "kplane-apiserver", false},
			}},
		{name: "peer port, allowed CNs", peer: true, allow: raftstore.TLSInfo{AllowedCNs: []string{"m0"}},
			dials: []dial{
				{memberCert, memberKey, "m0", true},
				{apiCert, apiKey, "kplane-apiserver", false},
			}},
		{name: "peer port, allowed hostnames", peer: true, allow: raftstore.TLSInfo{AllowedHostnames: []string{"localhost"}},
			dials: []dial{
				{memberCert, memberKey, "m0", true},
				{hostCert, hostKey, "some-client", false},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := &lockedBuffer{}
			ports := testutil.FreePorts(t, 2)
			clientAddr, peerAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
			base := raftstore.TLSInfo{CertFile: memberCert, KeyFile: memberKey, TrustedCAFile: ca.file, ClientCertAuth: true}
			cfg := raftstore.Config{
				Name: "m0", DataDir: t.TempDir(),
				ListenClientURLs: []string{"https://" + clientAddr},
				ListenPeerURL:    "https://" + peerAddr,
				ClientTLS:        base, PeerTLS: base,
				Logger: slog.New(slog.NewTextHandler(logs, nil)),
			}
			addr := clientAddr
			restricted := &cfg.ClientTLS
			if tc.peer {
				addr, restricted = peerAddr, &cfg.PeerTLS
			}
			restricted.AllowedCNs, restricted.AllowedHostnames = tc.allow.AllowedCNs, tc.allow.AllowedHostnames
			startStore(t, cfg)

			for _, d := range tc.dials {
				err := handshake(t, addr, ca.file, d.certFile, d.keyFile)
				switch {
				case d.allowed && err != nil:
					t.Errorf("%s: handshake failed: %v, want it allowed", d.cn, err)
				case !d.allowed && err == nil:
					t.Errorf("%s: handshake succeeded, want it refused", d.cn)
				case !d.allowed && !strings.Contains(err.Error(), "bad certificate"):
					t.Errorf("%s: handshake failed with %v, want the server's bad certificate alert", d.cn, err)
				}
			}
			port := "client"
			if tc.peer {
				port = "peer"
			} else {
				// An allowed client still speaks gRPC (ALPN h2) with the
				// member.
				allowed := tc.dials[0]
				putWithCert(t, clientAddr, ca.file, allowed.certFile, allowed.keyFile)
			}
			for _, d := range tc.dials {
				logged := false
				for _, line := range strings.Split(logs.String(), "\n") {
					if strings.Contains(line, "certificate is not allowed") && strings.Contains(line, "cn="+quoteIfNeeded(d.cn)) {
						logged = true
						if !strings.Contains(line, "port="+port) || !strings.Contains(line, "remote-addr=127.0.0.1:") {
							t.Errorf("refusal of %s logged as %q: want port=%s and the remote address", d.cn, line, port)
						}
					}
				}
				if logged == d.allowed {
					t.Errorf("%s (allowed %v): refusal logged %v; logs:\n%s", d.cn, d.allowed, logged, logs.String())
				}
			}
		})
	}
}

// putWithCert writes a key through the etcd client API on addr with the
// certificate (trying again, bounded, while a leader is elected), and
// fails the test if it cannot.
func putWithCert(t *testing.T, addr, caFile, certFile, keyFile string) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	putRetry(ctxT(t), t, cli, "/allowed", "yes")
}

// quoteIfNeeded renders s as slog's text handler writes a value.
func quoteIfNeeded(s string) string {
	if strings.ContainsAny(s, " =\"") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// startStore runs the member until the test ends.
func startStore(t *testing.T, cfg raftstore.Config) {
	t.Helper()
	s, err := raftstore.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("store stopped with: %v", err)
		}
	})
}

// TestCertAllowListsCluster runs three members whose client ports admit
// the members and kplane-apiserver and whose peer ports admit the members
// alone: Raft elects a leader through the peer allow-list, and a write
// through a follower, which forwards it to the leader's client port with
// its own serving certificate, goes through the client allow-list.
func TestCertAllowListsCluster(t *testing.T) {
	ca := newTestCA(t)
	apiCert, apiKey := ca.issue("kplane-apiserver")
	names := []string{"m0", "m1", "m2"}
	ports := testutil.FreePorts(t, 2*len(names))
	c := &cluster{t: t}
	var initial []string
	for i, name := range names {
		cfg := memberConfig(t, t.TempDir(), name, ports[2*i], ports[2*i+1], clusterOptions{})
		certFile, keyFile := ca.issue(name, "127.0.0.1")
		base := raftstore.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: ca.file, ClientCertAuth: true}
		cfg.ClientTLS, cfg.PeerTLS = base, base
		cfg.ClientTLS.AllowedCNs = append(slices.Clone(names), "kplane-apiserver")
		cfg.PeerTLS.AllowedCNs = names
		cfg.ListenClientURLs = []string{fmt.Sprintf("https://127.0.0.1:%d", ports[2*i])}
		cfg.ListenPeerURL = fmt.Sprintf("https://127.0.0.1:%d", ports[2*i+1])
		cfg.InitialAdvertisePeerURL = cfg.ListenPeerURL
		initial = append(initial, name+"="+cfg.ListenPeerURL)
		c.members = append(c.members, &member{cfg: cfg})
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
		c.start(m)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			c.stop(m)
		}
	})
	follower := c.followers()[0]
	putWithCert(t, strings.TrimPrefix(follower.cfg.ListenClientURLs[0], "https://"), ca.file, apiCert, apiKey)
}
