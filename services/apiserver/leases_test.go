// This file holds the tests of expiring objects: the lease manager's sharing
// rule, and events that expire after Config.EventTTL.

package apiserver

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// grantCounter is a clientv3.Lease that only grants, numbering its leases.
type grantCounter struct {
	clientv3.Lease
	grants []int64 // the TTLs asked for
}

func (g *grantCounter) Grant(_ context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	g.grants = append(g.grants, ttl)
	return &clientv3.LeaseGrantResponse{ID: clientv3.LeaseID(len(g.grants)), TTL: ttl}, nil
}

func TestLeaseSharing(t *testing.T) {
	g := &grantCounter{}
	m := newLeaseManager(g)
	now := time.Unix(1_000_000, 0)
	m.now = func() time.Time { return now }
	ctx := context.Background()
	get := func(ttl time.Duration) clientv3.LeaseID {
		t.Helper()
		id, err := m.lease(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	// An hour's TTL gets a lease of an hour and a minute (5% capped at a
	// minute), shared for that minute.
	first := get(time.Hour)
	if len(g.grants) != 1 || g.grants[0] != 3660 {
		t.Fatalf("grants %v, want one of 3660 s", g.grants)
	}
	now = now.Add(59 * time.Second)
	if id := get(time.Hour); id != first {
		t.Errorf("within the reuse window: got lease %d, want %d", id, first)
	}
	now = now.Add(2 * time.Second)
	second := get(time.Hour)
	if second == first {
		t.Errorf("past the reuse window: got the same lease %d", first)
	}
	// Another TTL gets a lease of its own (20 s: 5% is one second).
	if id := get(20 * time.Second); id == second || g.grants[len(g.grants)-1] != 21 {
		t.Errorf("another TTL: lease %d, grants %v", id, g.grants)
	}
	// At most leaseMaxObjects writes share one lease.
	third := get(time.Hour)
	for range leaseMaxObjects - 1 {
		if id := get(time.Hour); id != third {
			t.Fatalf("lease changed before %d objects", leaseMaxObjects)
		}
	}
	if id := get(time.Hour); id == third {
		t.Errorf("lease %d shared by more than %d objects", third, leaseMaxObjects)
	}
	// A lease the store lost is forgotten.
	cur := get(time.Hour)
	m.forget(cur)
	if id := get(time.Hour); id == cur {
		t.Errorf("a forgotten lease was handed out again")
	}
}

// TestEventsExpire: with an EventTTL, an event's key carries a lease and the
// event is gone (from the store and the watch cache) after the TTL and its
// reuse window; other objects carry none.
func TestEventsExpire(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.EventTTL = 2 * time.Second })
	ctx := admin(t)
	ev := &corev1.Event{Metadata: &metav1.ObjectMeta{Name: "e1", Namespace: "default"},
		InvolvedObject: &corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "default"}, Reason: "Tested", Message: "m", Type: "Normal"}
	if _, err := e.events.CreateEvent(ctx, &corev1.CreateEventRequest{Namespace: "default", Event: ev}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("stays", nil)}); err != nil {
		t.Fatal(err)
	}
	cli := e.srv.store.cli
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(sctx, "/registry/events/default/e1")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("the event's key: %v %v, want it with a lease", resp, err)
	}
	if resp, err := cli.Get(sctx, "/registry/configmaps/default/stays"); err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != 0 {
		t.Fatalf("the configmap's key: %v %v, want it without a lease", resp, err)
	}
	// The store deletes the key when the lease ends, and the watch cache
	// (which serves resourceVersion 0 lists) follows.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := cli.Get(sctx, "/registry/events/default/e1")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the event's key is still in the store 20 s after its 2 s TTL")
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		l, err := e.events.ListEvents(ctx, &corev1.ListEventsRequest{Namespace: "default", ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.GetList().GetItems()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch cache still lists the event 20 s after the store deleted it")
		}
	}
	if _, err := e.cms.GetConfigMap(ctx, &corev1.GetConfigMapRequest{Namespace: "default", Name: "stays"}); err != nil {
		t.Fatalf("the configmap went too: %v", err)
	}
}
