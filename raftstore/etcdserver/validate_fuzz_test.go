// This file holds the fuzz tests of request validation: whatever passes the
// handlers' checks is applied or answered without a panic.

package etcdserver

import (
	"testing"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kplane/kplane/raftstore/fsm"
	"github.com/kplane/kplane/raftstore/mvcc"
)

// FuzzValidateApply: whatever a client sends, a request that passes the
// handler's checks must apply without panicking — a panic in Apply would
// stop every member at the same log entry.
func FuzzValidateApply(f *testing.F) {
	seeds := []*pb.TxnRequest{
		{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}}}}},
		{Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, TargetUnion: &pb.Compare_Value{Value: []byte("1")}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte{0}}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 5}}}}},
		{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), Lease: 7}}}},
		}}}}},
		{Success: []*pb.RequestOp{{}}},
	}
	for _, s := range seeds {
		b, err := s.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	srv := &Server{cfg: Config{MaxRequestBytes: DefaultMaxRequestBytes, MaxTxnOps: DefaultMaxTxnOps}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var txn pb.TxnRequest
		if err := txn.Unmarshal(data); err != nil {
			return
		}
		if srv.checkTxn(&txn) != nil {
			return
		}
		store := mvcc.New(mvcc.Config{})
		defer store.Close()
		m := fsm.New(store, nil)
		for i, req := range []*pb.InternalRaftRequest{
			{ID: 1, Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}},
			{ID: 2, LeaseGrant: &pb.LeaseGrantRequest{ID: 7, TTL: 10}},
			{ID: 3, Txn: &txn},
		} {
			b, err := req.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			m.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: b})
		}
	})
}

// FuzzValidateRange: a range that passes the handler's checks is answered
// (or refused with an error) without panicking, on a store with history and
// a compaction.
func FuzzValidateRange(f *testing.F) {
	for _, s := range []*pb.RangeRequest{
		{Key: []byte("a")},
		{Key: []byte("a"), RangeEnd: []byte{0}, Limit: 1, SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD},
		{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 2, CountOnly: true, MinModRevision: 2, MaxCreateRevision: 3},
	} {
		b, err := s.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	srv := &Server{cfg: Config{MaxRequestBytes: DefaultMaxRequestBytes, MaxTxnOps: DefaultMaxTxnOps}}
	store := mvcc.New(mvcc.Config{})
	f.Cleanup(store.Close)
	for _, k := range []string{"a", "b", "a", "c", "b"} {
		if _, err := store.Put(&pb.PutRequest{Key: []byte(k), Value: []byte(k)}); err != nil {
			f.Fatal(err)
		}
	}
	if _, err := store.Compact(3); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.RangeRequest
		if err := req.Unmarshal(data); err != nil {
			return
		}
		if srv.checkRange(&req) != nil {
			return
		}
		_, _ = store.Range(&req)
	})
}
