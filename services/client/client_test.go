// This file holds the client's unit tests against a small lease server:
// typed CRUD, the informer, the work queue, and leader election, churn
// included.

package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func lease(ns, name, holder string) *coordv1.Lease {
	return &coordv1.Lease{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: &coordv1.LeaseSpec{HolderIdentity: proto.String(holder)}}
}

// noLeaks fails the test if goroutines it started outlive it (goroutines
// already running when it is called, e.g. left by earlier tests' libraries,
// are not its business). Register it first: cleanups run last-in first-out,
// so it checks after the servers and connections the test made are closed.
func noLeaks(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
}

func TestClientCRUD(t *testing.T) {
	noLeaks(t)
	_, conn := startLeaseServer(t)
	c, err := New[*coordv1.Lease](conn)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Namespaced() || c.Kind() != "Lease" {
		t.Fatalf("got namespaced=%v kind=%q, want true Lease", c.Namespaced(), c.Kind())
	}
	ctx := context.Background()
	created, err := c.Create(ctx, lease("ns", "a", "me"))
	if err != nil {
		t.Fatal(err)
	}
	if ResourceVersion(created) == "" {
		t.Fatal("created object has no resourceVersion")
	}
	if _, err := c.Create(ctx, lease("ns", "a", "me")); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: got %v, want AlreadyExists", err)
	}
	got, err := c.Get(ctx, "ns", "a")
	if err != nil || got.GetSpec().GetHolderIdentity() != "me" {
		t.Fatalf("get: got %v, %v", got, err)
	}
	got.Spec.HolderIdentity = proto.String("you")
	updated, err := c.Update(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	// The first read is stale now.
	if _, err := c.Update(ctx, created); !apierrors.IsConflict(err) {
		t.Errorf("stale update: got %v, want Conflict", err)
	}
	if _, err := c.Create(ctx, lease("other", "b", "x")); err != nil {
		t.Fatal(err)
	}
	items, rv, err := c.List(ctx, "ns", ListOptions{})
	if err != nil || len(items) != 1 || rv == "" {
		t.Fatalf("list ns: got %d items, rv %q, err %v; want 1 item and a resourceVersion", len(items), rv, err)
	}
	all, _, err := c.List(ctx, "", ListOptions{})
	if err != nil || len(all) != 2 {
		t.Fatalf("list all: got %d items, %v; want 2", len(all), err)
	}
	if err := c.Delete(ctx, "ns", "a", DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "ns", "a"); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: got %v, want NotFound", err)
	}
	if _, err := c.UpdateStatus(ctx, updated); apierrors.ReasonOf(err) != apierrors.ReasonMethodNotAllowed {
		t.Errorf("UpdateStatus on leases: got %v, want MethodNotAllowed", err)
	}
}

// recorder collects an informer's notifications.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) has(e string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.events {
		if x == e {
			return true
		}
	}
	return false
}

func (r *recorder) handler() Handler[*coordv1.Lease] {
	return Handler[*coordv1.Lease]{
		OnAdd: func(o *coordv1.Lease) { r.add("add %s %s", Key(o), o.GetSpec().GetHolderIdentity()) },
		OnUpdate: func(old, o *coordv1.Lease) {
			r.add("update %s %s->%s", Key(o), old.GetSpec().GetHolderIdentity(), o.GetSpec().GetHolderIdentity())
		},
		OnDelete: func(o *coordv1.Lease) { r.add("delete %s", Key(o)) },
	}
}

func TestInformer(t *testing.T) {
	noLeaks(t)
	srv, conn := startLeaseServer(t)
	c := Must[*coordv1.Lease](conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, n := range []string{"a", "b", "c"} {
		if _, err := c.Create(ctx, lease("ns", n, "h1")); err != nil {
			t.Fatal(err)
		}
	}
	byHolder := func(o *coordv1.Lease) []string { return []string{o.GetSpec().GetHolderIdentity()} }
	inf := NewInformer(ListWatch(c, "", "", "", 2), InformerOptions[*coordv1.Lease]{
		Indexers: map[string]IndexFunc[*coordv1.Lease]{"holder": byHolder}, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	rec := &recorder{}
	inf.AddEventHandler(rec.handler())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()

	syncCtx, syncCancel := context.WithTimeout(ctx, 20*time.Second)
	defer syncCancel()
	if !WaitForCacheSync(syncCtx, inf) {
		t.Fatal("informer did not sync")
	}
	if n := inf.Store().Len(); n != 3 {
		t.Fatalf("after sync: got %d objects, want 3", n)
	}

	t.Run("watch events reach the cache, the indexes and the handlers", func(t *testing.T) {
		d, _ := c.Get(ctx, "ns", "a")
		d.Spec.HolderIdentity = proto.String("h2")
		if _, err := c.Update(ctx, d); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Create(ctx, lease("other", "d", "h2")); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, "ns", "b", DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the delete of ns/b", func() bool { return rec.has("delete ns/b") })
		for _, e := range []string{"add ns/a h1", "add ns/b h1", "add ns/c h1", "update ns/a h1->h2", "add other/d h2"} {
			if !rec.has(e) {
				t.Errorf("missing notification %q; got %v", e, rec.events)
			}
		}
		h2, err := inf.Store().ByIndex("holder", "h2")
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, o := range h2 {
			keys = append(keys, Key(o))
		}
		sort.Strings(keys)
		if fmt.Sprint(keys) != "[ns/a other/d]" {
			t.Errorf("index holder=h2: got %v, want [ns/a other/d]", keys)
		}
		if got := len(inf.Store().ByNamespace("ns")); got != 2 {
			t.Errorf("namespace index ns: got %d objects, want 2", got)
		}
		if _, ok := inf.Store().GetByName("ns", "b"); ok {
			t.Error("deleted object still in the cache")
		}
	})

	t.Run("a broken watch resumes from the last resourceVersion without a re-list", func(t *testing.T) {
		_, listsBefore := srv.snapshot()
		last := inf.LastSyncResourceVersion()
		srv.breakWatches()
		if _, err := c.Create(ctx, lease("ns", "e", "h3")); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the add of ns/e", func() bool { return rec.has("add ns/e h3") })
		rvs, lists := srv.snapshot()
		if lists != listsBefore {
			t.Errorf("got %d lists after the break, want %d (no re-list)", lists, listsBefore)
		}
		found := false
		for _, rv := range rvs {
			found = found || rv == last
		}
		if !found {
			t.Errorf("no watch was reopened from %s; watches opened from %v", last, rvs)
		}
	})

	t.Run("410 Expired makes it re-list, and the re-list's differences are notified", func(t *testing.T) {
		relists := inf.Relists()
		// While the watch is down: a delete and an update the informer
		// can only learn from the re-list, then compaction.
		srv.mu.Lock()
		delete(srv.objs, key("ns", "c"))
		e := srv.objs[key("ns", "e")]
		e.Spec.HolderIdentity = proto.String("h4")
		srv.rev++
		e.Metadata.ResourceVersion = fmt.Sprint(srv.rev)
		srv.compacted = srv.rev + 1
		srv.mu.Unlock()
		srv.breakWatches()
		testutil.Eventually(t, "the re-list", func() bool { return inf.Relists() > relists })
		testutil.Eventually(t, "the delete of ns/c from the re-list", func() bool { return rec.has("delete ns/c") })
		testutil.Eventually(t, "the update of ns/e from the re-list", func() bool { return rec.has("update ns/e h3->h4") })
		// And it watches again from the re-list's resourceVersion.
		if _, err := c.Create(ctx, lease("ns", "f", "h5")); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the add of ns/f after the re-list", func() bool { return rec.has("add ns/f h5") })
	})

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
}

func TestQueue(t *testing.T) {
	q := NewQueue("test", time.Millisecond, 20*time.Millisecond)
	defer q.ShutDown()
	q.Add("a")
	q.Add("a")
	q.Add("b")
	if n := q.Len(); n != 2 {
		t.Fatalf("got %d queued keys, want 2 (a deduplicated)", n)
	}
	k, _ := q.Get()
	if k != "a" {
		t.Fatalf("got %q, want a", k)
	}
	// a is being processed: adding it again must not hand it to a second worker now.
	q.Add("a")
	k2, _ := q.Get()
	if k2 != "b" {
		t.Fatalf("got %q while a is processing, want b", k2)
	}
	if q.Len() != 0 {
		t.Fatalf("got %d queued while a is processing, want 0", q.Len())
	}
	q.Done("a") // now a is re-queued
	q.Done("b")
	if q.Len() != 1 {
		t.Fatalf("got %d queued after Done, want 1 (a again)", q.Len())
	}
	k, _ = q.Get()
	for range 3 {
		q.AddRateLimited(k)
	}
	if got := q.NumRequeues(k); got != 3 {
		t.Errorf("got %d requeues, want 3", got)
	}
	q.Forget(k)
	if got := q.NumRequeues(k); got != 0 {
		t.Errorf("got %d requeues after Forget, want 0", got)
	}
	q.Done(k)
}

// interval is one leadership term as the callbacks saw it.
type interval struct {
	who        string
	start, end time.Time
}

type terms struct {
	mu   sync.Mutex
	list []interval
}

func (ts *terms) callbacks(who string) LeaderCallbacks {
	return LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context) {
			start := time.Now()
			<-ctx.Done()
			ts.mu.Lock()
			ts.list = append(ts.list, interval{who: who, start: start, end: time.Now()})
			ts.mu.Unlock()
		},
	}
}

func (ts *terms) get() []interval {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]interval(nil), ts.list...)
}

// switchable is a LeaseClient that can be cut off, like a partitioned candidate.
type switchable struct {
	LeaseClient
	down atomic.Bool
}

var errPartitioned = errors.New("partitioned")

func (s *switchable) Get(ctx context.Context, ns, name string) (*coordv1.Lease, error) {
	if s.down.Load() {
		return nil, errPartitioned
	}
	return s.LeaseClient.Get(ctx, ns, name)
}

func (s *switchable) Update(ctx context.Context, l *coordv1.Lease) (*coordv1.Lease, error) {
	if s.down.Load() {
		return nil, errPartitioned
	}
	return s.LeaseClient.Update(ctx, l)
}

func TestLeaderElection(t *testing.T) {
	tests := []struct {
		name string
		// stop ends the first leader's term: by killing it or cutting it off.
		how string
	}{
		{name: "leader killed; the other takes over after the lease lapses", how: "kill"},
		{name: "leader partitioned; it stops before the other starts", how: "partition"},
		{name: "leader shuts down cleanly and releases", how: "release"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noLeaks(t)
			_, conn := startLeaseServer(t)
			ts := &terms{}
			type cand struct {
				le     *LeaderElector
				leases *switchable
				cancel context.CancelFunc
				done   chan struct{}
			}
			var cands []*cand
			for _, id := range []string{"c1", "c2"} {
				sw := &switchable{LeaseClient: Must[*coordv1.Lease](conn)}
				le, err := NewLeaderElector(LeaderElectionConfig{
					Leases: sw, Namespace: "kube-system", Name: "test", Identity: id,
					LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
					ReleaseOnCancel: tt.how == "release", Callbacks: ts.callbacks(id),
				})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				c := &cand{le: le, leases: sw, cancel: cancel, done: make(chan struct{})}
				go func() {
					defer close(c.done)
					le.Run(ctx)
				}()
				cands = append(cands, c)
			}
			defer func() {
				for _, c := range cands {
					c.cancel()
					<-c.done
				}
			}()
			var first, second *cand
			testutil.Eventually(t, "a leader", func() bool {
				for i, c := range cands {
					if c.le.IsLeader() {
						first, second = c, cands[1-i]
						return true
					}
				}
				return false
			})
			if second.le.IsLeader() {
				t.Fatal("both candidates lead")
			}
			testutil.Eventually(t, "the follower to observe the leader", func() bool { return second.le.Leader() == first.le.cfg.Identity })

			stopped := time.Now()
			switch tt.how {
			case "kill", "release":
				first.cancel()
				<-first.done
			case "partition":
				first.leases.down.Store(true)
			}
			testutil.Eventually(t, "the other candidate to lead", second.le.IsLeader)
			took := time.Since(stopped)
			if tt.how == "partition" {
				testutil.Eventually(t, "the partitioned leader to stop", func() bool { return !first.le.IsLeader() })
			}
			// Let the terms close, then check they never overlapped.
			for _, c := range cands {
				c.cancel()
				<-c.done
			}
			got := ts.get()
			if len(got) != 2 {
				t.Fatalf("got %d leadership terms, want 2: %+v", len(got), got)
			}
			sort.Slice(got, func(i, j int) bool { return got[i].start.Before(got[j].start) })
			if got[0].end.After(got[1].start) {
				t.Errorf("terms overlap: %s led until %v, %s from %v", got[0].who, got[0].end.Format(time.RFC3339Nano), got[1].who, got[1].start.Format(time.RFC3339Nano))
			}
			t.Logf("%s: takeover %v after the leader stopped", tt.how, took)
		})
	}
}

// TestLeaderElectionChurn: three candidates; the leader is killed or cut off
// three times in a row (and comes back as a new candidate); at every moment at
// most one leads, which the recorded terms show by never overlapping.
func TestLeaderElectionChurn(t *testing.T) {
	noLeaks(t)
	_, conn := startLeaseServer(t)
	ts := &terms{}
	type cand struct {
		le     *LeaderElector
		leases *switchable
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(id string) *cand {
		sw := &switchable{LeaseClient: Must[*coordv1.Lease](conn)}
		le, err := NewLeaderElector(LeaderElectionConfig{
			Leases: sw, Namespace: "kube-system", Name: "churn", Identity: id,
			LeaseDuration: time.Second, RenewDeadline: 700 * time.Millisecond, RetryPeriod: 50 * time.Millisecond,
			Callbacks: ts.callbacks(id),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		c := &cand{le: le, leases: sw, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(c.done); le.Run(ctx) }()
		return c
	}
	cands := []*cand{start("c0"), start("c1"), start("c2")}
	defer func() {
		for _, c := range cands {
			c.cancel()
			<-c.done
		}
	}()
	for round := range 3 {
		var leader *cand
		testutil.Eventually(t, fmt.Sprintf("a leader in round %d", round), func() bool {
			for _, c := range cands {
				if c.le.IsLeader() {
					leader = c
					return true
				}
			}
			return false
		})
		if round%2 == 0 {
			leader.cancel() // killed: no release
		} else {
			leader.leases.down.Store(true) // cut off: must notice and stop by itself
		}
		<-leader.done
		leader.cancel()
		for i, c := range cands {
			if c == leader {
				cands[i] = start(fmt.Sprintf("c%d-r%d", i, round))
			}
		}
	}
	for _, c := range cands {
		c.cancel()
		<-c.done
	}
	cands = nil
	got := ts.get()
	if len(got) < 3 {
		t.Fatalf("got %d terms, want at least 3", len(got))
	}
	sort.Slice(got, func(i, j int) bool { return got[i].start.Before(got[j].start) })
	for i := 1; i < len(got); i++ {
		if got[i-1].end.After(got[i].start) {
			t.Errorf("terms overlap: %s until %v, %s from %v", got[i-1].who, got[i-1].end.Format(time.RFC3339Nano), got[i].who, got[i].start.Format(time.RFC3339Nano))
		}
	}
}
