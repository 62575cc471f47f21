// This file holds the replication tests on an in-process cluster: leader
// failover, a follower catching up from a snapshot, and membership changes.

package raftstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/raftstore"
)

// waitConverged waits (bounded) until every running member reports the same
// revision and KV hash, and returns the revision.
func (c *cluster) waitConverged() int64 {
	c.t.Helper()
	ctx := ctxT(c.t)
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		var revs, hashes []string
		var rev int64
		for _, m := range c.members {
			if m.cancel == nil {
				continue
			}
			ep := m.client.Endpoints()[0]
			h, err := m.client.HashKV(ctx, ep, 0)
			if err != nil {
				last = err.Error()
				revs = nil
				break
			}
			rev = h.Header.Revision
			revs = append(revs, fmt.Sprint(h.Header.Revision))
			hashes = append(hashes, fmt.Sprint(h.Hash))
		}
		if len(revs) > 0 && allEqual(revs) && allEqual(hashes) {
			return rev
		}
		if len(revs) > 0 {
			last = fmt.Sprintf("revisions %v hashes %v", revs, hashes)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("members did not converge within 20s: %s", last)
	return 0
}

func allEqual(s []string) bool {
	for _, v := range s {
		if v != s[0] {
			return false
		}
	}
	return true
}

// TestLeaderFailover stops the leader: the others elect a new one and keep
// accepting writes and linearizable reads; the old leader, restarted from
// its data directory, catches up; every acknowledged write is present and
// the members converge.
func TestLeaderFailover(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{})
	ctx := ctxT(t)
	for i := 0; i < 10; i++ {
		if _, err := c.members[i%3].client.Put(ctx, fmt.Sprintf("/f/%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	old := c.waitLeader()
	c.stop(old)
	var rest []*member
	for _, m := range c.members {
		if m != old {
			rest = append(rest, m)
		}
	}
	for i := 10; i < 20; i++ {
		putRetry(ctx, t, rest[i%2].client, fmt.Sprintf("/f/%02d", i), "v")
	}
	if nl := c.waitLeader(); nl == old {
		t.Fatal("the stopped member still leads")
	}
	c.start(old)
	rev := c.waitConverged()
	for _, m := range c.members {
		resp, err := m.client.Get(ctx, "/f/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("%s: %v", m.cfg.Name, err)
		}
		if resp.Count != 20 {
			t.Errorf("%s: got %d keys, want 20", m.cfg.Name, resp.Count)
		}
		if resp.Header.Revision < rev {
			t.Errorf("%s: read revision %d below the converged %d", m.cfg.Name, resp.Header.Revision, rev)
		}
	}
}

// TestSnapshotCatchUp keeps a follower down while the others write far past
// the log they retain; on restart it can only catch up from a snapshot.
func TestSnapshotCatchUp(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{snapshotThreshold: 32, trailingLogs: 8})
	// 200 sequential quorum writes on two members: allow for a busy machine
	// (CI saw 15 s run out at a load average of 40).
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	down := c.followers()[0]
	c.stop(down)
	var up *member
	for _, m := range c.members {
		if m != down {
			up = m
		}
	}
	for i := 0; i < 200; i++ {
		putRetry(ctx, t, up.client, fmt.Sprintf("/s/%03d", i), strings.Repeat("v", 100))
	}
	// Wait for a snapshot that left the follower's next entry behind.
	leader := c.waitLeader()
	deadline := time.Now().Add(20 * time.Second)
	for leader.store.Raft().Stats()["last_snapshot_index"] < "1" || leader.store.Raft().Stats()["last_snapshot_index"] == "0" {
		if time.Now().After(deadline) {
			t.Fatalf("leader took no snapshot: %v", leader.store.Raft().Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.start(down)
	c.waitConverged()
	resp, err := down.client.Get(ctx, "/s/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 200 {
		t.Errorf("caught-up member: got %d keys, want 200", resp.Count)
	}
}

// TestMembership adds a fourth member with MemberAdd through a follower,
// starts it with --initial-cluster-state existing, sees it in MemberList and
// holding the data, moves leadership to it, then removes it.
func TestMembership(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{})
	ctx := ctxT(t)
	if _, err := c.members[0].client.Put(ctx, "/m/k", "v"); err != nil {
		t.Fatal(err)
	}
	f := c.followers()[0]
	ports := testutil.FreePorts(t, 2)
	cfg := memberConfig(t, t.TempDir(), "m3", ports[0], ports[1], clusterOptions{})
	add, err := f.client.MemberAdd(ctx, []string{cfg.InitialAdvertisePeerURL})
	if err != nil {
		t.Fatalf("member add: %v", err)
	}
	if len(add.Members) != 4 {
		t.Fatalf("members after add: got %d, want 4", len(add.Members))
	}
	cfg.InitialCluster = c.members[0].cfg.InitialCluster + ",m3=" + cfg.InitialAdvertisePeerURL
	cfg.InitialClusterState = "existing"
	nm := &member{cfg: cfg}
	c.members = append(c.members, nm)
	c.start(nm)
	deadline := time.Now().Add(20 * time.Second)
	for {
		list, err := nm.client.MemberList(ctx)
		named := 0
		if err == nil {
			for _, m := range list.Members {
				if m.Name != "" && len(m.ClientURLs) > 0 {
					named++
				}
			}
		}
		if named == 4 {
			if list.Members[0].ID == 0 {
				t.Fatal("member with ID 0")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member list never showed 4 started members: %v %v", list, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if resp, err := nm.client.Get(ctx, "/m/k"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("new member's read: got %v (%v), want the key", resp, err)
	}

	// Move leadership to the new member.
	ctx = ctxT(t)
	leader := c.waitLeader()
	if _, err := leader.client.MoveLeader(ctx, add.Member.ID); err != nil {
		t.Fatalf("move leader: %v", err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for c.waitLeader() != nm {
		if time.Now().After(deadline) {
			t.Fatal("leadership did not move to the new member")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every member's Status names it as leader once it heard from it.
	for _, m := range c.members {
		deadline = time.Now().Add(10 * time.Second)
		for {
			st, err := m.client.Status(ctx, m.client.Endpoints()[0])
			if err != nil {
				t.Fatal(err)
			}
			if st.Leader == add.Member.ID {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: status leader: got %x, want %x", m.cfg.Name, st.Leader, add.Member.ID)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Remove it (through a member that is not the leader): the rest go on.
	ctx = ctxT(t)
	if _, err := c.members[1].client.MemberRemove(ctx, add.Member.ID); err != nil {
		t.Fatalf("member remove: %v", err)
	}
	// The removed member exits by itself, as an etcd member does.
	select {
	case err := <-nm.done:
		if !errors.Is(err, raftstore.ErrRemoved) {
			t.Errorf("removed member's Run: got %v, want %v", err, raftstore.ErrRemoved)
		}
	case <-time.After(20 * time.Second):
		t.Error("removed member still running 20s after its removal")
		c.stop(nm)
	}
	nm.client.Close()
	nm.cancel()
	nm.cancel = nil
	c.members = c.members[:3]
	list, err := c.members[2].client.MemberList(ctx)
	if err != nil || len(list.Members) != 3 {
		t.Fatalf("members after remove: got %v (%v), want 3", list, err)
	}
	if _, err := c.members[2].client.Put(ctx, "/m/after", "v"); err != nil {
		t.Fatalf("put after remove: %v", err)
	}
}
