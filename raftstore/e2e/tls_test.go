// This file holds the test of a store run with mutual TLS on its client and
// peer ports: who is served through every member, and who is refused.

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/internal/testutil/raftpeer"
)

// TestTLS runs a 3-member store with mutual TLS on the client and peer
// ports (etcd's --cert-file ... --peer-client-cert-auth flags, as `kplane
// up` runs it) and checks that a client with the CA and a client
// certificate works through every member (followers forward to the
// leader over TLS), that the real etcdctl works with --cacert/--cert/--key,
// that both ports refuse plaintext, clients without a certificate and
// clients whose certificate another CA signed, and that the peer port
// refuses the store client's certificate (not a member's CN).
func TestTLS(t *testing.T) {
	testutil.SkipShort(t, "runs a store of `kplane store` processes of the built binary")
	dir := t.TempDir()
	c, err := localcluster.Start(context.Background(), localcluster.Config{
		Binary: kplaneBin, DataDir: dir, TLS: true,
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, m := range c.Members {
				b, _ := os.ReadFile(m.LogPath)
				t.Logf("--- %s log ---\n%s", m.Name, testutil.Tail(string(b), 30))
			}
		}
	})
	for _, m := range c.Members {
		if !strings.HasPrefix(m.ClientURL, "https://") || !strings.HasPrefix(m.PeerURL, "https://") {
			t.Fatalf("member %s: client %s, peer %s: want https URLs", m.Name, m.ClientURL, m.PeerURL)
		}
	}
	good := c.ClientTLS()

	// A write through each member (two of them forward to the leader).
	for i, ep := range strings.Split(c.Endpoints(), ",") {
		cli := etcdClient(t, ep, good)
		deadline := time.Now().Add(30 * time.Second)
		key := fmt.Sprintf("/tls/%d", i)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := cli.Put(ctx, key, "v")
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("put through %s with a client certificate: %v", ep, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// The real etcdctl with etcd's TLS flags.
	t.Run("etcdctl", func(t *testing.T) {
		bin := testutil.RequireBinary(t, "etcdctl", "apt-get install -y etcd-client")
		etcdctl := func(args ...string) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, append([]string{"--endpoints", c.Endpoints(), "--dial-timeout", "3s", "--command-timeout", "5s"}, args...)...).CombinedOutput()
			return string(out), err
		}
		tlsFlags := []string{"--cacert", c.CAFile, "--cert", c.ClientCertFile, "--key", c.ClientKeyFile}
		if out, err := etcdctl(append(tlsFlags, "put", "/tls/etcdctl", "yes")...); err != nil {
			t.Fatalf("etcdctl put with --cacert/--cert/--key: %v\n%s", err, out)
		}
		out, err := etcdctl(append(tlsFlags, "get", "/tls/", "--prefix", "--keys-only")...)
		if err != nil || !strings.Contains(out, "/tls/etcdctl") || !strings.Contains(out, "/tls/2") {
			t.Fatalf("etcdctl get: %v\n%s", err, out)
		}
		if out, err := etcdctl(append(tlsFlags, "member", "list")...); err != nil || strings.Count(out, "https://") != 6 {
			t.Errorf("etcdctl member list: %v\n%s\nwant 3 members with https peer and client URLs", err, out)
		}
		if out, err := etcdctl("--cacert", c.CAFile, "put", "/tls/nocert", "x"); err == nil {
			t.Errorf("etcdctl without a client certificate: succeeded, want a refusal\n%s", out)
		}
	})

	// What both ports must refuse.
	other := otherCA(t)
	noCert := good.Clone()
	noCert.Certificates = nil
	wrongClient := good.Clone() // trusts our CA, but its certificate is another CA's
	wrongClient.Certificates = other.Certificates
	wrongServer := good.Clone() // presents our certificate, but trusts only the other CA
	wrongServer.RootCAs = other.RootCAs
	clientAddr, peerAddr := hostOf(t, c.Members[0].ClientURL), hostOf(t, c.Members[0].PeerURL)
	for _, tc := range []struct {
		name string
		tls  *tls.Config
	}{
		{"plaintext", nil},
		{"TLS without a client certificate", noCert},
		{"a client certificate from another CA", wrongClient},
		{"a client that does not trust the member's CA", wrongServer},
	} {
		cli := etcdClient(t, clientAddr, tc.tls)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := cli.Get(ctx, "/tls/0")
		cancel()
		if err == nil {
			t.Errorf("client port, %s: got an answer, want a refusal", tc.name)
		}
		if err := raftpeer.RequestVote(peerAddr, tc.tls); err == nil {
			t.Errorf("peer port, %s: got a Raft answer, want a refusal", tc.name)
		}
	}
	// A store client certificate (the store CA signed it, but its CN names
	// no member) reaches the client port, not Raft (--peer-cert-allowed-cn).
	if err := raftpeer.RequestVote(peerAddr, good); err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("peer port with the store client certificate: %v, want the member's bad certificate alert", err)
	}
	// The positive control for the peer port: a member's own peer
	// certificate gets a Raft answer.
	peerCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "pki", "store1-peer.crt"), filepath.Join(dir, "pki", "store1-peer.key"))
	if err != nil {
		t.Fatal(err)
	}
	peerTLS := good.Clone()
	peerTLS.Certificates = []tls.Certificate{peerCert}
	if err := raftpeer.RequestVote(peerAddr, peerTLS); err != nil {
		t.Errorf("peer port with a member's peer certificate: %v", err)
	}
}

// etcdClient returns an etcd client for endpoint with t (nil: plaintext).
func etcdClient(t *testing.T, endpoint string, tc *tls.Config) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	addr, err := raftpeer.Addr(raw)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// otherCA returns a TLS configuration from a CA unrelated to the cluster's:
// a client certificate it signed and a pool that trusts only it.
func otherCA(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "store0"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS12,
	}
}
