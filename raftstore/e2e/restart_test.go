// This file holds the crash test: members killed with SIGKILL while clients
// write, then restarted, keep every acknowledged write.

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
)

// acked records the writes the cluster acknowledged.
type acked struct {
	mu     sync.Mutex
	values map[string]string
	maxRev int64
}

// writeWhile has a few clients write distinct keys until stop is closed,
// recording every acknowledged write. Failed writes (their outcome is
// unknown) are not recorded.
func writeWhile(cli *clientv3.Client, prefix string, a *acked, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key, val := fmt.Sprintf("%s/%d/%05d", prefix, w, i), fmt.Sprint(i)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				resp, err := cli.Put(ctx, key, val)
				cancel()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				a.mu.Lock()
				a.values[key] = val
				a.maxRev = max(a.maxRev, resp.Header.Revision)
				a.mu.Unlock()
			}
		}()
	}
	return &wg
}

func leaderOf(t *testing.T, c *localcluster.Cluster, cli *clientv3.Client) *localcluster.Member {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range c.Members {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, m.ClientURL[len("http://"):])
			cancel()
			if err == nil && st.Leader == st.Header.MemberId {
				return m
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no leader within 20s")
	return nil
}

// TestKill9 kills the leader with SIGKILL while clients write, restarts it,
// then kills all three members at once while clients write and restarts
// them: every acknowledged write is there afterwards, on every member, and
// the revision did not go back.
func TestKill9(t *testing.T) {
	testutil.SkipShort(t, "runs a store of `kplane store` processes of the built binary")
	c := startCluster(t)
	cli := newClient(t, c)
	a := &acked{values: map[string]string{}}

	stop := make(chan struct{})
	wg := writeWhile(cli, "/kill", a, stop)
	time.Sleep(time.Second)
	leader := leaderOf(t, c, cli)
	leader.Kill()
	time.Sleep(2 * time.Second)
	if err := c.StartMember(leader); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	for _, m := range c.Members {
		m.Kill()
	}
	close(stop)
	wg.Wait()
	a.mu.Lock()
	n, maxRev := len(a.values), a.maxRev
	a.mu.Unlock()
	if n == 0 {
		t.Fatal("no write was acknowledged")
	}
	for _, m := range c.Members {
		if err := c.StartMember(m); err != nil {
			t.Fatal(err)
		}
	}
	// The first serializable answer of each restarted member is not older
	// than what was acknowledged before the crash.
	for _, m := range c.Members {
		mc, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL[len("http://"):]}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := mc.Get(ctx, "/kill/", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithCountOnly())
			cancel()
			if err == nil {
				if resp.Header.Revision < maxRev {
					t.Errorf("%s: first serializable read after restart at revision %d, below the acknowledged %d", m.Name, resp.Header.Revision, maxRev)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no serializable read within 30s of restart: %v", m.Name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		mc.Close()
	}
	waitReady(t, c)

	for _, m := range c.Members {
		mc, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL[len("http://"):]}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := mc.Get(ctx, "/kill/", clientv3.WithPrefix())
		cancel()
		mc.Close()
		if err != nil {
			t.Fatalf("%s: get: %v", m.Name, err)
		}
		if resp.Header.Revision < maxRev {
			t.Errorf("%s: revision %d after restart, below the acknowledged %d", m.Name, resp.Header.Revision, maxRev)
		}
		got := map[string]string{}
		for _, kv := range resp.Kvs {
			got[string(kv.Key)] = string(kv.Value)
		}
		missing := 0
		for k, v := range a.values {
			if got[k] != v {
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("%s: %d of %d acknowledged writes missing after kill -9 and restart", m.Name, missing, n)
		}
	}
	t.Logf("%d acknowledged writes survived, revision >= %d", n, maxRev)
}
