// This file holds the tests of the Raft stream layer and of the leadership
// check that ends with the node.

package raftnode

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Closing the stream layer closes the connections peers opened to it, so
// that raft's reader of each one ends with the member.
func TestStreamLayerCloseEndsAcceptedConns(t *testing.T) {
	s, err := newStreamLayer("127.0.0.1:0", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := s.Dial(raft.ServerAddress(s.Listener.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	accepted, err := s.Accept()
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := accepted.Read(make([]byte, 1))
		readErr <- err
	}()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case err := <-readErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("the accepted connection's reader got %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the accepted connection's reader still blocked after Close")
	}
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the peer's end read %v after Close, want EOF", err)
	}
	if _, err := s.Accept(); err == nil {
		t.Error("Accept after Close succeeded")
	}
}

// A connection that closes by itself leaves the layer's set.
func TestStreamLayerForgetsClosedConns(t *testing.T) {
	s, err := newStreamLayer("127.0.0.1:0", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 3 {
		peer, err := net.Dial("tcp", s.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		c.Close()
		peer.Close()
	}
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d closed connections still tracked", n)
	}
}

func TestNewStreamLayerRefusesUnspecifiedAdvertise(t *testing.T) {
	if _, err := newStreamLayer("127.0.0.1:0", &net.TCPAddr{IP: net.IPv4zero, Port: 2380}, nil, nil); err == nil {
		t.Fatal("an unspecified advertise address was accepted")
	}
}

// The verify future raft returns takes the channel that ends its wait (a
// raft upgrade that moves the field fails here), and a leadership check
// on a closed node returns instead of waiting.
func TestVerifyLeaderEndsWithNode(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	n, err := New(Config{ID: "a", BindAddr: addr, Dir: t.TempDir(),
		Bootstrap: []raft.Server{{ID: "a", Address: raft.ServerAddress(addr)}}}, nopFSM{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); n.Raft.State() != raft.Leader; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			n.Close()
			t.Fatal("no leader within 10 s")
		}
	}
	f := n.Raft.VerifyLeader()
	if !setShutdownCh(f, make(chan struct{})) {
		t.Error("raft's verify future has no settable ShutdownCh: VerifyLeader can wait for ever on a stopped node")
	}
	if err := f.Error(); err != nil {
		t.Errorf("verify on a lone leader: %v", err)
	}
	if err := n.VerifyLeader(); err != nil {
		t.Errorf("VerifyLeader on a lone leader: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.VerifyLeader() }()
	select {
	case err := <-done:
		if !errors.Is(err, raft.ErrRaftShutdown) {
			t.Errorf("VerifyLeader on a closed node: %v, want raft.ErrRaftShutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("VerifyLeader on a closed node still waiting after 10 s")
	}
}
