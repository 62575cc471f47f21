// This file tests auto-compaction on a three-member cluster: only the leader
// compacts, the compaction is replicated to every member, and reads and
// watches below it get etcd's compacted error.

package raftstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kplane/kplane/raftstore/etcdserver"
)

// tick moves a member's fake clock by d once its compactor waits on it, and
// waits until the compactor has acted on it (waits on the clock again).
func tick(t *testing.T, m *member, d time.Duration) {
	t.Helper()
	clk := m.cfg.Clock.(*clocktesting.FakeClock)
	waitClockWaiter(t, m, clk)
	clk.Step(d)
	waitClockWaiter(t, m, clk)
}

func waitClockWaiter(t *testing.T, m *member, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the compactor never waited on its clock", m.cfg.Name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// compactRev returns the compaction point m reports.
func compactRev(t *testing.T, m *member) int64 {
	t.Helper()
	h, err := m.client.HashKV(ctxT(t), m.client.Endpoints()[0], 0)
	if err != nil {
		t.Fatalf("%s: HashKV: %v", m.cfg.Name, err)
	}
	return h.CompactRevision
}

func TestAutoCompactionByRevisionOnTheLeader(t *testing.T) {
	const keep = 5
	clocks := []etcdserver.Clock{
		clocktesting.NewFakeClock(time.Unix(0, 0)),
		clocktesting.NewFakeClock(time.Unix(0, 0)),
		clocktesting.NewFakeClock(time.Unix(0, 0)),
	}
	c := newCluster(t, 3, clusterOptions{
		autoCompaction: etcdserver.AutoCompaction{Mode: etcdserver.CompactionModeRevision, Revisions: keep},
		clocks:         clocks,
	})
	ctx := ctxT(t)
	leader := c.waitLeader()
	for i := range 20 {
		putRetry(ctx, t, leader.client, "/ac/key", fmt.Sprint(i))
	}
	rev := c.waitConverged()

	// The followers' turns come: they sample, but compact nothing. (Each
	// tick returns once the follower's compactor finished its turn, and a
	// compaction it proposed would have been applied on it by then.)
	for _, f := range c.followers() {
		tick(t, f, etcdserver.RevisionCompactionInterval)
	}
	for _, m := range c.members {
		if got := compactRev(t, m); got != 0 {
			t.Fatalf("%s: compacted at %d after only the followers' turns", m.cfg.Name, got)
		}
	}

	// The leader's turn: it compacts to the revision less the retention,
	// and every member applies it.
	tick(t, leader, etcdserver.RevisionCompactionInterval)
	want := rev - keep
	if got := compactRev(t, leader); got != want {
		t.Fatalf("leader: compacted at %d, want %d", got, want)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, m := range c.members {
		for compactRev(t, m) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: compaction point %d, want %d", m.cfg.Name, compactRev(t, m), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	for _, m := range c.members {
		t.Run(m.cfg.Name, func(t *testing.T) {
			// Below the compaction point: etcd's compacted error.
			if _, err := m.client.Get(ctx, "/ac/key", clientv3.WithRev(want-1), clientv3.WithSerializable()); !errors.Is(err, rpctypes.ErrCompacted) {
				t.Errorf("get at %d: got %v, want %v", want-1, err, rpctypes.ErrCompacted)
			}
			// At it: the value it had then.
			resp, err := m.client.Get(ctx, "/ac/key", clientv3.WithRev(want), clientv3.WithSerializable())
			if err != nil {
				t.Fatalf("get at %d: %v", want, err)
			}
			if len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != want {
				t.Errorf("get at %d: got %v, want the key at mod revision %d", want, resp.Kvs, want)
			}
			// A watch from below it is cancelled with the compaction point.
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			wr, ok := <-m.client.Watch(wctx, "/ac/key", clientv3.WithRev(want-1))
			if !ok {
				t.Fatal("watch closed without a response")
			}
			if !errors.Is(wr.Err(), rpctypes.ErrCompacted) || wr.CompactRevision != want {
				t.Errorf("watch from %d: got err %v, compact revision %d; want %v, %d", want-1, wr.Err(), wr.CompactRevision, rpctypes.ErrCompacted, want)
			}
		})
	}
}
