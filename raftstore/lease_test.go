// This file holds the tests of leases on an in-process cluster: granted and
// kept alive through followers, revoked through Raft on expiry, and given a
// full TTL again by a new leader.

package raftstore_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestClusterLease grants a lease through a follower, keeps it alive through
// another, and lets it expire: the leader revokes it through Raft and its
// key disappears on every member.
func TestClusterLease(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{})
	ctx := ctxT(t)
	f := c.followers()
	a, b := f[0].client, f[1].client

	grant, err := a.Grant(ctx, 1)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	if _, err := a.Put(ctx, "/lease/k", "v", clientv3.WithLease(grant.ID)); err != nil {
		t.Fatalf("put with lease: %v", err)
	}
	ttl, err := b.TimeToLive(ctx, grant.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatalf("time to live: %v", err)
	}
	if ttl.GrantedTTL != 1 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "/lease/k" {
		t.Fatalf("time to live: got granted %d keys %q, want 1 [/lease/k]", ttl.GrantedTTL, ttl.Keys)
	}
	leases, err := c.members[0].client.Leases(ctx)
	if err != nil || len(leases.Leases) != 1 || leases.Leases[0].ID != grant.ID {
		t.Fatalf("leases: got %v (%v), want [%x]", leases, err, grant.ID)
	}

	// Keep it alive through b for a few TTLs: the key must stay.
	for i := 0; i < 6; i++ {
		ka, err := b.KeepAliveOnce(ctx, grant.ID)
		if err != nil {
			t.Fatalf("keep alive: %v", err)
		}
		if ka.TTL != 1 {
			t.Fatalf("keep alive TTL: got %d, want 1", ka.TTL)
		}
		time.Sleep(400 * time.Millisecond)
	}
	if resp, err := a.Get(ctx, "/lease/k"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("key of a kept-alive lease: got %v (%v), want present", resp, err)
	}

	// Stop keeping it alive: it expires and takes its key with it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := c.members[2].client.Get(ctx, "/lease/k")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease's key is still there 15s after its last keep-alive")
		}
		time.Sleep(100 * time.Millisecond)
	}
	ttl, err = a.TimeToLive(ctx, grant.ID)
	if err != nil {
		t.Fatalf("time to live of an expired lease: %v", err)
	}
	if ttl.TTL != -1 {
		t.Errorf("time to live of an expired lease: got %d, want -1", ttl.TTL)
	}
	ka, err := b.KeepAliveOnce(ctx, grant.ID)
	if err == nil {
		t.Errorf("keep alive of an expired lease: got TTL %d, want an error", ka.TTL)
	}

	// Revoke deletes the keys at once.
	g2, err := b.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "/lease/k2", "v", clientv3.WithLease(g2.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Revoke(ctx, g2.ID); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if resp, err := c.members[0].client.Get(ctx, "/lease/k2"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("key of a revoked lease: got %v (%v), want gone", resp, err)
	}
}

// TestLeaseSurvivesFailover: a new leader gives every lease a full TTL from
// its election, so a lease kept alive until the old leader stopped survives
// the failover and can be kept alive through the new leader.
func TestLeaseSurvivesFailover(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{})
	ctx := ctxT(t)
	old := c.waitLeader()
	grant, err := old.client.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.client.Put(ctx, "/lease/f", "v", clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}
	c.stop(old)
	nl := c.waitLeader()
	ttl, err := nl.client.TimeToLive(ctx, grant.ID)
	if err != nil {
		t.Fatalf("time to live on the new leader: %v", err)
	}
	if ttl.TTL <= 0 || ttl.TTL > 10 {
		t.Fatalf("time to live after failover: got %d, want in (0, 10]", ttl.TTL)
	}
	if _, err := nl.client.KeepAliveOnce(ctx, grant.ID); err != nil {
		t.Fatalf("keep alive on the new leader: %v", err)
	}
	if resp, err := nl.client.Get(ctx, "/lease/f"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("leased key after failover: got %v (%v), want present", resp, err)
	}
}
