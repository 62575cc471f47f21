// Package tlsfiles builds the TLS configurations kplane's components read
// from PEM files named by their flags: a server's certificate with the CA
// that verifies its clients, a client's CA bundle with its certificate.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Server loads a serving certificate; with caFile, client certificates
// signed by it are verified when given (tls.VerifyClientCertIfGiven), as
// authentication reads the verified chain.
func Server(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	t := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := Pool(caFile)
		if err != nil {
			return nil, err
		}
		t.ClientCAs = pool
		t.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return t, nil
}

// Client builds a client's configuration: the servers' CA bundle (empty:
// the host's roots) and, with certFile, its client certificate.
func Client(caFile, certFile, keyFile string) (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := Pool(caFile)
		if err != nil {
			return nil, err
		}
		t.RootCAs = pool
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// Pool reads a PEM bundle; a file without a certificate is an error.
func Pool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificates", file)
	}
	return pool, nil
}
