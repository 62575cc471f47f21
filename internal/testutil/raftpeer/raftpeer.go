// Package raftpeer probes a store member's Raft peer port as another member
// would, for the end-to-end tests of who that port admits.
package raftpeer

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"

	"github.com/hashicorp/raft"
)

// Addr returns the host:port of a member's peer URL.
func Addr(peerURL string) (string, error) {
	u, err := url.Parse(peerURL)
	if err != nil {
		return "", fmt.Errorf("peer URL %q: %w", peerURL, err)
	}
	return u.Host, nil
}

// RequestVote sends a harmless Raft RequestVote (term 0) to a member's
// peer port through hashicorp/raft's own transport, over TLS with tc or
// plaintext TCP when tc is nil, and returns the transport's error.
func RequestVote(addr string, tc *tls.Config) error {
	trans := raft.NewNetworkTransport(&dialOnly{tls: tc, closed: make(chan struct{})}, 1, 3*time.Second, io.Discard)
	defer trans.Close()
	var resp raft.RequestVoteResponse
	return trans.RequestVote("e2e", raft.ServerAddress(addr), &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("e2e"), Addr: []byte("127.0.0.1:1")},
	}, &resp)
}

// dialOnly is a raft.StreamLayer that only dials (its listener accepts
// nothing).
type dialOnly struct {
	tls    *tls.Config
	closed chan struct{}
}

func (d *dialOnly) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	nd := &net.Dialer{Timeout: timeout}
	if d.tls == nil {
		return nd.Dial("tcp", string(addr))
	}
	return (&tls.Dialer{NetDialer: nd, Config: d.tls}).Dial("tcp", string(addr))
}

func (d *dialOnly) Accept() (net.Conn, error) {
	<-d.closed
	return nil, net.ErrClosed
}

func (d *dialOnly) Close() error {
	close(d.closed)
	return nil
}

func (d *dialOnly) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
