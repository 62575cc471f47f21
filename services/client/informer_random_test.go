// This file holds the randomized informer test: random writes, broken
// watches and compactions, after which the cache and the replayed
// notifications equal the server's state.

package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
)

// TestInformerRandomHistory applies random creates, updates and deletes
// while watches are randomly broken and the history randomly compacted
// (forcing resumes and re-lists), then checks that the cache equals the
// server's state, and that replaying the handlers' notifications onto an
// empty map gives that same state (no lost or phantom notification).
func TestInformerRandomHistory(t *testing.T) {
	noLeaks(t)
	srv, conn := startLeaseServer(t)
	c := Must[*coordv1.Lease](conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	replay := map[string]string{} // key → holder, from notifications only
	inf := NewInformer(ListWatch(c, "", "", "", 3), InformerOptions[*coordv1.Lease]{MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	inf.AddEventHandler(Handler[*coordv1.Lease]{
		OnAdd: func(o *coordv1.Lease) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := replay[Key(o)]; ok {
				t.Errorf("add of %s, which the handlers already hold", Key(o))
			}
			replay[Key(o)] = o.GetSpec().GetHolderIdentity()
		},
		OnUpdate: func(_, o *coordv1.Lease) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := replay[Key(o)]; !ok {
				t.Errorf("update of %s, which the handlers never saw added", Key(o))
			}
			replay[Key(o)] = o.GetSpec().GetHolderIdentity()
		},
		OnDelete: func(o *coordv1.Lease) {
			mu.Lock()
			defer mu.Unlock()
			delete(replay, Key(o))
		},
	})
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same history every run
	for i := range 300 {
		name := fmt.Sprintf("l%d", rng.IntN(20))
		switch op := rng.IntN(10); {
		case op < 4:
			_, _ = c.Create(ctx, lease("ns", name, fmt.Sprint("h", i)))
		case op < 7:
			if cur, err := c.Get(ctx, "ns", name); err == nil {
				cur.Spec.HolderIdentity = proto.String(fmt.Sprint("h", i))
				_, _ = c.Update(ctx, cur)
			}
		case op < 9:
			_ = c.Delete(ctx, "ns", name, DeleteOptions{})
		default:
			if rng.IntN(2) == 0 {
				srv.compact()
			}
			srv.breakWatches()
		}
	}
	want, _, err := c.List(ctx, "", ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantHolder := map[string]string{}
	for _, o := range want {
		wantHolder[Key(o)] = o.GetSpec().GetHolderIdentity()
	}
	same := func(m map[string]string) bool {
		if len(m) != len(wantHolder) {
			return false
		}
		for k, v := range wantHolder {
			if m[k] != v {
				return false
			}
		}
		return true
	}
	testutil.Eventually(t, "the cache and the notifications to match the server", func() bool {
		cache := map[string]string{}
		for _, o := range inf.Store().List() {
			cache[Key(o)] = o.GetSpec().GetHolderIdentity()
		}
		mu.Lock()
		defer mu.Unlock()
		return same(cache) && same(replay)
	})
	t.Logf("%d objects; %d re-lists", len(wantHolder), inf.Relists())
}
