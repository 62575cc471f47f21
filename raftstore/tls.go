// This file holds the member's TLS settings, named after etcd's flags:
// --cert-file, --key-file, --trusted-ca-file, --client-cert-auth and the
// --client-cert-allowed-cn/--client-cert-allowed-hostname allow-lists for
// the client port, the same with --peer- for the Raft port.

package raftstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
)

// TLSInfo is one port's TLS material, as etcd's transport.TLSInfo.
type TLSInfo struct {
	// CertFile and KeyFile are the member's certificate and key. They serve
	// the port and, when the member dials another member, identify it as a
	// client: the certificate should allow both server and client auth.
	CertFile, KeyFile string
	// TrustedCAFile verifies the other side: the client certificates
	// presented to this port, and the server certificates of other members
	// this member dials.
	TrustedCAFile string
	// ClientCertAuth requires every connecting client to present a
	// certificate that TrustedCAFile verifies.
	ClientCertAuth bool
	// AllowedCNs and AllowedHostnames, when one is set, narrow the
	// certificates TrustedCAFile verifies to those whose common name is in
	// AllowedCNs, or that are valid for one of AllowedHostnames (their DNS
	// or IP subject alternative names; the common name does not count).
	// The other side of every connection is held to it, as etcd does: a
	// client or peer connecting to this port, and the member this member
	// dials with the same settings. The two lists exclude each other.
	AllowedCNs, AllowedHostnames []string
}

// errCertNotAllowed fails a TLS handshake whose verified certificate no
// allow-list entry admits; the text is etcd's.
var errCertNotAllowed = errors.New("client certificate authentication failed")

// Empty reports whether no TLS is configured.
func (t TLSInfo) Empty() bool { return t.CertFile == "" && t.KeyFile == "" }

// restricted reports whether an allow-list narrows the accepted
// certificates.
func (t TLSInfo) restricted() bool { return len(t.AllowedCNs) > 0 || len(t.AllowedHostnames) > 0 }

// allows reports whether leaf, a certificate the trusted CA verified, has
// an allowed common name or is valid for an allowed hostname.
func (t TLSInfo) allows(leaf *x509.Certificate) bool {
	if slices.Contains(t.AllowedCNs, leaf.Subject.CommonName) {
		return true
	}
	for _, h := range t.AllowedHostnames {
		if leaf.VerifyHostname(h) == nil {
			return true
		}
	}
	return false
}

// checkAllowed is the allow-list check of one handshake: the verified
// leaf must be allowed. A refusal is logged with the certificate's common
// name and other, which says who the other side is (its address when it
// connected, the server name when this member dialed).
func (t TLSInfo) checkAllowed(log *slog.Logger, port string, other slog.Attr, cs tls.ConnectionState) error {
	if len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 && t.allows(cs.VerifiedChains[0][0]) {
		return nil
	}
	cn := ""
	if len(cs.PeerCertificates) > 0 {
		cn = cs.PeerCertificates[0].Subject.CommonName
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log.Warn("refused a TLS connection: its certificate is not allowed",
		"port", port, other, "cn", cn,
		"allowed-cn", t.AllowedCNs, "allowed-hostname", t.AllowedHostnames)
	return errCertNotAllowed
}

func (t TLSInfo) validate(flagPrefix string) error {
	allowPrefix := flagPrefix
	if allowPrefix == "" {
		allowPrefix = "client-"
	}
	switch {
	case t.restricted() && t.TrustedCAFile == "":
		return fmt.Errorf("--%scert-allowed-cn and --%scert-allowed-hostname need --%strusted-ca-file to verify certificates", allowPrefix, allowPrefix, flagPrefix)
	case len(t.AllowedCNs) > 0 && len(t.AllowedHostnames) > 0:
		return fmt.Errorf("--%scert-allowed-cn (%q) and --%scert-allowed-hostname (%q) are mutually exclusive", allowPrefix, t.AllowedCNs, allowPrefix, t.AllowedHostnames)
	case t.Empty() && (t.TrustedCAFile != "" || t.ClientCertAuth):
		return fmt.Errorf("--%strusted-ca-file and --%sclient-cert-auth need --%scert-file and --%skey-file", flagPrefix, flagPrefix, flagPrefix, flagPrefix)
	case t.Empty():
		return nil
	case t.CertFile == "" || t.KeyFile == "":
		return fmt.Errorf("--%scert-file and --%skey-file go together", flagPrefix, flagPrefix)
	case t.ClientCertAuth && t.TrustedCAFile == "":
		return fmt.Errorf("--%sclient-cert-auth needs --%strusted-ca-file to verify client certificates", flagPrefix, flagPrefix)
	}
	return nil
}

// ServerConfig returns the TLS configuration to serve the port with. With
// an allow-list, a connecting side whose certificate is not allowed fails
// the handshake, and log (nil: none) records it, port naming the port.
func (t TLSInfo) ServerConfig(log *slog.Logger, port string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", t.CertFile, err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.TrustedCAFile != "" {
		if c.ClientCAs, err = loadCAs(t.TrustedCAFile); err != nil {
			return nil, err
		}
		c.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if t.ClientCertAuth {
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if t.restricted() {
		base := c.Clone()
		c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			return t.connConfig(base, log, port, slog.String("remote-addr", hello.Conn.RemoteAddr().String())), nil
		}
	}
	return c, nil
}

// connConfig returns base for one connection from remote, checking the
// allow-list once the client's certificate is verified.
func (t TLSInfo) connConfig(base *tls.Config, log *slog.Logger, port string, remote slog.Attr) *tls.Config {
	c := base.Clone()
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		return t.checkAllowed(log, port, remote, cs)
	}
	return c
}

// ClientConfig returns the TLS configuration with which this member dials
// other members' ports: its certificate as the client's, the trusted CA to
// verify theirs (the system's roots without one), and the allow-list
// applied to their certificates too.
func (t TLSInfo) ClientConfig(log *slog.Logger, port string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", t.CertFile, err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.TrustedCAFile != "" {
		if c.RootCAs, err = loadCAs(t.TrustedCAFile); err != nil {
			return nil, err
		}
	}
	if t.restricted() {
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			return t.checkAllowed(log, port, slog.String("server-name", cs.ServerName), cs)
		}
	}
	return c, nil
}

func loadCAs(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("trusted CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("trusted CA file %s: no PEM certificates", file)
	}
	return pool, nil
}

// checkSchemes checks that urls use https exactly when TLS is configured,
// as etcd requires of its listen URLs.
func checkSchemes(what, flagPrefix string, t TLSInfo, urls ...string) error {
	var errs []error
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return fmt.Errorf("%s %q: %w", what, raw, err)
		}
		switch {
		case u.Scheme == "https" && t.Empty():
			errs = append(errs, fmt.Errorf("%s %s is https: TLS needs --%scert-file and --%skey-file", what, raw, flagPrefix, flagPrefix))
		case u.Scheme != "https" && !t.Empty():
			errs = append(errs, fmt.Errorf("%s %s: --%scert-file is set, so the URL must be https", what, raw, flagPrefix))
		}
	}
	return errors.Join(errs...)
}

// memberTLS is the loaded TLS of one member; nil fields mean plaintext.
type memberTLS struct {
	clientServe, clientDial *tls.Config
	peerServe, peerDial     *tls.Config
}

// tls validates the TLS settings against the URLs' schemes and loads them;
// log records the connections an allow-list refuses.
func (cfg *Config) tls(log *slog.Logger) (memberTLS, error) {
	var out memberTLS
	if err := errors.Join(
		cfg.ClientTLS.validate(""),
		cfg.PeerTLS.validate("peer-"),
		checkSchemes("listen client url", "", cfg.ClientTLS, cfg.ListenClientURLs...),
		checkSchemes("listen peer url", "peer-", cfg.PeerTLS, cfg.ListenPeerURL),
	); err != nil {
		return out, err
	}
	var err error
	if !cfg.ClientTLS.Empty() {
		if out.clientServe, err = cfg.ClientTLS.ServerConfig(log, "client"); err != nil {
			return out, fmt.Errorf("client TLS: %w", err)
		}
		if out.clientDial, err = cfg.ClientTLS.ClientConfig(log, "client"); err != nil {
			return out, fmt.Errorf("client TLS: %w", err)
		}
	}
	if !cfg.PeerTLS.Empty() {
		if out.peerServe, err = cfg.PeerTLS.ServerConfig(log, "peer"); err != nil {
			return out, fmt.Errorf("peer TLS: %w", err)
		}
		if out.peerDial, err = cfg.PeerTLS.ClientConfig(log, "peer"); err != nil {
			return out, fmt.Errorf("peer TLS: %w", err)
		}
	}
	return out, nil
}
