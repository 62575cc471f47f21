// This file holds the in-process cluster harness: N store members in one
// test process on loopback, with short Raft timeouts, that a test can stop
// and restart one at a time.

package raftstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/raftstore"
	"github.com/kplane/kplane/raftstore/etcdserver"
)

type member struct {
	cfg    raftstore.Config
	store  *raftstore.Store
	cancel context.CancelFunc
	done   chan error
	client *clientv3.Client
}

type cluster struct {
	t       testing.TB
	members []*member
}

type clusterOptions struct {
	snapshotThreshold uint64
	trailingLogs      uint64
	maxRequestBytes   int
	// autoCompaction is every member's; clocks[i], if given, is member
	// i's clock.
	autoCompaction etcdserver.AutoCompaction
	clocks         []etcdserver.Clock
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("KPLANE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// memberConfig configures a member on the client and peer ports given,
// which the caller takes from one testutil.FreePorts call for the whole
// cluster so that no port goes to two members.
func memberConfig(t testing.TB, dir, name string, cport, pport int, opts clusterOptions) raftstore.Config {
	return raftstore.Config{
		Name:                    name,
		DataDir:                 filepath.Join(dir, name),
		ListenClientURLs:        []string{fmt.Sprintf("http://127.0.0.1:%d", cport)},
		ListenPeerURL:           fmt.Sprintf("http://127.0.0.1:%d", pport),
		InitialAdvertisePeerURL: fmt.Sprintf("http://127.0.0.1:%d", pport),
		// Short enough for quick failovers, long enough not to flap on a
		// busy 2-core machine.
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		SnapshotThreshold:  opts.snapshotThreshold,
		SnapshotInterval:   200 * time.Millisecond,
		TrailingLogs:       opts.trailingLogs,
		LeaseCheckInterval: 100 * time.Millisecond,
		MinLeaseTTL:        1,
		MaxRequestBytes:    opts.maxRequestBytes,
		AutoCompaction:     opts.autoCompaction,
		Logger:             testLogger(t),
	}
}

// newCluster starts n members bootstrapped together and waits for a leader.
func newCluster(t testing.TB, n int, opts clusterOptions) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t}
	var initial []string
	ports := testutil.FreePorts(t, 2*n)
	for i := 0; i < n; i++ {
		cfg := memberConfig(t, dir, fmt.Sprintf("m%d", i), ports[2*i], ports[2*i+1], opts)
		if i < len(opts.clocks) {
			cfg.Clock = opts.clocks[i]
		}
		initial = append(initial, cfg.Name+"="+cfg.InitialAdvertisePeerURL)
		c.members = append(c.members, &member{cfg: cfg})
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
		c.start(m)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			c.stop(m)
		}
	})
	c.waitLeader()
	return c
}

func (c *cluster) start(m *member) {
	c.t.Helper()
	s, err := raftstore.New(m.cfg)
	if err != nil {
		c.t.Fatalf("start member %s: %v", m.cfg.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.store, m.cancel, m.done = s, cancel, make(chan error, 1)
	go func() { m.done <- s.Run(ctx) }()
	m.client = newClient(c.t, strings.TrimPrefix(m.cfg.ListenClientURLs[0], "http://"))
}

func (c *cluster) stop(m *member) {
	if m.cancel == nil {
		return
	}
	m.client.Close()
	m.cancel()
	if err := <-m.done; err != nil {
		c.t.Errorf("member %s stopped with: %v", m.cfg.Name, err)
	}
	m.cancel = nil
}

func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client for %v: %v", endpoints, err)
	}
	return cli
}

// leader returns the member that leads, waiting (bounded) for one.
func (c *cluster) waitLeader() *member {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range c.members {
			if m.cancel != nil && m.store.Raft().State().String() == "Leader" {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no leader within 20s")
	return nil
}

func (c *cluster) followers() []*member {
	l := c.waitLeader()
	var out []*member
	for _, m := range c.members {
		if m != l && m.cancel != nil {
			out = append(out, m)
		}
	}
	return out
}

// putRetry puts, trying again (bounded) when the answer is "leader
// changed" or "no leader": for tests that need the data, not the exact
// outcome of each attempt.
func putRetry(ctx context.Context, t testing.TB, cli *clientv3.Client, key, val string) {
	t.Helper()
	var err error
	for i := 0; i < 20; i++ {
		if _, err = cli.Put(ctx, key, val); err == nil {
			return
		}
		if !errors.Is(err, rpctypes.ErrLeaderChanged) && !errors.Is(err, rpctypes.ErrNoLeader) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("put %s: %v", key, err)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}
