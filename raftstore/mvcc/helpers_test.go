// This file holds the helpers the store's tests share: a new store, puts,
// deletes, gets and hashes that fail the test on error.

package mvcc

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

func newTestStore(t testing.TB) *Store {
	t.Helper()
	s := New(Config{})
	t.Cleanup(s.Close)
	return s
}

func mustPut(t testing.TB, s *Store, key, value string) *pb.PutResponse {
	t.Helper()
	resp, err := s.Put(&pb.PutRequest{Key: []byte(key), Value: []byte(value)})
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return resp
}

func mustDelete(t testing.TB, s *Store, key, end string) *pb.DeleteRangeResponse {
	t.Helper()
	req := &pb.DeleteRangeRequest{Key: []byte(key)}
	if end != "" {
		req.RangeEnd = []byte(end)
	}
	resp, err := s.DeleteRange(req)
	if err != nil {
		t.Fatalf("DeleteRange(%q, %q): %v", key, end, err)
	}
	return resp
}

func mustGet(t testing.TB, s *Store, key string, rev int64) *mvccpb.KeyValue {
	t.Helper()
	resp, err := s.Range(&pb.RangeRequest{Key: []byte(key), Revision: rev})
	if err != nil {
		t.Fatalf("Range(%q, rev %d): %v", key, rev, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

// kvSummary is the comparable part of a KeyValue.
type kvSummary struct {
	Key                  string
	Value                string
	Create, Mod, Version int64
	Lease                int64
}

func summarize(kv *mvccpb.KeyValue) kvSummary {
	if kv == nil {
		return kvSummary{}
	}
	return kvSummary{Key: string(kv.Key), Value: string(kv.Value), Create: kv.CreateRevision, Mod: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
}

func keysOf(kvs []*mvccpb.KeyValue) []string {
	out := []string{}
	for _, kv := range kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

func mustHash(t testing.TB, s *Store, rev int64) uint32 {
	t.Helper()
	h, _, _, err := s.HashKV(rev)
	if err != nil {
		t.Fatalf("HashKV(%d): %v", rev, err)
	}
	return h
}
