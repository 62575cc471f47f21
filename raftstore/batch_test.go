package raftstore_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestConcurrentMixedWrites sends many different writes at once through
// every member, so that the leader gathers them into batch entries and the
// followers forward them in batches: puts with prev_kv, a txn whose compare
// fails, deletes, puts over the size limit and puts on a missing lease. Each
// caller must get its own answer, as if its request had been alone: its own
// revision, its own prev_kv, its own error; and every member must end with
// the same state.
func TestConcurrentMixedWrites(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{maxRequestBytes: 4096})
	ctx := ctxT(t)
	cli := c.members[0].client
	const n = 200
	for i := 0; i < n; i++ {
		putRetry(ctx, t, cli, fmt.Sprintf("/k/%03d", i), fmt.Sprintf("old-%d", i))
	}
	start, err := cli.Get(ctx, "/k/000")
	if err != nil {
		t.Fatal(err)
	}
	before := start.Header.Revision
	appliedBefore := c.waitLeader().store.Raft().AppliedIndex()

	type outcome struct {
		rev   int64 // 0: no new revision
		write bool  // the request changed the store
	}
	outcomes := make([]outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.members[i%3].client
			key := fmt.Sprintf("/k/%03d", i)
			switch i % 5 {
			case 0: // put, with the previous value
				resp, err := m.Put(ctx, key, fmt.Sprintf("new-%d", i), clientv3.WithPrevKV())
				if err == nil && (resp.PrevKv == nil || string(resp.PrevKv.Value) != fmt.Sprintf("old-%d", i)) {
					err = fmt.Errorf("prev_kv: got %v, want old-%d", resp.PrevKv, i)
				}
				if err == nil {
					outcomes[i] = outcome{rev: resp.Header.Revision, write: true}
				}
				errs[i] = err
			case 1: // a txn whose compare fails: its failure branch reads
				resp, err := m.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 1)).
					Then(clientv3.OpPut(key, "won")).Else(clientv3.OpGet(key)).Commit()
				if err == nil && (resp.Succeeded || len(resp.Responses) != 1 ||
					string(resp.Responses[0].GetResponseRange().Kvs[0].Value) != fmt.Sprintf("old-%d", i)) {
					err = fmt.Errorf("txn: got succeeded=%v %v, want the failure branch's read of old-%d", resp.Succeeded, resp.Responses, i)
				}
				errs[i] = err
			case 2: // delete
				resp, err := m.Delete(ctx, key)
				if err == nil && resp.Deleted != 1 {
					err = fmt.Errorf("delete: deleted %d, want 1", resp.Deleted)
				}
				if err == nil {
					outcomes[i] = outcome{rev: resp.Header.Revision, write: true}
				}
				errs[i] = err
			case 3: // over the size limit
				_, err := m.Put(ctx, key, strings.Repeat("x", 5000))
				if !errors.Is(err, rpctypes.ErrRequestTooLarge) {
					err = fmt.Errorf("put over the limit: got %v, want %v", err, rpctypes.ErrRequestTooLarge)
				} else {
					err = nil
				}
				errs[i] = err
			case 4: // a lease that does not exist
				_, err := m.Put(ctx, key, "leased", clientv3.WithLease(0x7777))
				if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
					err = fmt.Errorf("put on a missing lease: got %v, want %v", err, rpctypes.ErrLeaseNotFound)
				} else {
					err = nil
				}
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}

	// Every write got a revision of its own, and together they are the
	// revisions after the start, without gaps.
	seen := map[int64]int{}
	writes := 0
	for i, o := range outcomes {
		if !o.write {
			continue
		}
		writes++
		if j, dup := seen[o.rev]; dup {
			t.Errorf("requests %d and %d both answered revision %d", j, i, o.rev)
		}
		seen[o.rev] = i
	}
	for rev := before + 1; rev <= before+int64(writes); rev++ {
		if _, ok := seen[rev]; !ok {
			t.Errorf("no write answered revision %d (revisions %d-%d)", rev, before+1, before+int64(writes))
		}
	}

	// Every member ends at the same revision with the same state.
	var want string
	for _, m := range c.members {
		ep := m.client.Endpoints()[0]
		resp, err := m.client.Get(ctx, "/k/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision != before+int64(writes) {
			t.Errorf("member %s: revision %d, want %d", m.cfg.Name, resp.Header.Revision, before+int64(writes))
		}
		h, err := m.client.HashKV(ctx, ep, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprintf("hash %d at %d, %d keys", h.Hash, h.Header.Revision, len(resp.Kvs))
		if want == "" {
			want = got
		} else if got != want {
			t.Errorf("member %s: %s, want %s", m.cfg.Name, got, want)
		}
	}
	t.Logf("%d writes in %d log entries", writes, c.waitLeader().store.Raft().AppliedIndex()-appliedBefore)
}
