package localcluster

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"slices"
	"testing"
)

// TestWriteIdentities checks that every certificate `kplane up` generates
// chains to its CA and names the identity the API service reads (CN user,
// O groups), with server certificates valid for 127.0.0.1.
func TestWriteIdentities(t *testing.T) {
	id, err := writeIdentities(t.TempDir(), "127.0.0.1", 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(id.ca)
	tests := []struct {
		name   string
		c      *cert
		cn     string
		orgs   []string
		server bool
	}{
		{"apiserver-1", id.apiservers[0], "kplane-apiserver", nil, true},
		{"apiserver-2", id.apiservers[1], "kplane-apiserver", nil, true},
		{"gateway serving", id.gatewayServing, "kplane-gateway", nil, true},
		{"gateway client", id.gatewayClient, "kplane-gateway", []string{"system:kplane-gateways"}, false},
		{"scheduler", id.scheduler, "system:kube-scheduler", nil, false},
		{"controllers", id.controllers, "system:kube-controller-manager", nil, false},
		{"admin", id.admin, "admin", []string{"system:masters"}, false},
		{"node-3", id.nodeCerts[2], "system:node:node-3", []string{"system:nodes"}, false},
		{"apiserver kubelet client", id.kubeletClient, "kube-apiserver-kubelet-client", nil, false},
		{"nodeagent serving", id.nodeAgentServing, "kplane-nodeagent", nil, true},
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
