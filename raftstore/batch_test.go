// This file holds the tests of batched writes: many concurrent writes
// through every member each get their own answer, and bytes the store cannot
// apply are refused before they reach the log.

package raftstore_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kplane/kplane/raftstore/fsm"
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
		rev     int64 // 0: no new revision
		write   bool  // the request changed the store
		unknown bool  // "leader changed" or a timeout: it may have
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
				if !errors.Is(err, rpctypes.ErrRequestTooLarge) && !outcomeUnknown(err) {
					err = fmt.Errorf("put over the limit: got %v, want %v", err, rpctypes.ErrRequestTooLarge)
				} else if errors.Is(err, rpctypes.ErrRequestTooLarge) {
					err = nil
				}
				errs[i] = err
			case 4: // a lease that does not exist
				_, err := m.Put(ctx, key, "leased", clientv3.WithLease(0x7777))
				switch {
				case outcomeUnknown(err):
				case !errors.Is(err, rpctypes.ErrLeaseNotFound):
					err = fmt.Errorf("put on a missing lease: got %v, want %v", err, rpctypes.ErrLeaseNotFound)
				default:
					err = nil
				}
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	unknown := 0
	for i, err := range errs {
		switch {
		case err == nil:
		case outcomeUnknown(err):
			// An election on a busy machine: the request may or may
			// not have been applied, as for any single request.
			outcomes[i].unknown = true
			unknown++
		default:
			t.Errorf("request %d: %v", i, err)
		}
	}

	// Every write got a revision of its own, and with those of unknown
	// outcome, they are the revisions after the start.
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
	end, err := cli.Get(ctx, "/k/000")
	if err != nil {
		t.Fatal(err)
	}
	final := end.Header.Revision
	if final < before+int64(writes) || final > before+int64(writes+unknown) {
		t.Errorf("revision after %d acknowledged writes and %d of unknown outcome: %d, want %d to %d",
			writes, unknown, final, before+int64(writes), before+int64(writes+unknown))
	}
	for rev := range seen {
		if rev <= before || rev > final {
			t.Errorf("a write answered revision %d, outside %d-%d", rev, before+1, final)
		}
	}
	if unknown == 0 && len(seen) != int(final-before) {
		t.Errorf("%d writes answered %d distinct revisions, want %d", writes, len(seen), final-before)
	}

	// Every member ends at the same revision with the same state.
	var want string
	for _, m := range c.members {
		ep := m.client.Endpoints()[0]
		resp, err := m.client.Get(ctx, "/k/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision != final {
			t.Errorf("member %s: revision %d, want %d", m.cfg.Name, resp.Header.Revision, final)
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
	t.Logf("%d writes (and %d of unknown outcome) in %d log entries", writes, unknown, c.waitLeader().store.Raft().AppliedIndex()-appliedBefore)
}

// outcomeUnknown reports the errors after which a write may or may not
// have been applied.
func outcomeUnknown(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaderChanged) || errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrTimeout)
}

// TestForwardedGarbageRefused: the peer service is served on the client
// URL, so anyone who can reach it can forward a proposal. The leader must
// refuse what the store cannot apply — undecodable bytes in a batch, a
// request of no known kind — rather than put it in the log, where every
// member would stop on it.
func TestForwardedGarbageRefused(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{})
	ctx := ctxT(t)
	l := c.waitLeader()
	cc := l.client.ActiveConnection()
	good, err := (&pb.InternalRaftRequest{ID: 1<<40 | 1, Put: &pb.PutRequest{Key: []byte("ok"), Value: []byte("v")}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	empty, err := (&pb.InternalRaftRequest{ID: 1<<40 | 2}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		method string
		in     proto.Message
	}{
		{"batch with undecodable bytes", "/kplane.raftstore.v1.Peer/ProposeBatch", wrapperspb.Bytes(fsm.AppendBatch(nil, good, []byte{0xff, 0xff, 0xff}))},
		{"batch with a request of no kind", "/kplane.raftstore.v1.Peer/ProposeBatch", wrapperspb.Bytes(fsm.AppendBatch(nil, good, empty))},
		{"truncated batch", "/kplane.raftstore.v1.Peer/ProposeBatch", wrapperspb.Bytes(fsm.AppendBatch(nil, good, good)[:len(good)])},
		{"not a batch", "/kplane.raftstore.v1.Peer/ProposeBatch", wrapperspb.Bytes(good)},
		{"single request of no kind", "/kplane.raftstore.v1.Peer/Propose", protoadapt.MessageV2Of(&pb.InternalRaftRequest{ID: 1<<40 | 3})},
	} {
		err := cc.Invoke(ctx, tc.method, tc.in, new(wrapperspb.UInt64Value))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", tc.name, err)
		}
	}
	// Nothing of it reached the log: every member still applies writes.
	for _, m := range c.members {
		putRetry(ctx, t, m.client, "/after/"+m.cfg.Name, "v")
	}
	resp, err := c.members[0].client.Get(ctx, "ok")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("a refused batch's good request was applied: %v", resp.Kvs)
	}
}
