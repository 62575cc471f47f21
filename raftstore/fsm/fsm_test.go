// This file holds the tests of the FSM: the same log gives the same state
// however it is batched, proposals get their own results, and unknown or
// malformed entries panic.

package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"

	"github.com/kplane/kplane/raftstore/mvcc"
)

// randomLog returns n command entries of mixed requests, from a fixed seed.
func randomLog(t *testing.T, seed uint64, first uint64, n int) []*raft.Log {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed))
	var logs []*raft.Log
	for i := 0; i < n; i++ {
		key := []byte(fmt.Sprintf("k%02d", r.IntN(20)))
		var req pb.InternalRaftRequest
		switch r.IntN(6) {
		case 0, 1:
			req.Put = &pb.PutRequest{Key: key, Value: []byte(fmt.Sprint(i))}
		case 2:
			req.DeleteRange = &pb.DeleteRangeRequest{Key: key}
		case 3:
			req.Txn = &pb.TxnRequest{
				Compare: []*pb.Compare{{Key: key, Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 1}}},
				Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: []byte("txn")}}}},
				Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: key}}}},
			}
		case 4:
			id := int64(r.IntN(3) + 1)
			if r.IntN(2) == 0 {
				req.LeaseGrant = &pb.LeaseGrantRequest{ID: id, TTL: 10}
			} else {
				req.LeaseRevoke = &pb.LeaseRevokeRequest{ID: id}
			}
		case 5:
			req.ClusterMemberAttrSet = &membershippb.ClusterMemberAttrSetRequest{
				Member_ID: uint64(r.IntN(3) + 1), MemberAttributes: &membershippb.Attributes{Name: fmt.Sprint(i)},
			}
		}
		req.ID = uint64(i + 1)
		data, err := req.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: first + uint64(i), Type: raft.LogCommand, Data: data})
	}
	return logs
}

func hashOf(t *testing.T, f *FSM) string {
	t.Helper()
	h, rev, compact, err := f.Store().HashKV(0)
	if err != nil {
		t.Fatalf("hash: %v", err)
	}
	return fmt.Sprintf("hash %d rev %d compact %d leases %d members %v", h, rev, compact, len(f.Store().Leases()), f.Members())
}

func newFSM(t *testing.T) *FSM {
	s := mvcc.New(mvcc.Config{})
	t.Cleanup(s.Close)
	return New(s, nil)
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { return nil }
func (m *memSink) Close() error  { return nil }

// TestApplyDeterminism applies the same log to FSMs in different batch
// sizes, and through a snapshot and restore half-way: all end in the same
// state, with the same applied index.
func TestApplyDeterminism(t *testing.T) {
	logs := randomLog(t, 7, 1, 400)
	tests := []struct {
		name  string
		batch int
	}{
		{name: "one at a time", batch: 1},
		{name: "batches of 7", batch: 7},
		{name: "one batch", batch: len(logs)},
	}
	var want string
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFSM(t)
			for i := 0; i < len(logs); i += tc.batch {
				f.ApplyBatch(logs[i:min(i+tc.batch, len(logs))])
			}
			if f.Applied() != 400 {
				t.Errorf("applied: got %d, want 400", f.Applied())
			}
			got := hashOf(t, f)
			if want == "" {
				want = got
			} else if got != want {
				t.Errorf("state: got %s, want %s", got, want)
			}
		})
	}

	t.Run("snapshot and restore half-way", func(t *testing.T) {
		a := newFSM(t)
		a.ApplyBatch(logs[:200])
		snap, err := a.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		a.ApplyBatch(logs[200:]) // writes after the snapshot was taken must not leak into it
		var sink memSink
		if err := snap.Persist(&sink); err != nil {
			t.Fatalf("persist: %v", err)
		}
		b := newFSM(t)
		if err := b.Restore(io.NopCloser(&sink)); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if b.Applied() != 200 {
			t.Errorf("applied after restore: got %d, want 200", b.Applied())
		}
		b.ApplyBatch(logs[200:])
		if got := hashOf(t, b); got != want {
			t.Errorf("restored then applied: got %s, want %s", got, want)
		}
	})
}

// TestWaiters checks that a registered proposal gets its own result,
// including the store's error, and that other entries only advance the
// applied index.
func TestWaiters(t *testing.T) {
	f := newFSM(t)
	entry := func(idx uint64, req *pb.InternalRaftRequest) *raft.Log {
		data, err := req.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return &raft.Log{Index: idx, Type: raft.LogCommand, Data: data}
	}
	ok := f.Register(1)
	bad := f.Register(2)
	f.ApplyBatch([]*raft.Log{
		entry(5, &pb.InternalRaftRequest{ID: 1, Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}}),
		entry(6, &pb.InternalRaftRequest{ID: 2, Put: &pb.PutRequest{Key: []byte("b"), Lease: 99}}),
		{Index: 7, Type: raft.LogConfiguration},
	})
	res := <-ok
	if res.Err != nil || res.Index != 5 || res.Resp.(*pb.PutResponse).Header.Revision != 2 {
		t.Errorf("put result: got %+v, want revision 2 at index 5", res)
	}
	if res := <-bad; !errors.Is(res.Err, mvcc.ErrLeaseNotFound) {
		t.Errorf("put with an unknown lease: got %v, want %v", res.Err, mvcc.ErrLeaseNotFound)
	}
	if f.Applied() != 7 {
		t.Errorf("applied: got %d, want 7", f.Applied())
	}
}

func TestUnknownEntryPanics(t *testing.T) {
	f := newFSM(t)
	defer func() {
		if recover() == nil {
			t.Error("applying an empty request did not panic")
		}
	}()
	data, _ := (&pb.InternalRaftRequest{ID: 1}).Marshal()
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data})
}

// TestBatchEntries applies the same requests once as one entry each and
// once gathered into batch envelopes of varying sizes (mixed with single
// entries, as the leader's batcher writes them): every request gets the same
// result (revision, prev_kv, txn outcome, store error) and the stores end
// identical.
func TestBatchEntries(t *testing.T) {
	logs := randomLog(t, 11, 1, 300)
	// A put on a lease that does not exist fails in the store; a txn whose
	// compare fails takes its failure branch; a delete of nothing changes
	// nothing. Each must leave its neighbours in the batch unaffected.
	extra := []*pb.InternalRaftRequest{
		{Put: &pb.PutRequest{Key: []byte("k01"), Value: []byte("v"), PrevKv: true}},
		{Put: &pb.PutRequest{Key: []byte("k02"), Lease: 999}},
		{Txn: &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("k01"), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: 1}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k01"), Value: []byte("won")}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k01")}}}},
		}},
		{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("nothing-here")}},
		{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), PrevKv: true}},
		{Put: &pb.PutRequest{Key: []byte("k03"), Value: []byte("after")}},
	}
	for _, req := range extra {
		req.ID = uint64(len(logs) + 1)
		data, err := req.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogCommand, Data: data})
	}

	// results applies entries to a fresh FSM with a waiter for every
	// request, and returns each request's result by ID.
	results := func(entries []*raft.Log) (map[uint64]Result, *FSM) {
		f := newFSM(t)
		chans := map[uint64]<-chan Result{}
		for id := uint64(1); id <= uint64(len(logs)); id++ {
			chans[id] = f.Register(id)
		}
		f.ApplyBatch(entries)
		out := map[uint64]Result{}
		for id, ch := range chans {
			select {
			case res := <-ch:
				res.Index = 0 // entries differ; results must not
				out[id] = res
			default:
				t.Fatalf("request %d: no result", id)
			}
		}
		return out, f
	}
	want, single := results(logs)

	r := rand.New(rand.NewPCG(3, 3))
	var batched []*raft.Log
	for i := 0; i < len(logs); {
		n := 1 + r.IntN(20)
		if i == 0 {
			n = 1 // a single-request entry first, as from before batching
		}
		if i == len(logs)-len(extra) {
			n = len(extra)
		}
		n = min(n, len(logs)-i)
		var data []byte
		if n == 1 {
			data = logs[i].Data
		} else {
			reqs := make([][]byte, n)
			for j := range reqs {
				reqs[j] = logs[i+j].Data
			}
			data = AppendBatch(nil, reqs...)
			if !IsBatch(data) {
				t.Fatal("AppendBatch did not produce a batch envelope")
			}
		}
		batched = append(batched, &raft.Log{Index: uint64(len(batched) + 1), Type: raft.LogCommand, Data: data})
		i += n
		if i < len(logs)-len(extra) && i+20 > len(logs)-len(extra) {
			// Stop short of the mixed requests, which go as one batch.
			rest := len(logs) - len(extra) - i
			reqs := make([][]byte, rest)
			for j := range reqs {
				reqs[j] = logs[i+j].Data
			}
			batched = append(batched, &raft.Log{Index: uint64(len(batched) + 1), Type: raft.LogCommand, Data: AppendBatch(nil, reqs...)})
			i += rest
		}
	}
	got, batchedFSM := results(batched)
	for id, w := range want {
		g := got[id]
		if !reflect.DeepEqual(g, w) {
			t.Errorf("request %d: batched result %+v, want %+v", id, g, w)
		}
	}
	if g, w := hashOf(t, batchedFSM), hashOf(t, single); g != w {
		t.Errorf("state: batched %s, single %s", g, w)
	}
	if batchedFSM.Applied() != uint64(len(batched)) {
		t.Errorf("applied: got %d, want %d", batchedFSM.Applied(), len(batched))
	}
	// The failing put inside the batch failed alone.
	if res := got[uint64(len(logs)-len(extra)+2)]; !errors.Is(res.Err, mvcc.ErrLeaseNotFound) {
		t.Errorf("put with an unknown lease in a batch: got %v, want %v", res.Err, mvcc.ErrLeaseNotFound)
	}
	if res := got[uint64(len(logs))]; res.Err != nil || res.Resp.(*pb.PutResponse).Header.Revision != single.Store().Rev() {
		t.Errorf("last put of the batch: got %+v, want revision %d", res, single.Store().Rev())
	}
}

func TestMalformedBatchPanics(t *testing.T) {
	f := newFSM(t)
	defer func() {
		if recover() == nil {
			t.Error("applying a truncated batch did not panic")
		}
	}()
	data, _ := (&pb.InternalRaftRequest{ID: 1, Put: &pb.PutRequest{Key: []byte("a")}}).Marshal()
	b := AppendBatch(nil, data, data)
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: b[:len(b)-1]})
}
