package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// credentials are the files `kplane up` generates in <data-dir>/pki: a
// static token file with one identity per component (admin in
// system:masters, system:kube-scheduler, system:kube-controller-manager,
// system:node:<name> in system:nodes), the scheduler's and controller
// manager's token files, and a CA with the gateway's serving certificate.
type credentials struct {
	tokenCSV                         string
	schedulerToken, controllersToken string
	gatewayCert, gatewayKey          string
	caPEM                            []byte
	adminToken                       string
}

func writeCredentials(dataDir, host string, nodes int) (*credentials, error) {
	dir := filepath.Join(dataDir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &credentials{
		tokenCSV:         filepath.Join(dir, "tokens.csv"),
		schedulerToken:   filepath.Join(dir, "scheduler.token"),
		controllersToken: filepath.Join(dir, "controllers.token"),
		gatewayCert:      filepath.Join(dir, "gateway.crt"),
		gatewayKey:       filepath.Join(dir, "gateway.key"),
	}
	tok := rand.Text
	c.adminToken = tok()
	sched, ctrl := tok(), tok()
	var csv strings.Builder
	fmt.Fprintf(&csv, "%s,admin,admin,\"system:masters\"\n", c.adminToken)
	fmt.Fprintf(&csv, "%s,system:kube-scheduler,kube-scheduler\n", sched)
	fmt.Fprintf(&csv, "%s,system:kube-controller-manager,kube-controller-manager\n", ctrl)
	for i := 1; i <= nodes; i++ {
		fmt.Fprintf(&csv, "%s,system:node:node-%d,node-%d,\"system:nodes\"\n", tok(), i, i)
	}
	for path, data := range map[string]string{
		c.tokenCSV: csv.String(), c.schedulerToken: sched + "\n", c.controllersToken: ctrl + "\n",
	} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			return nil, err
		}
	}

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kplane-up-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	c.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), c.caPEM, 0o600); err != nil {
		return nil, err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kplane-gateway"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsLoopback() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create gateway certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.gatewayCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.gatewayKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	return c, nil
}

// writeKubeconfig writes the admin kubeconfig: the gateway's URL, the CA
// that signed its certificate, and the admin token.
func writeKubeconfig(path, server string, caPEM []byte, token string) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kplane
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: kplane
  context:
    cluster: kplane
    user: admin
    namespace: default
current-context: kplane
`, server, base64.StdEncoding.EncodeToString(caPEM), token)
	return os.WriteFile(path, []byte(cfg), 0o600)
}
