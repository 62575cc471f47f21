// This file holds the tests of ReadSnapshotInfo.

package mvcc

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestReadSnapshotInfo(t *testing.T) {
	s := newTestStore(t)
	mustPut(t, s, "a", "1")
	mustPut(t, s, "a", "2")
	mustPut(t, s, "b", "1")
	mustDelete(t, s, "b", "")
	mustPut(t, s, "c", "1")
	if err := s.LeaseGrant(7, 60); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Compact(2); err != nil {
		t.Fatal(err)
	}
	hash, _, _, err := s.HashKV(0)
	if err != nil {
		t.Fatal(err)
	}

	got, err := ReadSnapshotInfo(bytes.NewReader(snapshotBytes(t, s)))
	if err != nil {
		t.Fatalf("ReadSnapshotInfo: %v", err)
	}
	// Compacting at 2 keeps what revision 2 reads, so "a" keeps both its
	// revisions (2, 3), "b" its put and tombstone (4, 5), "c" one (6).
	want := SnapshotInfo{Revision: 6, CompactRevision: 2, Hash: hash, Keys: 2, Revisions: 5, Leases: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("info (-want +got):\n%s", diff)
	}
}

func TestReadSnapshotInfoCorrupt(t *testing.T) {
	s := newTestStore(t)
	mustPut(t, s, "a", "1")
	if _, err := s.Put(&pb.PutRequest{Key: []byte("b"), Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	data := snapshotBytes(t, s)
	data[len(data)/2] ^= 0xff
	if _, err := ReadSnapshotInfo(bytes.NewReader(data)); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Errorf("got %v, want an error wrapping ErrSnapshotCorrupt", err)
	}
}
