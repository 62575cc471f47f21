// This file holds the test of what `kplane certs` writes: server
// certificates for the hosts asked for, and client certificates for each
// component.

package localcluster

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestWriteCerts checks kplane certs' credentials: server certificates
// name the extra hosts (DNS names and IPs) besides loopback, the admin
// kubeconfig is written where asked, and IfMissing keeps existing CAs but
// refuses an older single-CA pki directory.
func TestWriteCerts(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "admin.kubeconfig")
	pkiDir, err := WriteCerts(CertsConfig{DataDir: dir, Names: []string{"apiserver-1", "10.1.2.3"},
		StoreMembers: []string{"store-1"}, APIServers: 2, Nodes: 1, GatewayURL: "https://localhost:2387", Kubeconfig: kc})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(pkiDir, "apiserver-2.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.DNSNames, "apiserver-1") || !slices.ContainsFunc(c.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("10.1.2.3")) }) {
		t.Errorf("server certificate names %v %v, want apiserver-1 and 10.1.2.3 too", c.DNSNames, c.IPAddresses)
	}
	if err := c.VerifyHostname("apiserver-1"); err != nil {
		t.Error(err)
	}
	for _, f := range []string{kc, filepath.Join(pkiDir, "nodes", "node-1.crt"), filepath.Join(pkiDir, "admin.key"),
		filepath.Join(pkiDir, "store-1.crt"), filepath.Join(pkiDir, "store-1-peer.key"), filepath.Join(pkiDir, "apiserver-store-client.crt"),
		filepath.Join(pkiDir, "store-ca.crt")} {
		if _, err := os.Stat(f); err != nil {
			t.Error(err)
		}
	}
	ca, _ := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	if _, err := WriteCerts(CertsConfig{DataDir: dir, APIServers: 1, IfMissing: true}); !errors.Is(err, ErrCertsExist) {
		t.Errorf("IfMissing over an existing CA: %v, want ErrCertsExist", err)
	}
	if again, _ := os.ReadFile(filepath.Join(pkiDir, "ca.crt")); string(again) != string(ca) {
		t.Error("IfMissing replaced the CA")
	}
	if err := os.Remove(filepath.Join(pkiDir, "store-ca.crt")); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteCerts(CertsConfig{DataDir: dir, APIServers: 1, IfMissing: true}); !errors.Is(err, ErrCertsOutdated) {
		t.Errorf("IfMissing over a single-CA pki (no store-ca.crt): %v, want ErrCertsOutdated", err)
	}
	if _, err := WriteCerts(CertsConfig{DataDir: dir, APIServers: 0}); err == nil {
		t.Error("no API service certificates: no error")
	}
}
