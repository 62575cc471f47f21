// This file holds the tests of the KV service on an in-process cluster:
// puts, gets, deletes, transactions and compaction, and etcd's own errors
// for bad input.

package raftstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestClusterKV drives puts, gets, deletes, txns and compaction through
// every member of a 3-member cluster: writes on followers are forwarded, and
// every read sees every write acknowledged before it.
func TestClusterKV(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{})
	ctx := ctxT(t)
	f := c.followers()
	w, r := f[0].client, f[1].client

	put, err := w.Put(ctx, "/a/1", "one")
	if err != nil {
		t.Fatalf("put on follower: %v", err)
	}
	if put.Header.Revision < 2 {
		t.Fatalf("put revision: got %d, want >= 2", put.Header.Revision)
	}
	if put.Header.ClusterId == 0 || put.Header.MemberId == 0 || put.Header.RaftTerm == 0 {
		t.Fatalf("put header incomplete: %+v", put.Header)
	}
	// A linearizable read on another follower sees it at once.
	get, err := r.Get(ctx, "/a/1")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "one" {
		t.Fatalf("get /a/1: got %v, want one", get.Kvs)
	}
	if get.Header.Revision < put.Header.Revision {
		t.Fatalf("read revision %d is older than the acknowledged write's %d", get.Header.Revision, put.Header.Revision)
	}
	for i := 2; i <= 5; i++ {
		if _, err := c.members[i%3].client.Put(ctx, fmt.Sprintf("/a/%d", i), fmt.Sprint(i)); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
	last, err := w.Put(ctx, "/b", "x", clientv3.WithPrevKV())
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		member    int
		key       string
		opts      []clientv3.OpOption
		wantKeys  string
		wantCount int64
	}{
		{name: "prefix", member: 0, key: "/a/", opts: []clientv3.OpOption{clientv3.WithPrefix()}, wantKeys: "/a/1,/a/2,/a/3,/a/4,/a/5", wantCount: 5},
		{name: "range", member: 1, key: "/a/2", opts: []clientv3.OpOption{clientv3.WithRange("/a/4")}, wantKeys: "/a/2,/a/3", wantCount: 2},
		{name: "from key", member: 2, key: "/a/5", opts: []clientv3.OpOption{clientv3.WithFromKey()}, wantKeys: "/a/5,/b", wantCount: 2},
		{name: "limit", member: 0, key: "/a/", opts: []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(2)}, wantKeys: "/a/1,/a/2", wantCount: 5},
		{name: "serializable", member: 1, key: "/a/", opts: []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithKeysOnly()}, wantKeys: "/a/1,/a/2,/a/3,/a/4,/a/5", wantCount: 5},
		{name: "sort descending", member: 2, key: "/a/", opts: []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)}, wantKeys: "/a/5,/a/4,/a/3,/a/2,/a/1", wantCount: 5},
		{name: "past revision", member: 0, key: "/a/", opts: []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(put.Header.Revision)}, wantKeys: "/a/1", wantCount: 1},
		{name: "count only", member: 1, key: "/a/", opts: []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}, wantKeys: "", wantCount: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.members[tc.member].client.Get(ctx, tc.key, tc.opts...)
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			var keys []string
			for _, kv := range resp.Kvs {
				keys = append(keys, string(kv.Key))
			}
			if got := strings.Join(keys, ","); got != tc.wantKeys {
				t.Errorf("keys: got %q, want %q", got, tc.wantKeys)
			}
			if resp.Count != tc.wantCount {
				t.Errorf("count: got %d, want %d", resp.Count, tc.wantCount)
			}
		})
	}

	// Txn with compares, on a follower.
	txn, err := r.Txn(ctx).
		If(clientv3.Compare(clientv3.Value("/b"), "=", "x"), clientv3.Compare(clientv3.ModRevision("/b"), "=", last.Header.Revision)).
		Then(clientv3.OpPut("/b", "y"), clientv3.OpGet("/a/1")).
		Else(clientv3.OpPut("/b", "wrong")).
		Commit()
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	if !txn.Succeeded || txn.Header.Revision != last.Header.Revision+1 {
		t.Fatalf("txn: succeeded %v at revision %d, want true at %d", txn.Succeeded, txn.Header.Revision, last.Header.Revision+1)
	}
	del, err := w.Delete(ctx, "/a/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	if del.Deleted != 5 || len(del.PrevKvs) != 5 {
		t.Fatalf("delete: got %d deleted, %d prev kvs, want 5 and 5", del.Deleted, len(del.PrevKvs))
	}

	// Compaction, then reads below it are refused everywhere.
	if _, err := c.members[0].client.Compact(ctx, del.Header.Revision); err != nil {
		t.Fatalf("compact: %v", err)
	}
	for _, m := range c.members {
		_, err := m.client.Get(ctx, "/a/1", clientv3.WithRev(put.Header.Revision))
		if !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("%s: get below the compaction: got %v, want %v", m.cfg.Name, err, rpctypes.ErrCompacted)
		}
	}
}

// TestBadInput checks that requests etcd refuses get etcd's own errors and
// change nothing.
func TestBadInput(t *testing.T) {
	c := newCluster(t, 1, clusterOptions{})
	ctx := ctxT(t)
	cli := c.members[0].client
	before, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	var manyOps []clientv3.Op
	for i := 0; i < 129; i++ {
		manyOps = append(manyOps, clientv3.OpPut(fmt.Sprintf("k%d", i), "v"))
	}
	tests := []struct {
		name string
		do   func() error
		want error
	}{
		{name: "empty key put", do: func() error { _, err := cli.Put(ctx, "", "v"); return err }, want: rpctypes.ErrEmptyKey},
		{name: "empty key get", do: func() error { _, err := cli.Get(ctx, ""); return err }, want: rpctypes.ErrEmptyKey},
		{name: "too large", do: func() error { _, err := cli.Put(ctx, "big", strings.Repeat("x", 1536*1024+1)); return err }, want: rpctypes.ErrRequestTooLarge},
		{name: "too many ops", do: func() error { _, err := cli.Txn(ctx).Then(manyOps...).Commit(); return err }, want: rpctypes.ErrTooManyOps},
		{name: "future revision", do: func() error { _, err := cli.Get(ctx, "x", clientv3.WithRev(1000)); return err }, want: rpctypes.ErrFutureRev},
		{name: "unknown lease", do: func() error { _, err := cli.Put(ctx, "x", "v", clientv3.WithLease(12345)); return err }, want: rpctypes.ErrLeaseNotFound},
		{name: "revoke unknown lease", do: func() error { _, err := cli.Revoke(ctx, 12345); return err }, want: rpctypes.ErrLeaseNotFound},
		{name: "duplicate key in txn", do: func() error {
			_, err := cli.Txn(ctx).Then(clientv3.OpPut("d", "1"), clientv3.OpPut("d", "2")).Commit()
			return err
		}, want: rpctypes.ErrDuplicateKey},
		{name: "compact future", do: func() error { _, err := cli.Compact(ctx, 1000); return err }, want: rpctypes.ErrFutureRev},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
	after, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.Revision != before.Header.Revision {
		t.Errorf("revision after refused requests: got %d, want %d", after.Header.Revision, before.Header.Revision)
	}
}
