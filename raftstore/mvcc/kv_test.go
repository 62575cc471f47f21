// This file holds the tests of puts, ranges and deletes: revisions and
// versions, and the options of each request as etcd reads them.

package mvcc

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestRevisionsAndVersions(t *testing.T) {
	s := newTestStore(t)
	if got := s.Rev(); got != 1 {
		t.Fatalf("initial Rev() = %d, want 1", got)
	}
	steps := []struct {
		name    string
		do      func()
		wantRev int64
		key     string
		want    kvSummary
	}{
		{name: "first put creates", do: func() { mustPut(t, s, "a", "1") }, wantRev: 2, key: "a",
			want: kvSummary{Key: "a", Value: "1", Create: 2, Mod: 2, Version: 1}},
		{name: "second put bumps version", do: func() { mustPut(t, s, "a", "2") }, wantRev: 3, key: "a",
			want: kvSummary{Key: "a", Value: "2", Create: 2, Mod: 3, Version: 2}},
		{name: "other key", do: func() { mustPut(t, s, "b", "x") }, wantRev: 4, key: "a",
			want: kvSummary{Key: "a", Value: "2", Create: 2, Mod: 3, Version: 2}},
		{name: "delete", do: func() { mustDelete(t, s, "a", "") }, wantRev: 5, key: "a", want: kvSummary{}},
		{name: "delete nothing keeps revision", do: func() { mustDelete(t, s, "a", "") }, wantRev: 5, key: "a", want: kvSummary{}},
		{name: "recreate resets version", do: func() { mustPut(t, s, "a", "3") }, wantRev: 6, key: "a",
			want: kvSummary{Key: "a", Value: "3", Create: 6, Mod: 6, Version: 1}},
		{name: "txn with two puts is one revision", do: func() {
			if _, err := s.Txn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "4"), opPut("c", "y")}}); err != nil {
				t.Fatal(err)
			}
		}, wantRev: 7, key: "c", want: kvSummary{Key: "c", Value: "y", Create: 7, Mod: 7, Version: 1}},
		{name: "read-only txn keeps revision", do: func() {
			if _, err := s.Txn(&pb.TxnRequest{Success: []*pb.RequestOp{opRange("a", "")}}); err != nil {
				t.Fatal(err)
			}
		}, wantRev: 7, key: "a", want: kvSummary{Key: "a", Value: "4", Create: 6, Mod: 7, Version: 2}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.do()
			if got := s.Rev(); got != st.wantRev {
				t.Errorf("Rev() = %d, want %d", got, st.wantRev)
			}
			if got := summarize(mustGet(t, s, st.key, 0)); got != st.want {
				t.Errorf("get %q = %+v, want %+v", st.key, got, st.want)
			}
		})
	}
	// Past revisions stay readable.
	past := []struct {
		rev  int64
		want kvSummary
	}{
		{1, kvSummary{}},
		{2, kvSummary{Key: "a", Value: "1", Create: 2, Mod: 2, Version: 1}},
		{4, kvSummary{Key: "a", Value: "2", Create: 2, Mod: 3, Version: 2}},
		{5, kvSummary{}},
		{6, kvSummary{Key: "a", Value: "3", Create: 6, Mod: 6, Version: 1}},
	}
	for _, p := range past {
		if got := summarize(mustGet(t, s, "a", p.rev)); got != p.want {
			t.Errorf("get a at %d = %+v, want %+v", p.rev, got, p.want)
		}
	}
	if _, err := s.Range(&pb.RangeRequest{Key: []byte("a"), Revision: 8}); !errors.Is(err, ErrFutureRev) {
		t.Errorf("range at future revision: got %v, want ErrFutureRev", err)
	}
}

func opPut(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

func opDelete(k, end string) *pb.RequestOp {
	req := &pb.DeleteRangeRequest{Key: []byte(k)}
	if end != "" {
		req.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: req}}
}

func opRange(k, end string) *pb.RequestOp {
	req := &pb.RangeRequest{Key: []byte(k)}
	if end != "" {
		req.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: req}}
}

func opTxn(txn *pb.TxnRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: txn}}
}

// rangeFixture: keys a..e written in order a, b, c, d, e (revisions 2..6),
// then b and d rewritten (7, 8), then e deleted (9), then f written (10).
func rangeFixture(t *testing.T) *Store {
	s := newTestStore(t)
	for _, kv := range [][2]string{{"a", "5"}, {"b", "4"}, {"c", "3"}, {"d", "2"}, {"e", "1"}, {"b", "44"}, {"d", "22"}} {
		mustPut(t, s, kv[0], kv[1])
	}
	mustDelete(t, s, "e", "")
	mustPut(t, s, "f", "0")
	return s
}

func TestRangeOptions(t *testing.T) {
	s := rangeFixture(t)
	tests := []struct {
		name      string
		req       *pb.RangeRequest
		wantKeys  []string
		wantCount int64
		wantMore  bool
		wantRev   int64
		wantErr   error
		check     func(t *testing.T, resp *pb.RangeResponse)
	}{
		{name: "single key", req: &pb.RangeRequest{Key: []byte("b")}, wantKeys: []string{"b"}, wantCount: 1, wantRev: 10},
		{name: "missing key", req: &pb.RangeRequest{Key: []byte("zz")}, wantKeys: []string{}, wantCount: 0, wantRev: 10},
		{name: "deleted key", req: &pb.RangeRequest{Key: []byte("e")}, wantKeys: []string{}, wantCount: 0, wantRev: 10},
		{name: "range", req: &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("e")}, wantKeys: []string{"b", "c", "d"}, wantCount: 3, wantRev: 10},
		{name: "prefix", req: &pb.RangeRequest{Key: []byte("c"), RangeEnd: []byte("d")}, wantKeys: []string{"c"}, wantCount: 1, wantRev: 10},
		{name: "from key", req: &pb.RangeRequest{Key: []byte("c"), RangeEnd: []byte{0}}, wantKeys: []string{"c", "d", "f"}, wantCount: 3, wantRev: 10},
		{name: "all keys", req: &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}, wantKeys: []string{"a", "b", "c", "d", "f"}, wantCount: 5, wantRev: 10},
		{name: "empty range", req: &pb.RangeRequest{Key: []byte("d"), RangeEnd: []byte("b")}, wantKeys: []string{}, wantCount: 0, wantRev: 10},
		{name: "limit", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Limit: 2}, wantKeys: []string{"a", "b"}, wantCount: 5, wantMore: true, wantRev: 10},
		{name: "limit exact", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Limit: 5}, wantKeys: []string{"a", "b", "c", "d", "f"}, wantCount: 5, wantRev: 10},
		{name: "count only", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), CountOnly: true}, wantKeys: []string{}, wantCount: 5, wantRev: 10},
		{name: "keys only", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("c"), KeysOnly: true}, wantKeys: []string{"a", "b"}, wantCount: 2, wantRev: 10,
			check: func(t *testing.T, resp *pb.RangeResponse) {
				for _, kv := range resp.Kvs {
					if kv.Value != nil {
						t.Errorf("keys_only: key %q has value %q", kv.Key, kv.Value)
					}
					if kv.ModRevision == 0 {
						t.Errorf("keys_only: key %q lost its revision", kv.Key)
					}
				}
			}},
		{name: "at past revision", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Revision: 6}, wantKeys: []string{"a", "b", "c", "d", "e"}, wantCount: 5, wantRev: 6,
			check: func(t *testing.T, resp *pb.RangeResponse) {
				if got := string(resp.Kvs[1].Value); got != "4" {
					t.Errorf("b at 6 = %q, want 4", got)
				}
			}},
		{name: "future revision", req: &pb.RangeRequest{Key: []byte("a"), Revision: 11}, wantErr: ErrFutureRev},
		{name: "sort key descend", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND}, wantKeys: []string{"f", "d", "c", "b", "a"}, wantCount: 5, wantRev: 10},
		{name: "sort key ascend", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_ASCEND}, wantKeys: []string{"a", "b", "c", "d", "f"}, wantCount: 5, wantRev: 10},
		{name: "sort value ascend", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_VALUE}, wantKeys: []string{"f", "d", "c", "b", "a"}, wantCount: 5, wantRev: 10},
		{name: "sort value with order none ascends", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortTarget: pb.RangeRequest_VALUE}, wantKeys: []string{"f", "d", "c", "b", "a"}, wantCount: 5, wantRev: 10},
		{name: "sort mod descend", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD}, wantKeys: []string{"f", "d", "b", "c", "a"}, wantCount: 5, wantRev: 10},
		{name: "sort create descend", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_CREATE}, wantKeys: []string{"f", "d", "c", "b", "a"}, wantCount: 5, wantRev: 10},
		{name: "sort version descend, ties by key", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_VERSION}, wantKeys: []string{"b", "d", "a", "c", "f"}, wantCount: 5, wantRev: 10},
		{name: "sort with limit", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD, Limit: 2}, wantKeys: []string{"f", "d"}, wantCount: 5, wantMore: true, wantRev: 10},
		{name: "min mod revision", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MinModRevision: 7}, wantKeys: []string{"b", "d", "f"}, wantCount: 5, wantRev: 10},
		{name: "max mod revision", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MaxModRevision: 4}, wantKeys: []string{"a", "c"}, wantCount: 5, wantRev: 10},
		{name: "min create revision", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MinCreateRevision: 4}, wantKeys: []string{"c", "d", "f"}, wantCount: 5, wantRev: 10},
		{name: "max create revision", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MaxCreateRevision: 3}, wantKeys: []string{"a", "b"}, wantCount: 5, wantRev: 10},
		{name: "filters with limit", req: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MinModRevision: 7, Limit: 1}, wantKeys: []string{"b"}, wantCount: 5, wantMore: true, wantRev: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.Range(tt.req)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got error %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.wantKeys, keysOf(resp.Kvs)); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
			if resp.Count != tt.wantCount {
				t.Errorf("got count %d, want %d", resp.Count, tt.wantCount)
			}
			if resp.More != tt.wantMore {
				t.Errorf("got more %v, want %v", resp.More, tt.wantMore)
			}
			if resp.Header.Revision != tt.wantRev {
				t.Errorf("got header revision %d, want %d", resp.Header.Revision, tt.wantRev)
			}
			if tt.check != nil {
				tt.check(t, resp)
			}
		})
	}
}

func TestPutOptions(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, s *Store)
		req     *pb.PutRequest
		wantErr error
		want    kvSummary // the key afterwards
		wantPrv kvSummary // the response's prev_kv
	}{
		{name: "prev_kv of new key is empty", req: &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), PrevKv: true},
			want: kvSummary{Key: "k", Value: "v", Create: 2, Mod: 2, Version: 1}},
		{name: "prev_kv of existing key", setup: func(t *testing.T, s *Store) { mustPut(t, s, "k", "old") },
			req:     &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), PrevKv: true},
			want:    kvSummary{Key: "k", Value: "v", Create: 2, Mod: 3, Version: 2},
			wantPrv: kvSummary{Key: "k", Value: "old", Create: 2, Mod: 2, Version: 1}},
		{name: "ignore_value keeps value", setup: func(t *testing.T, s *Store) { mustPut(t, s, "k", "old") },
			req:  &pb.PutRequest{Key: []byte("k"), IgnoreValue: true, Lease: 7},
			want: kvSummary{Key: "k", Value: "old", Create: 2, Mod: 3, Version: 2, Lease: 7}},
		{name: "ignore_lease keeps lease", setup: func(t *testing.T, s *Store) {
			if _, err := s.Put(&pb.PutRequest{Key: []byte("k"), Value: []byte("old"), Lease: 7}); err != nil {
				t.Fatal(err)
			}
		}, req: &pb.PutRequest{Key: []byte("k"), Value: []byte("new"), IgnoreLease: true},
			want: kvSummary{Key: "k", Value: "new", Create: 2, Mod: 3, Version: 2, Lease: 7}},
		{name: "ignore_value on missing key", req: &pb.PutRequest{Key: []byte("k"), IgnoreValue: true}, wantErr: ErrKeyNotFound},
		{name: "ignore_lease on deleted key", setup: func(t *testing.T, s *Store) { mustPut(t, s, "k", "old"); mustDelete(t, s, "k", "") },
			req: &pb.PutRequest{Key: []byte("k"), IgnoreLease: true}, wantErr: ErrKeyNotFound},
		{name: "ignore_value with value", setup: func(t *testing.T, s *Store) { mustPut(t, s, "k", "old") },
			req: &pb.PutRequest{Key: []byte("k"), Value: []byte("x"), IgnoreValue: true}, wantErr: ErrValueProvided,
			want: kvSummary{Key: "k", Value: "old", Create: 2, Mod: 2, Version: 1}},
		{name: "ignore_lease with lease", setup: func(t *testing.T, s *Store) { mustPut(t, s, "k", "old") },
			req: &pb.PutRequest{Key: []byte("k"), Lease: 7, IgnoreLease: true}, wantErr: ErrLeaseProvided,
			want: kvSummary{Key: "k", Value: "old", Create: 2, Mod: 2, Version: 1}},
		{name: "unknown lease", req: &pb.PutRequest{Key: []byte("k"), Lease: 99}, wantErr: ErrLeaseNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStore(t)
			if err := s.LeaseGrant(7, 60); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, s)
			}
			before := s.Rev()
			resp, err := s.Put(tt.req)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got error %v, want %v", err, tt.wantErr)
			}
			if err != nil && s.Rev() != before {
				t.Errorf("failed put moved the revision from %d to %d", before, s.Rev())
			}
			if got := summarize(mustGet(t, s, "k", 0)); got != tt.want {
				t.Errorf("key afterwards = %+v, want %+v", got, tt.want)
			}
			if err == nil {
				if got := summarize(resp.PrevKv); got != tt.wantPrv {
					t.Errorf("prev_kv = %+v, want %+v", got, tt.wantPrv)
				}
				if resp.Header.Revision != s.Rev() {
					t.Errorf("header revision %d, want %d", resp.Header.Revision, s.Rev())
				}
			}
		})
	}
}

func TestDeleteRange(t *testing.T) {
	tests := []struct {
		name        string
		key, end    string
		prevKV      bool
		wantDeleted int64
		wantPrev    []string
		wantLeft    []string
		wantRev     int64
	}{
		{name: "one key", key: "b", wantDeleted: 1, wantLeft: []string{"a", "c", "d", "f"}, wantRev: 11},
		{name: "missing key does not bump", key: "e", wantDeleted: 0, wantLeft: []string{"a", "b", "c", "d", "f"}, wantRev: 10},
		{name: "range with prev_kv", key: "b", end: "d", prevKV: true, wantDeleted: 2, wantPrev: []string{"b", "c"}, wantLeft: []string{"a", "d", "f"}, wantRev: 11},
		{name: "prefix", key: "d", end: "e", wantDeleted: 1, wantLeft: []string{"a", "b", "c", "f"}, wantRev: 11},
		{name: "from key", key: "c", end: "\x00", wantDeleted: 3, wantLeft: []string{"a", "b"}, wantRev: 11},
		{name: "all", key: "\x00", end: "\x00", wantDeleted: 5, wantLeft: []string{}, wantRev: 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rangeFixture(t)
			req := &pb.DeleteRangeRequest{Key: []byte(tt.key), PrevKv: tt.prevKV}
			if tt.end != "" {
				req.RangeEnd = []byte(tt.end)
			}
			resp, err := s.DeleteRange(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Deleted != tt.wantDeleted {
				t.Errorf("got deleted %d, want %d", resp.Deleted, tt.wantDeleted)
			}
			gotPrev := keysOf(resp.PrevKvs)
			if tt.wantPrev == nil {
				tt.wantPrev = []string{}
			}
			if !slices.Equal(gotPrev, tt.wantPrev) {
				t.Errorf("got prev_kvs %v, want %v", gotPrev, tt.wantPrev)
			}
			left, err := s.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
			if err != nil {
				t.Fatal(err)
			}
			if got := keysOf(left.Kvs); !slices.Equal(got, tt.wantLeft) {
				t.Errorf("got keys left %v, want %v", got, tt.wantLeft)
			}
			if resp.Header.Revision != tt.wantRev || s.Rev() != tt.wantRev {
				t.Errorf("got revision %d (header %d), want %d", s.Rev(), resp.Header.Revision, tt.wantRev)
			}
		})
	}
}
