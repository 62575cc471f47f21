// This file holds the test that a member paused past the election timeout,
// leader or follower, never serves a stale read once it resumes.

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
)

func memberClient(t *testing.T, m *localcluster.Member) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{strings.TrimPrefix(m.ClientURL, "http://")},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestNoStaleReadAfterPause pauses a member with SIGSTOP past the election
// timeout while the others write a newer value, resumes it and reads at once
// through it. Paused as the leader, it resumes believing it still leads (a
// deposed leader); paused as a follower, it resumes behind. Either way a
// default read must return the newer value.
func TestNoStaleReadAfterPause(t *testing.T) {
	testutil.SkipShort(t, "runs a store of `kplane store` processes of the built binary")
	c := startCluster(t)
	cli := newClient(t, c)
	for _, role := range []string{"leader", "follower"} {
		t.Run(role, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := cli.Put(ctx, "/stale", "old-"+role); err != nil {
				t.Fatal(err)
			}
			leader := leaderOf(t, c, cli)
			target := leader
			if role == "follower" {
				for _, m := range c.Members {
					if m != leader {
						target = m
						break
					}
				}
			}
			tcli := memberClient(t, target)
			// Make sure the target has the old value before it is paused.
			if resp, err := tcli.Get(ctx, "/stale"); err != nil || string(resp.Kvs[0].Value) != "old-"+role {
				t.Fatalf("before the pause: got %v (%v)", resp, err)
			}
			if err := target.Pause(); err != nil {
				t.Fatalf("%s: %v", target.Name, err)
			}
			resumed := false
			defer func() {
				if !resumed {
					_ = target.Resume()
				}
			}()
			// The others go on (electing a new leader if needed) and write.
			var others []string
			for _, m := range c.Members {
				if m != target {
					others = append(others, strings.TrimPrefix(m.ClientURL, "http://"))
				}
			}
			ocli, err := clientv3.New(clientv3.Config{Endpoints: others, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer ocli.Close()
			deadline := time.Now().Add(30 * time.Second)
			for {
				wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := ocli.Put(wctx, "/stale", "new-"+role)
				wcancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("write without the paused member: %v", err)
				}
			}
			if err := target.Resume(); err != nil {
				t.Fatalf("%s: %v", target.Name, err)
			}
			resumed = true
			resp, err := tcli.Get(ctx, "/stale")
			if err != nil {
				t.Fatalf("read through the resumed %s: %v", role, err)
			}
			if got := string(resp.Kvs[0].Value); got != "new-"+role {
				t.Fatalf("read through the resumed %s: got %q, want %q (a stale read)", role, got, "new-"+role)
			}
		})
	}
}
