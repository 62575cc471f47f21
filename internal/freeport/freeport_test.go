// This file holds the tests of the port picker: no port handed out twice,
// every port free, and a bad host reported as an error.

package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPickGivesEachOnce: a Picker never hands out a port twice, though the
// kernel may return a just-closed port again, and never one it was told is
// reserved.
func TestPickGivesEachOnce(t *testing.T) {
	p := New("127.0.0.1")
	first, err := p.Pick()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{first: true}
	reserved, err := Pick("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	p.Reserve(reserved[0])
	for range 300 {
		n, err := p.Pick()
		if err != nil {
			t.Fatal(err)
		}
		if seen[n] {
			t.Fatalf("port %d given twice", n)
		}
		if n == reserved[0] {
			t.Fatalf("reserved port %d given out", n)
		}
		seen[n] = true
	}
}

// TestPickDistinctAndFree: the ports of one Pick call are distinct, and each
// can be bound once Pick returns.
func TestPickDistinctAndFree(t *testing.T) {
	ports, err := Pick("127.0.0.1", 20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, n := range ports {
		if seen[n] {
			t.Fatalf("port %d given twice in one Pick: %v", n, ports)
		}
		seen[n] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n)))
		if err != nil {
			t.Fatalf("port %d from Pick cannot be bound: %v", n, err)
		}
		l.Close()
	}
}

// TestPickBadHost: a host that cannot be listened on is an error, not a
// port.
func TestPickBadHost(t *testing.T) {
	if _, err := Pick("192.0.2.1", 1); err == nil {
		t.Fatal("Pick on an address not on this machine succeeded")
	}
	if _, err := New("192.0.2.1").Pick(); err == nil {
		t.Fatal("Picker.Pick on an address not on this machine succeeded")
	}
}
