// This file holds the Raft transport's stream layer: the listener and dialer
// hashicorp/raft's NetworkTransport runs over, in plain TCP or in TLS (so
// that peers authenticate each other with certificates, etcd's --peer-*
// flags), and which ends the connections peers opened when it closes.

package raftnode

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is a raft.StreamLayer that remembers the connections it
// accepted. NetworkTransport.Close closes the stream layer but not those
// connections, and raft's reader of each one stays blocked in Read until
// the peer hangs up; closing them here ends the readers with the member.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	dial      *tls.Config // nil: plain TCP

	mu     sync.Mutex
	conns  map[*acceptedConn]struct{}
	closed bool
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// newStreamLayer listens on bind, in TLS with serve (which says whether
// client certificates are required) when serve is not nil, and dials peers
// with dial (in TLS only when serving it: members speak one or the other).
// advertise is the address peers dial, which
// must be one they can reach.
func newStreamLayer(bind string, advertise *net.TCPAddr, serve, dial *tls.Config) (*streamLayer, error) {
	if advertise.IP == nil || advertise.IP.IsUnspecified() {
		return nil, fmt.Errorf("advertise address %s: peers cannot dial an unspecified address", advertise)
	}
	var l net.Listener
	var err error
	if serve != nil {
		l, err = tls.Listen("tcp", bind, serve)
	} else {
		l, err = net.Listen("tcp", bind)
	}
	if err != nil {
		return nil, fmt.Errorf("listen for peers on %s: %w", bind, err)
	}
	if serve == nil {
		dial = nil
	}
	return &streamLayer{Listener: l, advertise: advertise, dial: dial, conns: map[*acceptedConn]struct{}{}}, nil
}

// Accept waits for a peer's connection and remembers it until it closes.
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	ac := &acceptedConn{Conn: c, s: s}
	s.conns[ac] = struct{}{}
	return ac, nil
}

// Close stops listening and closes every connection still open.
func (s *streamLayer) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[*acceptedConn]struct{}{}
	s.mu.Unlock()
	err := s.Listener.Close()
	for c := range conns {
		err = errors.Join(err, ignoreClosed(c.Conn.Close()))
	}
	return err
}

// Dial opens a connection to a peer; in TLS the handshake completes within
// timeout, so that a peer with the wrong certificate fails here.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	nd := &net.Dialer{Timeout: timeout}
	if s.dial == nil {
		return nd.Dial("tcp", string(address))
	}
	d := &tls.Dialer{NetDialer: nd, Config: s.dial}
	return d.Dial("tcp", string(address))
}

// Addr is the address peers dial, which may differ from the bound one.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// acceptedConn is a peer's connection that leaves its stream layer's set
// when it closes.
type acceptedConn struct {
	net.Conn
	s    *streamLayer
	once sync.Once
}

func (c *acceptedConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}

func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
