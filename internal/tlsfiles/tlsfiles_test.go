// This file holds the tests of the PEM-file TLS configurations: a bundle
// without certificates is refused, and a client without files trusts the
// host's roots and presents no certificate.

package tlsfiles

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPoolRefusesFileWithoutCertificates(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Pool(file); err == nil || !strings.Contains(err.Error(), "no certificates") {
		t.Errorf("got %v, want no certificates", err)
	}
	if _, err := Pool(filepath.Join(t.TempDir(), "missing.crt")); err == nil {
		t.Error("a missing file gave a pool")
	}
}

func TestClientWithoutFiles(t *testing.T) {
	c, err := Client("", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.RootCAs != nil || len(c.Certificates) != 0 || c.MinVersion != tls.VersionTLS12 {
		t.Errorf("got RootCAs %v, %d certificates, min version %x; want the host's roots, none, TLS 1.2", c.RootCAs, len(c.Certificates), c.MinVersion)
	}
}
