// This file holds the test of the store's lease table: grants and their
// refusals, keys attached by puts and moved between leases, and every
// attached key deleted on revoke.

package mvcc

import (
	"errors"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

func TestLeases(t *testing.T) {
	s := newTestStore(t)
	for _, id := range []int64{3, 1, 2} {
		if err := s.LeaseGrant(id, id*10); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.LeaseGrant(1, 5); !errors.Is(err, ErrLeaseExists) {
		t.Errorf("grant of an existing lease: got %v, want ErrLeaseExists", err)
	}
	if err := s.LeaseGrant(0, 5); err == nil {
		t.Error("grant of lease 0: got nil error")
	}
	putLease := func(k string, id int64) {
		t.Helper()
		if _, err := s.Put(&pb.PutRequest{Key: []byte(k), Value: []byte("v"), Lease: id}); err != nil {
			t.Fatal(err)
		}
	}
	putLease("x", 1)
	putLease("y", 1)
	putLease("z", 1)
	putLease("other", 2)
	putLease("z", 2)            // moves z from 1 to 2
	mustPut(t, s, "y", "plain") // detaches y
	keys := func(id int64) string {
		l, ok := s.Lease(id)
		if !ok {
			return "<none>"
		}
		var ks []string
		for _, k := range l.Keys {
			ks = append(ks, string(k))
		}
		return fmt.Sprint(ks)
	}
	if got := keys(1); got != "[x]" {
		t.Errorf("lease 1 keys %s, want [x]", got)
	}
	if got := keys(2); got != "[other z]" {
		t.Errorf("lease 2 keys %s, want [other z]", got)
	}
	var ids []int64
	for _, l := range s.Leases() {
		ids = append(ids, l.ID)
	}
	if fmt.Sprint(ids) != "[1 2 3]" {
		t.Errorf("Leases() IDs %v, want [1 2 3]", ids)
	}

	ws := s.NewWatchStream()
	defer ws.Close()
	if _, err := ws.Watch(0, []byte{0}, []byte{0}, 0, WatchOptions{}); err != nil {
		t.Fatal(err)
	}
	before := s.Rev()
	rev, err := s.LeaseRevoke(2)
	if err != nil {
		t.Fatal(err)
	}
	if rev != before+1 || s.Rev() != before+1 {
		t.Errorf("revoke with two keys: revision %d (returned %d), want %d", s.Rev(), rev, before+1)
	}
	for _, k := range []string{"other", "z"} {
		if kv := mustGet(t, s, k, 0); kv != nil {
			t.Errorf("%s survived the revoke of its lease", k)
		}
	}
	if kv := mustGet(t, s, "x", 0); kv == nil {
		t.Error("x was deleted by the revoke of another lease")
	}
	resp := <-ws.Chan()
	if len(resp.Events) != 2 || resp.Revision != rev || resp.Events[0].Type != mvccpb.DELETE || string(resp.Events[0].Kv.Key) != "other" || string(resp.Events[1].Kv.Key) != "z" {
		t.Errorf("revoke watch response %+v, want two deletes at %d in one response", resp, rev)
	}
	if _, ok := s.Lease(2); ok {
		t.Error("lease 2 still exists after revoke")
	}
	if _, err := s.LeaseRevoke(2); !errors.Is(err, ErrLeaseNotFound) {
		t.Errorf("second revoke: got %v, want ErrLeaseNotFound", err)
	}
	before = s.Rev()
	if rev, err := s.LeaseRevoke(3); err != nil || rev != before {
		t.Errorf("revoke of a lease without keys: rev %d err %v, want %d and no error", rev, err, before)
	}
	// A deleted key leaves its lease.
	mustDelete(t, s, "x", "")
	if got := keys(1); got != "[]" {
		t.Errorf("lease 1 keys after deleting x: %s, want []", got)
	}
}
