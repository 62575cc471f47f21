// This file tests the compaction protocol with two replicas' compactors on
// one store (etcd, or the kplane store with KPLANE_TEST_STORE=kplane).

package compaction

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kplane/kplane/services/apiserver/internal/storetest"
)

func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: storetest.Start(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func newCompactor(t *testing.T, cli *clientv3.Client, clk *clocktesting.FakeClock) *Compactor {
	t.Helper()
	cfg := Config{KV: cli, Interval: time.Minute}
	if clk != nil {
		cfg.Clock = clk
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// write puts a key and returns the store's revision after it.
func write(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Put(ctxT(t), "/registry/configmaps/default/x", time.Now().String())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// compactedAt reports the store's compaction point, found as the lowest
// revision of [1, rev] that a read is still allowed at.
func compactedAt(t *testing.T, cli *clientv3.Client, rev int64) int64 {
	t.Helper()
	lo, hi := int64(1), rev
	for lo < hi {
		mid := (lo + hi) / 2
		_, err := cli.Get(ctxT(t), "/", clientv3.WithRev(mid))
		switch {
		case err == nil:
			hi = mid
		case errors.Is(err, rpctypes.ErrCompacted):
			lo = mid + 1
		default:
			t.Fatalf("get at %d: %v", mid, err)
		}
	}
	if lo == 1 {
		return 0
	}
	return lo
}

// revKey returns RevKey's version and value.
func revKey(t *testing.T, cli *clientv3.Client) (version int64, value string) {
	t.Helper()
	resp, err := cli.Get(ctxT(t), RevKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, ""
	}
	return resp.Kvs[0].Version, string(resp.Kvs[0].Value)
}

func TestTwoReplicasTakeTurns(t *testing.T) {
	cli := newClient(t)
	ctx := ctxT(t)
	a, b := newCompactor(t, cli, nil), newCompactor(t, cli, nil)
	round := func(name string, c *Compactor) int64 {
		t.Helper()
		got, err := c.round(ctx)
		if err != nil {
			t.Fatalf("%s: round: %v", name, err)
		}
		return got
	}

	// Interval 1: a claims the first round; there is no revision of an
	// interval ago yet, so nothing is compacted. b, a moment later, finds
	// the round taken.
	write(t, cli)
	if got := round("a", a); got != 0 {
		t.Fatalf("a's first round compacted at %d, want nothing", got)
	}
	if v, val := revKey(t, cli); v != 1 || val != "0" {
		t.Fatalf("%s after the first round: version %d value %q, want 1 \"0\"", RevKey, v, val)
	}
	aSaw := a.rev
	if got := round("b", b); got != 0 {
		t.Fatalf("b compacted at %d in a round a claimed", got)
	}
	bSaw := b.rev

	// Interval 2: a claims again and compacts to what it saw in interval
	// 1; b's claim fails.
	write(t, cli)
	rev := write(t, cli)
	if got := round("a", a); got != aSaw {
		t.Fatalf("a's second round compacted at %d, want %d (its revision of an interval ago)", got, aSaw)
	}
	if got := compactedAt(t, cli, rev); got != aSaw {
		t.Fatalf("store compacted at %d, want %d", got, aSaw)
	}
	if v, val := revKey(t, cli); v != 2 || val != strconv.FormatInt(aSaw, 10) {
		t.Fatalf("%s: version %d value %q, want 2 %q", RevKey, v, val, fmt.Sprint(aSaw))
	}
	if got := round("b", b); got != 0 {
		t.Fatalf("b compacted at %d in a round a claimed", got)
	}
	bSaw = b.rev

	// Interval 3: a has stopped; b's claim now succeeds and compacts to
	// what b saw an interval ago.
	rev = write(t, cli)
	if got := round("b", b); got != bSaw {
		t.Fatalf("b's round compacted at %d, want %d", got, bSaw)
	}
	if got := compactedAt(t, cli, rev); got != bSaw {
		t.Fatalf("store compacted at %d, want %d", got, bSaw)
	}

	// a comes back: its claim fails, and it takes up the count.
	if got := round("a", a); got != 0 {
		t.Fatalf("a compacted at %d in a round b claimed", got)
	}
	if a.version != 3 {
		t.Fatalf("a's round count %d, want 3", a.version)
	}

	// Someone deletes the key: the count starts again from 0 rather than
	// the replicas failing their claims for ever.
	if _, err := cli.Delete(ctx, RevKey); err != nil {
		t.Fatal(err)
	}
	if got := round("b", b); got != 0 {
		t.Fatalf("b compacted at %d with the key gone", got)
	}
	if b.version != 0 {
		t.Fatalf("b's round count with the key gone: %d, want 0", b.version)
	}
	bSaw = b.rev
	rev = write(t, cli)
	if got := round("b", b); got != bSaw {
		t.Fatalf("b's first round after the reset compacted at %d, want %d", got, bSaw)
	}
	if got := compactedAt(t, cli, rev); got != bSaw {
		t.Fatalf("store compacted at %d, want %d", got, bSaw)
	}
	if v, _ := revKey(t, cli); v != 1 {
		t.Fatalf("%s's version after the reset: %d, want 1", RevKey, v)
	}
}

// waitWaiting waits (bounded) until Run waits on clk again, i.e. it
// finished what the last step of the clock set off.
func waitWaiting(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	for range 5000 {
		if clk.HasWaiters() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the compactor never waited on its clock")
}

func TestRunCompactsEveryOtherIntervalAndStops(t *testing.T) {
	cli := newClient(t)
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	c := newCompactor(t, cli, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()

	waitWaiting(t, clk)
	first := write(t, cli)
	clk.Step(time.Minute) // claims, records the revision
	waitWaiting(t, clk)
	rev := write(t, cli)
	clk.Step(time.Minute) // compacts to it
	waitWaiting(t, clk)
	if got := compactedAt(t, cli, rev); got < first || got >= rev {
		t.Errorf("store compacted at %d, want the revision of the first round, in [%d, %d)", got, first, rev)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	cli := &clientv3.Client{}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "no client", cfg: Config{Interval: time.Minute}, want: "a store client is required"},
		{name: "zero interval", cfg: Config{KV: cli}, want: "interval 0s: must be positive"},
		{name: "negative interval", cfg: Config{KV: cli, Interval: -time.Second}, want: "interval -1s: must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || err.Error() != "compaction: "+tt.want {
				t.Errorf("got %v, want compaction: %s", err, tt.want)
			}
		})
	}
}
