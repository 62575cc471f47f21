// This file holds the tests of transactions: compares, ops seeing their own
// writes, nesting, duplicate keys, and a failing op that changes nothing.

package mvcc

import (
	"errors"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func cmpVersion(k string, r pb.Compare_CompareResult, v int64) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_VERSION, Result: r, TargetUnion: &pb.Compare_Version{Version: v}}
}

func cmpCreate(k string, r pb.Compare_CompareResult, v int64) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_CREATE, Result: r, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: v}}
}

func cmpMod(k string, r pb.Compare_CompareResult, v int64) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_MOD, Result: r, TargetUnion: &pb.Compare_ModRevision{ModRevision: v}}
}

func cmpValue(k string, r pb.Compare_CompareResult, v string) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_VALUE, Result: r, TargetUnion: &pb.Compare_Value{Value: []byte(v)}}
}

func cmpLease(k string, r pb.Compare_CompareResult, v int64) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_LEASE, Result: r, TargetUnion: &pb.Compare_Lease{Lease: v}}
}

// txnFixture: "k" = "v2" with create 2, mod 3, version 2, lease 7; "k2" =
// "b" at 4; "k3" = "c" at 5.
func txnFixture(t *testing.T) *Store {
	s := newTestStore(t)
	if err := s.LeaseGrant(7, 60); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "k", "v1")
	if _, err := s.Put(&pb.PutRequest{Key: []byte("k"), Value: []byte("v2"), Lease: 7}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "k2", "b")
	mustPut(t, s, "k3", "c")
	return s
}

func TestTxnCompare(t *testing.T) {
	const (
		eq = pb.Compare_EQUAL
		ne = pb.Compare_NOT_EQUAL
		gt = pb.Compare_GREATER
		lt = pb.Compare_LESS
	)
	tests := []struct {
		name string
		cmp  *pb.Compare
		want bool
	}{
		{"version equal", cmpVersion("k", eq, 2), true},
		{"version equal false", cmpVersion("k", eq, 1), false},
		{"version not equal", cmpVersion("k", ne, 1), true},
		{"version greater", cmpVersion("k", gt, 1), true},
		{"version greater false", cmpVersion("k", gt, 2), false},
		{"version less", cmpVersion("k", lt, 3), true},
		{"version less false", cmpVersion("k", lt, 2), false},
		{"create equal", cmpCreate("k", eq, 2), true},
		{"create not equal false", cmpCreate("k", ne, 2), false},
		{"create greater", cmpCreate("k", gt, 1), true},
		{"create less", cmpCreate("k", lt, 3), true},
		{"mod equal", cmpMod("k", eq, 3), true},
		{"mod not equal", cmpMod("k", ne, 2), true},
		{"mod greater false", cmpMod("k", gt, 3), false},
		{"mod less", cmpMod("k", lt, 4), true},
		{"value equal", cmpValue("k", eq, "v2"), true},
		{"value not equal", cmpValue("k", ne, "v1"), true},
		{"value greater", cmpValue("k", gt, "v1"), true},
		{"value less", cmpValue("k", lt, "v3"), true},
		{"value less false", cmpValue("k", lt, "v2"), false},
		{"lease equal", cmpLease("k", eq, 7), true},
		{"lease not equal", cmpLease("k", ne, 8), true},
		{"lease greater", cmpLease("k", gt, 6), true},
		{"lease less false", cmpLease("k", lt, 7), false},
		{"missing key has version 0", cmpVersion("nope", eq, 0), true},
		{"missing key has create 0 (create-if-absent)", cmpCreate("nope", eq, 0), true},
		{"missing key has mod 0", cmpMod("nope", lt, 1), true},
		{"missing key has lease 0", cmpLease("nope", eq, 0), true},
		{"value compare on missing key is false", cmpValue("nope", ne, "x"), false},
		{"range: every key must hold", &pb.Compare{Key: []byte("k"), RangeEnd: []byte("k4"), Target: pb.Compare_MOD, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_ModRevision{ModRevision: 2}}, true},
		{"range: one key fails", &pb.Compare{Key: []byte("k"), RangeEnd: []byte("k4"), Target: pb.Compare_MOD, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_ModRevision{ModRevision: 3}}, false},
		{"range: from key", &pb.Compare{Key: []byte("k2"), RangeEnd: []byte{0}, Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 1}}, true},
		{"range: empty range compares as missing", &pb.Compare{Key: []byte("x"), RangeEnd: []byte("y"), Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 0}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := txnFixture(t)
			resp, err := s.Txn(&pb.TxnRequest{
				Compare: []*pb.Compare{tt.cmp},
				Success: []*pb.RequestOp{opPut("then", "1")},
				Failure: []*pb.RequestOp{opPut("else", "1")},
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Succeeded != tt.want {
				t.Errorf("got succeeded %v, want %v", resp.Succeeded, tt.want)
			}
			ran := "else"
			if tt.want {
				ran = "then"
			}
			if mustGet(t, s, ran, 0) == nil {
				t.Errorf("the %s branch did not run", ran)
			}
			if s.Rev() != 6 || resp.Header.Revision != 6 {
				t.Errorf("got revision %d (header %d), want 6", s.Rev(), resp.Header.Revision)
			}
		})
	}
}

func TestTxnMultipleComparesAllMustHold(t *testing.T) {
	s := txnFixture(t)
	resp, err := s.Txn(&pb.TxnRequest{Compare: []*pb.Compare{
		cmpVersion("k", pb.Compare_EQUAL, 2), cmpValue("k2", pb.Compare_EQUAL, "nope"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Error("got succeeded with one failing compare, want failed")
	}
}

func TestTxnOpsAndOwnWrites(t *testing.T) {
	s := txnFixture(t)
	resp, err := s.Txn(&pb.TxnRequest{
		Compare: []*pb.Compare{cmpValue("k", pb.Compare_EQUAL, "v2")},
		Success: []*pb.RequestOp{
			opPut("new", "n1"),
			opRange("k", "o"), // sees "new" written just before
			opDelete("k2", ""),
			opRange("k2", ""), // sees the delete
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k3"), Value: []byte("c2"), PrevKv: true}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded || len(resp.Responses) != 5 {
		t.Fatalf("got succeeded %v with %d responses, want true with 5", resp.Succeeded, len(resp.Responses))
	}
	if got, want := keysOf(resp.Responses[1].GetResponseRange().Kvs), []string{"k", "k2", "k3", "new"}; !slices.Equal(got, want) {
		t.Errorf("range inside txn got %v, want %v", got, want)
	}
	if got := resp.Responses[2].GetResponseDeleteRange().Deleted; got != 1 {
		t.Errorf("got deleted %d, want 1", got)
	}
	if got := len(resp.Responses[3].GetResponseRange().Kvs); got != 0 {
		t.Errorf("range after delete in the same txn got %d keys, want 0", got)
	}
	if got := summarize(resp.Responses[4].GetResponsePut().PrevKv); got.Value != "c" {
		t.Errorf("prev_kv inside txn = %+v, want value c", got)
	}
	if s.Rev() != 6 {
		t.Fatalf("got revision %d, want 6", s.Rev())
	}
	for _, op := range resp.Responses {
		if h := headerRev(op); h != 6 {
			t.Errorf("inner header revision %d, want 6", h)
		}
	}
	// Every op of the txn has the same mod revision.
	for _, k := range []string{"new", "k3"} {
		if got := mustGet(t, s, k, 0).ModRevision; got != 6 {
			t.Errorf("%s mod revision %d, want 6", k, got)
		}
	}
}

func TestTxnRangeSeesOwnPut(t *testing.T) {
	s := newTestStore(t)
	resp, err := s.Txn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "1"), opRange("a", "")}})
	if err != nil {
		t.Fatal(err)
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) != 1 || string(kvs[0].Value) != "1" || kvs[0].ModRevision != 2 {
		t.Errorf("range after put in one txn = %v, want a=1 at 2", kvs)
	}
}

func headerRev(op *pb.ResponseOp) int64 {
	switch r := op.Response.(type) {
	case *pb.ResponseOp_ResponseRange:
		return r.ResponseRange.Header.Revision
	case *pb.ResponseOp_ResponsePut:
		return r.ResponsePut.Header.Revision
	case *pb.ResponseOp_ResponseDeleteRange:
		return r.ResponseDeleteRange.Header.Revision
	case *pb.ResponseOp_ResponseTxn:
		return r.ResponseTxn.Header.Revision
	}
	return -1
}

func TestTxnNested(t *testing.T) {
	s := txnFixture(t)
	resp, err := s.Txn(&pb.TxnRequest{
		Compare: []*pb.Compare{cmpVersion("k", pb.Compare_EQUAL, 2)},
		Success: []*pb.RequestOp{
			opPut("outer", "1"),
			opTxn(&pb.TxnRequest{
				// Compares see the state before the txn, as etcd: "outer" does not exist yet.
				Compare: []*pb.Compare{cmpCreate("outer", pb.Compare_EQUAL, 0)},
				Success: []*pb.RequestOp{opPut("inner-then", "1"), opTxn(&pb.TxnRequest{
					Compare: []*pb.Compare{cmpValue("k2", pb.Compare_EQUAL, "nope")},
					Success: []*pb.RequestOp{opPut("deep-then", "1")},
					Failure: []*pb.RequestOp{opPut("deep-else", "1"), opRange("outer", "")},
				})},
				Failure: []*pb.RequestOp{opPut("inner-else", "1")},
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	inner := resp.Responses[1].GetResponseTxn()
	if inner == nil || !inner.Succeeded {
		t.Fatalf("inner txn = %v, want succeeded", inner)
	}
	deep := inner.Responses[1].GetResponseTxn()
	if deep == nil || deep.Succeeded {
		t.Fatalf("deep txn = %v, want failed", deep)
	}
	if kvs := deep.Responses[1].GetResponseRange().Kvs; len(kvs) != 1 {
		t.Errorf("deep range of outer got %d keys, want 1 (the txn's own write)", len(kvs))
	}
	for _, k := range []string{"outer", "inner-then", "deep-else"} {
		if kv := mustGet(t, s, k, 0); kv == nil || kv.ModRevision != 6 {
			t.Errorf("%s = %v, want written at 6", k, kv)
		}
	}
	for _, k := range []string{"inner-else", "deep-then"} {
		if kv := mustGet(t, s, k, 0); kv != nil {
			t.Errorf("%s = %v, want absent", k, kv)
		}
	}
	if s.Rev() != 6 {
		t.Errorf("got revision %d, want 6", s.Rev())
	}
	if deep.Header.Revision != 6 {
		t.Errorf("deep header revision %d, want 6", deep.Header.Revision)
	}
}

func TestTxnDuplicateKeys(t *testing.T) {
	tests := []struct {
		name    string
		req     *pb.TxnRequest
		wantErr error
	}{
		{name: "same key put twice", req: &pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "1"), opPut("a", "2")}}, wantErr: ErrDuplicateKey},
		{name: "same key twice in failure branch", req: &pb.TxnRequest{Failure: []*pb.RequestOp{opPut("a", "1"), opPut("a", "2")}}, wantErr: ErrDuplicateKey},
		{name: "put and delete of the key", req: &pb.TxnRequest{Success: []*pb.RequestOp{opDelete("a", ""), opPut("a", "2")}}, wantErr: ErrDuplicateKey},
		{name: "put inside deleted range", req: &pb.TxnRequest{Success: []*pb.RequestOp{opPut("b", "2"), opDelete("a", "c")}}, wantErr: ErrDuplicateKey},
		{name: "put inside deleted from-key range", req: &pb.TxnRequest{Success: []*pb.RequestOp{opPut("zz", "2"), opDelete("a", "\x00")}}, wantErr: ErrDuplicateKey},
		{name: "put outside deleted range", req: &pb.TxnRequest{Success: []*pb.RequestOp{opPut("c", "2"), opDelete("a", "c")}}},
		{name: "two overlapping deletes", req: &pb.TxnRequest{Success: []*pb.RequestOp{opDelete("a", "c"), opDelete("b", "d")}}},
		{name: "put in each branch", req: &pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "1")}, Failure: []*pb.RequestOp{opPut("a", "2")}}},
		{name: "nested put of a key put outside", req: &pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "1"),
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "2")}})}}, wantErr: ErrDuplicateKey},
		{name: "nested then and else may share a key", req: &pb.TxnRequest{Success: []*pb.RequestOp{
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "1")}, Failure: []*pb.RequestOp{opPut("a", "2")}})}}},
		{name: "two nested txns put one key", req: &pb.TxnRequest{Success: []*pb.RequestOp{
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "1")}}),
			opTxn(&pb.TxnRequest{Failure: []*pb.RequestOp{opPut("a", "2")}})}}, wantErr: ErrDuplicateKey},
		{name: "nested delete covers outer put", req: &pb.TxnRequest{Success: []*pb.RequestOp{opPut("b", "1"),
			opTxn(&pb.TxnRequest{Failure: []*pb.RequestOp{opDelete("a", "c")}})}}, wantErr: ErrDuplicateKey},
		{name: "outer delete covers nested put", req: &pb.TxnRequest{Success: []*pb.RequestOp{opDelete("b", ""),
			opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("b", "1")}})}}, wantErr: ErrDuplicateKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStore(t)
			mustPut(t, s, "b", "x")
			before, hash := s.Rev(), mustHash(t, s, 0)
			_, err := s.Txn(tt.req)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got error %v, want %v", err, tt.wantErr)
			}
			if err != nil && (s.Rev() != before || mustHash(t, s, 0) != hash) {
				t.Errorf("a rejected txn changed the store")
			}
		})
	}
}

func TestTxnFailingOpChangesNothing(t *testing.T) {
	tests := []struct {
		name    string
		ops     []*pb.RequestOp
		wantErr error
	}{
		{name: "unknown lease after a put", ops: []*pb.RequestOp{opPut("a", "1"),
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), Lease: 42}}}}, wantErr: ErrLeaseNotFound},
		{name: "ignore_value on a missing key after a delete", ops: []*pb.RequestOp{opDelete("k", ""),
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("missing"), IgnoreValue: true}}}}, wantErr: ErrKeyNotFound},
		{name: "range at a future revision", ops: []*pb.RequestOp{opPut("a", "1"),
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 100}}}}, wantErr: ErrFutureRev},
		{name: "nested failure", ops: []*pb.RequestOp{opPut("a", "1"), opTxn(&pb.TxnRequest{
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), Lease: 42}}}},
			Compare: []*pb.Compare{cmpVersion("k", pb.Compare_EQUAL, 99)}})}, wantErr: ErrLeaseNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := txnFixture(t)
			before, hash := s.Rev(), mustHash(t, s, 0)
			_, err := s.Txn(&pb.TxnRequest{Success: tt.ops})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got error %v, want %v", err, tt.wantErr)
			}
			if s.Rev() != before || mustHash(t, s, 0) != hash {
				t.Errorf("a failed txn changed the store")
			}
		})
	}
}
