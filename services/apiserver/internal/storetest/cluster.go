// This file holds a kplane store cluster of several members in process, for
// tests that stop and start members (quorum loss) under the API service.

package storetest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/raftstore"
)

// Cluster is n kplane store members on loopback, each of which can be
// stopped and started again on its data.
type Cluster struct {
	t       testing.TB
	dir     string
	names   []string
	clients []string
	peers   []string
	stops   []func() // nil while a member is stopped
}

// StartCluster starts an n-member kplane store cluster for t; every member
// still running is stopped when t ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, dir: t.TempDir(), stops: make([]func(), n)}
	ports := testutil.FreePorts(t, 2*n)
	var initial []string
	for i := range n {
		c.names = append(c.names, fmt.Sprintf("m%d", i))
		c.clients = append(c.clients, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]))
		c.peers = append(c.peers, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]))
		initial = append(initial, c.names[i]+"="+c.peers[i])
	}
	for i := range n {
		c.start(i, strings.Join(initial, ","))
	}
	t.Cleanup(func() {
		for i := range c.stops {
			c.Stop(i)
		}
	})
	waitHealthy(t, c.clients)
	return c
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string { return c.clients }

// Stop stops member i (as a crash would: no goodbye to its peers beyond
// closing its connections); its data stays.
func (c *Cluster) Stop(i int) {
	if stop := c.stops[i]; stop != nil {
		stop()
		c.stops[i] = nil
	}
}

// Start starts member i again on its data.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	var initial []string
	for j := range c.names {
		initial = append(initial, c.names[j]+"="+c.peers[j])
	}
	c.start(i, strings.Join(initial, ","))
}

func (c *Cluster) start(i int, initial string) {
	c.t.Helper()
	s, err := raftstore.New(raftstore.Config{
		Name: c.names[i], DataDir: filepath.Join(c.dir, c.names[i]),
		ListenClientURLs: []string{c.clients[i]}, ListenPeerURL: c.peers[i],
		InitialCluster: initial, InitialClusterState: "new",
	})
	if err != nil {
		c.t.Fatalf("kplane store member %s: %v", c.names[i], err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	c.stops[i] = func() {
		cancel()
		<-done
	}
}
