// This file holds the PKI `kplane up` generates: two CAs, the certificate of
// every component and node, the admin kubeconfig, and the TLS flags of each
// store member.

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
	"strings"
	"time"
)

// pki is what `kplane up` generates in <data-dir>/pki: two CAs, and a
// certificate and key signed by one of them for each identity. The store
// CA (store-ca.crt) signs only the store members' certificates and the
// store clients' (the API services', and the operator's store-client), and
// is the only CA the store trusts, so that no other component's
// certificate reaches the store, as kubeadm gives etcd a CA of its own;
// the cluster CA (ca.crt) signs every other certificate. Server
// certificates name the loopback addresses; client certificates carry the
// user in the CN and the groups in O, as the API service and the gateway
// read them.
type pki struct {
	dir     string
	ca      *authority // the cluster CA
	storeCA *authority // the store's CA
	serial  int64
	host    net.IP
	nodeDir string
	// names are extra DNS names and IP addresses every server certificate
	// carries (e.g. the service names of a docker-compose or Kubernetes
	// deployment); loopback is always there.
	names []string
}

// authority is one CA: its certificate (also as PEM and as the file
// written), and its key.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	file string
}

// CA file names in the pki directory.
const (
	clusterCAFile = "ca.crt"
	storeCAFile   = "store-ca.crt"
)

// newPKI creates the directory and both CAs, replacing any there.
func newPKI(dataDir, host string) (*pki, error) {
	p := &pki{dir: filepath.Join(dataDir, "pki"), host: net.ParseIP(host)}
	p.nodeDir = filepath.Join(p.dir, "nodes")
	if err := os.MkdirAll(p.nodeDir, 0o700); err != nil {
		return nil, err
	}
	var err error
	if p.ca, err = p.newAuthority("kplane-up-ca", clusterCAFile); err != nil {
		return nil, err
	}
	if p.storeCA, err = p.newAuthority("kplane-store-ca", storeCAFile); err != nil {
		return nil, err
	}
	return p, nil
}

// newAuthority creates a self-signed CA named cn and writes it to file in
// the pki directory.
func (p *pki) newAuthority(cn, file string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	p.serial++
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(p.serial),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA %s: %w", cn, err)
	}
	a := &authority{key: key, file: filepath.Join(p.dir, file)}
	if a.cert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	a.pem = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(a.file, a.pem, 0o600); err != nil {
		return nil, err
	}
	return a, nil
}

// cert holds one issued certificate: its files and its PEM.
type cert struct {
	certFile, keyFile string
	certPEM, keyPEM   []byte
}

// issue has ca sign a certificate for user cn in groups orgs, written as
// <dir>/<name>.crt and .key; server certificates also serve loopback.
func (p *pki) issue(ca *authority, dir, name, cn string, orgs []string, server bool) (*cert, error) {
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
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
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
	dns                           *cert   // kplane dns (system:kplane-dns)
	proxy                         *cert   // kplane proxy (system:kplane-proxy)
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

// writeIdentities generates both CAs and every component's certificate
// (replacing whatever an earlier run left in the pki directory):
// each API service replica and the gateway serve with their own; the
// gateway reaches the API service as system:kplane-gateways (it then
// passes the end user on); system:kube-scheduler,
// system:kube-controller-manager and system:node:node-<i> (system:nodes)
// are the users the API service's bootstrap RBAC and Node authorizer
// know; admin is in system:masters. The API services reach the node
// agents' log servers (HTTPS, nodeagent-serving) with
// apiserver-kubelet-client, the only certificate those servers accept.
// Only apiserver-store-client is signed by the store CA.
func writeIdentities(dataDir, host string, apiservers, nodes int, names ...string) (*identities, error) {
	p, err := newPKI(dataDir, host)
	if err != nil {
		return nil, err
	}
	p.names = names
	id := &identities{pki: p}
	for i := 1; i <= apiservers; i++ {
		c, err := p.issue(p.ca, p.dir, "apiserver-"+strconv.Itoa(i), "kplane-apiserver", nil, true)
		if err != nil {
			return nil, err
		}
		id.apiservers = append(id.apiservers, c)
	}
	for _, x := range []struct {
		dst      **cert
		ca       *authority
		name, cn string
		orgs     []string
		server   bool
	}{
		{&id.gatewayServing, p.ca, "gateway-serving", "kplane-gateway", nil, true},
		{&id.gatewayClient, p.ca, "gateway", "kplane-gateway", []string{"system:kplane-gateways"}, false},
		{&id.scheduler, p.ca, "scheduler", "system:kube-scheduler", nil, false},
		{&id.controllers, p.ca, "controllers", "system:kube-controller-manager", nil, false},
		{&id.dns, p.ca, "dns", "system:kplane-dns", nil, false},
		{&id.proxy, p.ca, "proxy", "system:kplane-proxy", nil, false},
		{&id.admin, p.ca, "admin", "admin", []string{"system:masters"}, false},
		{&id.storeClient, p.storeCA, "apiserver-store-client", "kplane-apiserver", nil, false},
		{&id.kubeletClient, p.ca, "apiserver-kubelet-client", KubeletClientUser, nil, false},
		{&id.nodeAgentServing, p.ca, "nodeagent-serving", "kplane-nodeagent", nil, true},
	} {
		if *x.dst, err = p.issue(x.ca, p.dir, x.name, x.cn, x.orgs, x.server); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= nodes; i++ {
		name := "node-" + strconv.Itoa(i)
		c, err := p.issue(p.ca, p.nodeDir, name, "system:node:"+name, []string{"system:nodes"}, false)
		if err != nil {
			return nil, err
		}
		id.nodeCerts = append(id.nodeCerts, c)
	}
	if id.adminTLS, err = id.admin.tlsConfig(p.ca); err != nil {
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
// trusts ca.
func (c *cert) tlsConfig(ca *authority) (*tls.Config, error) {
	pair, err := tls.X509KeyPair(c.certPEM, c.keyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// memberTLSArgs has the store CA issue a store member's client-port and
// peer-port certificates (each for server and client auth: a member dials
// the leader's client port and its peers with them; both have the member's
// name as CN) and returns the `kplane store` flags that require mutual TLS
// with store-CA certificates on both ports, and on the peer port one of
// members' names: a store client certificate cannot speak Raft.
func memberTLSArgs(p *pki, name string, members []string) ([]string, error) {
	serving, err := p.issue(p.storeCA, p.dir, name, name, nil, true)
	if err != nil {
		return nil, err
	}
	peer, err := p.issue(p.storeCA, p.dir, name+"-peer", name, nil, true)
	if err != nil {
		return nil, err
	}
	return []string{
		"--cert-file", serving.certFile, "--key-file", serving.keyFile,
		"--trusted-ca-file", p.storeCA.file, "--client-cert-auth",
		"--peer-cert-file", peer.certFile, "--peer-key-file", peer.keyFile,
		"--peer-trusted-ca-file", p.storeCA.file, "--peer-client-cert-auth",
		"--peer-cert-allowed-cn", strings.Join(members, ","),
	}, nil
}
