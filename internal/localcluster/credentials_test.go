// This file holds the test of the identities `kplane up` generates: every
// certificate is signed by the right CA for the right user, groups and
// hosts.

package localcluster

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWriteIdentities checks that every certificate `kplane up` generates
// chains to its CA and to that one only (the store CA signs nothing but
// the store's certificates), and names the identity the API service reads
// (CN user, O groups), with server certificates valid for 127.0.0.1. The
// data directory holds an older single-CA pki (no store-ca.crt), which is
// replaced.
func TestWriteIdentities(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "pki", "ca.crt")
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte("an older kplane up's only CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	id, err := writeIdentities(dir, "127.0.0.1", 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	members, err := memberTLSArgs(id.pki, "store0", []string{"store0", "store1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(members, " "), "--peer-trusted-ca-file "+filepath.Join(dir, "pki", "store-ca.crt"); !strings.Contains(got, want) {
		t.Errorf("member flags %q: want %q", got, want)
	}
	if got, want := strings.Join(members, " "), "--peer-cert-allowed-cn store0,store1"; !strings.Contains(got, want) {
		t.Errorf("member flags %q: want %q", got, want)
	}
	storeCert := func(name string) *cert {
		return &cert{certFile: filepath.Join(dir, "pki", name+".crt")}
	}
	pool := func(a *authority) *x509.CertPool {
		p := x509.NewCertPool()
		p.AddCert(a.cert)
		return p
	}
	clusterRoots, storeRoots := pool(id.ca), pool(id.storeCA)
	for _, a := range []*authority{id.ca, id.storeCA} {
		onDisk, err := os.ReadFile(a.file)
		if err != nil || string(onDisk) != string(a.pem) {
			t.Errorf("%s: %v, does not hold the CA", a.file, err)
		}
	}
	tests := []struct {
		name   string
		c      *cert
		cn     string
		orgs   []string
		server bool
		store  bool // signed by the store CA
	}{
		{"apiserver-1", id.apiservers[0], "kplane-apiserver", nil, true, false},
		{"apiserver-2", id.apiservers[1], "kplane-apiserver", nil, true, false},
		{"gateway serving", id.gatewayServing, "kplane-gateway", nil, true, false},
		{"gateway client", id.gatewayClient, "kplane-gateway", []string{"system:kplane-gateways"}, false, false},
		{"scheduler", id.scheduler, "system:kube-scheduler", nil, false, false},
		{"controllers", id.controllers, "system:kube-controller-manager", nil, false, false},
		{"admin", id.admin, "admin", []string{"system:masters"}, false, false},
		{"node-3", id.nodeCerts[2], "system:node:node-3", []string{"system:nodes"}, false, false},
		{"apiserver kubelet client", id.kubeletClient, "kube-apiserver-kubelet-client", nil, false, false},
		{"nodeagent serving", id.nodeAgentServing, "kplane-nodeagent", nil, true, false},
		{"apiserver store client", id.storeClient, "kplane-apiserver", nil, false, true},
		{"store member", storeCert("store0"), "store0", nil, true, true},
		{"store member peer", storeCert("store0-peer"), "store0", nil, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := os.ReadFile(tt.c.certFile)
			if err != nil {
				t.Fatal(err)
			}
			block, _ := pem.Decode(data)
			if block == nil {
				t.Fatalf("%s: no PEM block", tt.c.certFile)
			}
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			roots, other := clusterRoots, storeRoots
			if tt.store {
				roots, other = storeRoots, clusterRoots
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: other, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
				t.Errorf("the other CA verifies it too")
			}
			if got := c.Subject.CommonName; got != tt.cn {
				t.Errorf("got CN %q, want %q", got, tt.cn)
			}
			if got := c.Subject.Organization; !slices.Equal(got, tt.orgs) && (len(got) > 0 || len(tt.orgs) > 0) {
				t.Errorf("got O %q, want %q", got, tt.orgs)
			}
			opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
			if _, err := c.Verify(opts); err != nil {
				t.Errorf("as a client certificate: %v", err)
			}
			if tt.server {
				opts := x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}
				if _, err := c.Verify(opts); err != nil {
					t.Errorf("as a server certificate for 127.0.0.1: %v", err)
				}
			}
		})
	}
	if _, err := os.Stat(id.nodeCerts[0].keyFile); err != nil {
		t.Errorf("node key: %v", err)
	}
}
