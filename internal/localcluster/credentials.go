package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// pki is what `kplane up` generates in <data-dir>/pki: a CA, and a
// certificate and key signed by it for each identity. Server certificates
// name the loopback addresses; client certificates carry the user in the
// CN and the groups in O, as the API service and the gateway read them.
type pki struct {
	dir     string
	ca      *x509.Certificate
	caKey   *ecdsa.PrivateKey
	caPEM   []byte
	serial  int64
	host    net.IP
	caFile  string
	nodeDir string
	// names are extra DNS names and IP addresses every server certificate
	// carries (e.g. the service names of a docker-compose or Kubernetes
	// deployment); loopback is always there.
	names []string
}

// newPKI creates the directory and the CA.
func newPKI(dataDir, host string) (*pki, error) {
	p := &pki{dir: filepath.Join(dataDir, "pki"), serial: 1, host: net.ParseIP(host)}
	p.caFile = filepath.Join(p.dir, "ca.crt")
	p.nodeDir = filepath.Join(p.dir, "nodes")
	if err := os.MkdirAll(p.nodeDir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(p.serial),
		Subject:               pkix.Name{CommonName: "kplane-up-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	p.caKey = key
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(p.caFile, p.caPEM, 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// cert holds one issued certificate: its files and its PEM.
type cert struct {
	certFile, keyFile string
	certPEM, keyPEM   []byte
}

// issue signs a certificate for user cn in groups orgs, written as
// <dir>/<name>.crt and .key; server certificates also serve loopback.
func (p *pki) issue(dir, name, cn string, orgs []string, server bool) (*cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	p.serial++
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}
		if p.host != nil && !p.host.IsLoopback() {
			tmpl.IPAddresses = append(tmpl.IPAddresses, p.host)
		}
		for _, n := range p.names {
			if ip := net.ParseIP(n); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, n)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, fmt.Errorf("create certificate %s: %w", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &cert{
		certFile: filepath.Join(dir, name+".crt"),
		keyFile:  filepath.Join(dir, name+".key"),
		certPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	if err := os.WriteFile(c.certFile, c.certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.keyFile, c.keyPEM, 0o600); err != nil {
		return nil, err
	}
	return c, nil
}

// identities are the certificates of one `kplane up` cluster.
type identities struct {
	*pki
	apiservers                    []*cert // serving, one per replica
	gatewayServing, gatewayClient *cert   // HTTPS; upstream (system:kplane-gateways)
	scheduler, controllers, admin *cert
	storeClient                   *cert   // the API services' client certificate for the store
	nodeCerts                     []*cert // in nodeDir, named <node>.crt
	// kubeletClient is the API services' client certificate for the node
	// agents' log servers (pods/log), nodeAgentServing their serving one.
	kubeletClient, nodeAgentServing *cert
	adminTLS                        *tls.Config
}

// KubeletClientUser is the CN of the API services' client certificate for
// node agents' log servers, the one user those servers let read logs
// (kube-apiserver's kubelet client).
const KubeletClientUser = "kube-apiserver-kubelet-client"

// writeIdentities generates the CA and every component's certificate:
// each API service replica and the gateway serve with their own; the
// gateway reaches the API service as system:kplane-gateways (it then
// passes the end user on); system:kube-scheduler,
// system:kube-controller-manager and system:node:node-<i> (system:nodes)
// are the users the API service's bootstrap RBAC and Node authorizer
// know; admin is in system:masters. The API services reach the node
// agents' log servers (HTTPS, nodeagent-serving) with
// apiserver-kubelet-client, the only certificate those servers accept.
func writeIdentities(dataDir, host string, apiservers, nodes int, names ...string) (*identities, error) {
	p, err := newPKI(dataDir, host)
	if err != nil {
		return nil, err
	}
	p.names = names
	id := &identities{pki: p}
	for i := 1; i <= apiservers; i++ {
		c, err := p.issue(p.dir, "apiserver-"+strconv.Itoa(i), "kplane-apiserver", nil, true)
		if err != nil {
			return nil, err
		}
		id.apiservers = append(id.apiservers, c)
	}
	for _, x := range []struct {
		dst      **cert
		name, cn string
		orgs     []string
		server   bool
	}{
		{&id.gatewayServing, "gateway-serving", "kplane-gateway", nil, true},
		{&id.gatewayClient, "gateway", "kplane-gateway", []string{"system:kplane-gateways"}, false},
		{&id.scheduler, "scheduler", "system:kube-scheduler", nil, false},
		{&id.controllers, "controllers", "system:kube-controller-manager", nil, false},
		{&id.admin, "admin", "admin", []string{"system:masters"}, false},
		{&id.storeClient, "apiserver-store-client", "kplane-apiserver", nil, false},
		{&id.kubeletClient, "apiserver-kubelet-client", KubeletClientUser, nil, false},
		{&id.nodeAgentServing, "nodeagent-serving", "kplane-nodeagent", nil, true},
	} {
		if *x.dst, err = p.issue(p.dir, x.name, x.cn, x.orgs, x.server); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= nodes; i++ {
		name := "node-" + strconv.Itoa(i)
		c, err := p.issue(p.nodeDir, name, "system:node:"+name, []string{"system:nodes"}, false)
		if err != nil {
			return nil, err
		}
		id.nodeCerts = append(id.nodeCerts, c)
	}
	if id.adminTLS, err = id.admin.tlsConfig(p); err != nil {
		return nil, err
	}
	return id, nil
}

// writeKubeconfig writes the admin kubeconfig: the gateway's URL, the CA
// that signed its certificate, and the admin's client certificate.
func writeKubeconfig(path, server string, caPEM []byte, admin *cert) error {
	b64 := base64.StdEncoding.EncodeToString
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
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: kplane
  context:
    cluster: kplane
    user: admin
    namespace: default
current-context: kplane
`, server, b64(caPEM), b64(admin.certPEM), b64(admin.keyPEM))
	return os.WriteFile(path, []byte(cfg), 0o600)
}

// tlsConfig returns a client TLS configuration with this certificate that
// trusts p's CA.
func (c *cert) tlsConfig(p *pki) (*tls.Config, error) {
	pair, err := tls.X509KeyPair(c.certPEM, c.keyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// memberTLSArgs issues a store member's client-port and peer-port
// certificates (each for server and client auth: a member dials the
// leader's client port and its peers with them) and returns the
// `kplane store` flags that require mutual TLS on both ports.
func memberTLSArgs(p *pki, name string) ([]string, error) {
	serving, err := p.issue(p.dir, name, name, nil, true)
	if err != nil {
		return nil, err
	}
	peer, err := p.issue(p.dir, name+"-peer", name, nil, true)
	if err != nil {
		return nil, err
	}
	return []string{
		"--cert-file", serving.certFile, "--key-file", serving.keyFile,
		"--trusted-ca-file", p.caFile, "--client-cert-auth",
		"--peer-cert-file", peer.certFile, "--peer-key-file", peer.keyFile,
		"--peer-trusted-ca-file", p.caFile, "--peer-client-cert-auth",
	}, nil
}
