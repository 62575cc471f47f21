// Package freeport picks free TCP ports for processes that bind them later.
//
// A port is found by listening on port 0 and closing the listener, so the
// kernel may hand the same port out again on the next call, and another
// process may take it before its user binds it. Pick holds all of its
// listeners open until every port is chosen, and a Picker never returns one
// port twice, which rules out the first; callers that bind in process can
// retry on EADDRINUSE for the second.
package freeport

import (
	"fmt"
	"net"
	"sync"
)

// Pick returns n distinct TCP ports on host that were free when asked.
func Pick(host string, n int) ([]int, error) {
	ports := make([]int, 0, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("pick a free port on %s: %w", host, err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Picker hands out free ports on one host, each at most once over its life.
// It is safe for concurrent use.
type Picker struct {
	host  string
	mu    sync.Mutex
	given map[int]bool
}

// New returns a Picker for host.
func New(host string) *Picker {
	return &Picker{host: host, given: map[int]bool{}}
}

// Reserve marks ports chosen elsewhere (fixed ones, say) as given, so Pick
// never returns them.
func (p *Picker) Reserve(ports ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range ports {
		if n != 0 {
			p.given[n] = true
		}
	}
}

// Pick returns a port that is free now and that p has not given before.
func (p *Picker) Pick() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range 100 {
		ports, err := Pick(p.host, 1)
		if err != nil {
			return 0, err
		}
		if n := ports[0]; !p.given[n] {
			p.given[n] = true
			return n, nil
		}
	}
	return 0, fmt.Errorf("pick a free port on %s: only ports already given out came back", p.host)
}
