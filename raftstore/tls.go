package raftstore

// This file holds the member's TLS settings, named after etcd's flags:
// --cert-file, --key-file, --trusted-ca-file and --client-cert-auth for the
// client port, the same with --peer- for the Raft port.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
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
}

// Empty reports whether no TLS is configured.
func (t TLSInfo) Empty() bool { return t.CertFile == "" && t.KeyFile == "" }

func (t TLSInfo) validate(flagPrefix string) error {
	switch {
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

// ServerConfig returns the TLS configuration to serve the port with.
func (t TLSInfo) ServerConfig() (*tls.Config, error) {
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
	return c, nil
}

// ClientConfig returns the TLS configuration with which this member dials
// other members' ports: its certificate as the client's, the trusted CA to
// verify theirs (the system's roots without one).
func (t TLSInfo) ClientConfig() (*tls.Config, error) {
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

// tls validates the TLS settings against the URLs' schemes and loads them.
func (cfg *Config) tls() (memberTLS, error) {
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
		if out.clientServe, err = cfg.ClientTLS.ServerConfig(); err != nil {
			return out, fmt.Errorf("client TLS: %w", err)
		}
		if out.clientDial, err = cfg.ClientTLS.ClientConfig(); err != nil {
			return out, fmt.Errorf("client TLS: %w", err)
		}
	}
	if !cfg.PeerTLS.Empty() {
		if out.peerServe, err = cfg.PeerTLS.ServerConfig(); err != nil {
			return out, fmt.Errorf("peer TLS: %w", err)
		}
		if out.peerDial, err = cfg.PeerTLS.ClientConfig(); err != nil {
			return out, fmt.Errorf("peer TLS: %w", err)
		}
	}
	return out, nil
}
