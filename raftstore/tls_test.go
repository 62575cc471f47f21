// This file holds the test of the TLS flags' consistency rules, as etcd
// checks them.

package raftstore_test

import (
	"strings"
	"testing"

	"github.com/kplane/kplane/raftstore"
)

// TestNewRejectsBadTLS checks the TLS flags' consistency rules, as etcd's:
// https URLs need a certificate, a certificate needs https URLs, and client
// certificate authentication needs a trusted CA.
func TestNewRejectsBadTLS(t *testing.T) {
	tls := raftstore.TLSInfo{CertFile: "m.crt", KeyFile: "m.key"}
	tests := []struct {
		name    string
		cfg     raftstore.Config
		wantErr string
	}{
		{name: "https client url without a certificate",
			cfg:     raftstore.Config{ListenClientURLs: []string{"https://127.0.0.1:0"}},
			wantErr: "TLS needs --cert-file and --key-file"},
		{name: "certificate with an http client url",
			cfg:     raftstore.Config{ListenClientURLs: []string{"http://127.0.0.1:0"}, ClientTLS: tls},
			wantErr: "--cert-file is set, so the URL must be https"},
		{name: "https peer url without a certificate",
			cfg:     raftstore.Config{ListenPeerURL: "https://127.0.0.1:0"},
			wantErr: "TLS needs --peer-cert-file and --peer-key-file"},
		{name: "client cert auth without a trusted CA",
			cfg:     raftstore.Config{ListenClientURLs: []string{"https://127.0.0.1:0"}, ClientTLS: raftstore.TLSInfo{CertFile: "m.crt", KeyFile: "m.key", ClientCertAuth: true}},
			wantErr: "--client-cert-auth needs --trusted-ca-file"},
		{name: "peer cert without key",
			cfg:     raftstore.Config{ListenPeerURL: "https://127.0.0.1:0", PeerTLS: raftstore.TLSInfo{CertFile: "m.crt"}},
			wantErr: "--peer-cert-file and --peer-key-file go together"},
		{name: "client allow-lists by CN and by hostname together",
			cfg:     raftstore.Config{ListenClientURLs: []string{"https://127.0.0.1:0"}, ClientTLS: raftstore.TLSInfo{CertFile: "m.crt", KeyFile: "m.key", TrustedCAFile: "ca.crt", AllowedCNs: []string{"a"}, AllowedHostnames: []string{"b"}}},
			wantErr: "--client-cert-allowed-cn ([\"a\"]) and --client-cert-allowed-hostname ([\"b\"]) are mutually exclusive"},
		{name: "peer allow-list without a trusted CA",
			cfg:     raftstore.Config{ListenPeerURL: "https://127.0.0.1:0", PeerTLS: raftstore.TLSInfo{CertFile: "m.crt", KeyFile: "m.key", AllowedCNs: []string{"a"}}},
			wantErr: "--peer-cert-allowed-cn and --peer-cert-allowed-hostname need --peer-trusted-ca-file"},
		{name: "missing certificate file",
			cfg:     raftstore.Config{ListenClientURLs: []string{"https://127.0.0.1:0"}, ClientTLS: tls},
			wantErr: "load m.crt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Name, tc.cfg.DataDir = "a", t.TempDir()
			s, err := raftstore.New(tc.cfg)
			if err == nil {
				t.Fatalf("New succeeded (%v), want an error containing %q", s.ClientAddrs(), tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
