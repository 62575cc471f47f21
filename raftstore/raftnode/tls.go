// This file holds the Raft transport's TLS stream layer: hashicorp/raft's
// NetworkTransport over crypto/tls, so that peers authenticate each other
// with certificates (etcd's --peer-* flags).

package raftnode

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// tlsStreamLayer is a raft.StreamLayer whose listener and dials speak TLS.
type tlsStreamLayer struct {
	net.Listener
	advertise net.Addr
	dial      *tls.Config
}

var _ raft.StreamLayer = (*tlsStreamLayer)(nil)

// newTLSStreamLayer listens on bind with serve (which says whether client
// certificates are required) and dials peers with dial.
func newTLSStreamLayer(bind string, advertise net.Addr, serve, dial *tls.Config) (*tlsStreamLayer, error) {
	l, err := tls.Listen("tcp", bind, serve)
	if err != nil {
		return nil, fmt.Errorf("listen for peers on %s: %w", bind, err)
	}
	return &tlsStreamLayer{Listener: l, advertise: advertise, dial: dial}, nil
}

// Dial opens a TLS connection to a peer and completes the handshake within
// timeout, so that a peer with the wrong certificate fails here.
func (s *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.dial}
	return d.Dial("tcp", string(address))
}

// Addr is the address peers dial, which may differ from the bound one.
func (s *tlsStreamLayer) Addr() net.Addr { return s.advertise }
