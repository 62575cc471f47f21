// This file checks that compaction gives back what it drops: the memory of
// compacted revisions, and their place in snapshots.

package mvcc

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"weak"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// revisionCount is the number of key-value revisions the key index holds.
func revisionCount(s *Store) int {
	n := 0
	s.tree.Ascend(func(ki keyIndex) bool {
		n += len(ki.revs)
		return true
	})
	return n
}

// compactedStore returns a store where "hot" was written 3000 times (more
// than two history chunks), "gone" was written and deleted, and "cold"
// written once, all before compactAt, and a weak pointer to every value of
// "hot" below it but the last.
func compactedStore(t *testing.T) (s *Store, compactAt int64, dropped []weak.Pointer[mvccpb.KeyValue]) {
	t.Helper()
	s = newTestStore(t)
	mustPut(t, s, "cold", "v")
	mustPut(t, s, "gone", "v")
	mustDelete(t, s, "gone", "")
	for i := range 3000 {
		mustPut(t, s, "hot", fmt.Sprint(i))
	}
	compactAt = s.Rev() - 10
	ki, _ := s.tree.Get(keyIndex{key: []byte("hot")})
	for _, e := range ki.revs {
		// The last value below compactAt stays: it is the prev_kv of the
		// event at compactAt, which watches from compactAt are sent.
		if e.rev() < compactAt-1 {
			dropped = append(dropped, weak.Make(e.kv))
		}
	}
	if _, err := s.Compact(compactAt); err != nil {
		t.Fatal(err)
	}
	return s, compactAt, dropped
}

func TestCompactionReleasesMemory(t *testing.T) {
	s, compactAt, dropped := compactedStore(t)
	// hot: the revision below compactAt (the prev_kv of the event at
	// it), compactAt and the 10 revisions after; cold: its only value;
	// gone: nothing.
	if got, want := revisionCount(s), 13; got != want {
		t.Errorf("key index holds %d revisions after compaction, want %d", got, want)
	}
	if _, ok := s.tree.Get(keyIndex{key: []byte("gone")}); ok {
		t.Error("a key deleted below the compaction point is still in the key index")
	}
	s.mu.RLock()
	histLen, oldest := s.hist.len(), s.hist.at(0).rev
	s.mu.RUnlock()
	if want := int(s.Rev() - compactAt + 1); histLen != want || oldest != compactAt {
		t.Errorf("history holds %d records from revision %d, want %d from %d", histLen, oldest, want, compactAt)
	}
	runtime.GC()
	kept := 0
	for _, p := range dropped {
		if p.Value() != nil {
			kept++
		}
	}
	if kept != 0 {
		t.Errorf("%d of %d compacted values are still reachable after a GC", kept, len(dropped))
	}
}

func TestSnapshotAfterCompactionHoldsNoCompactedRevisions(t *testing.T) {
	s, compactAt, _ := compactedStore(t)
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	st, err := readSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	st.tree.Ascend(func(ki keyIndex) bool {
		below := 0
		for _, e := range ki.revs {
			n++
			if e.rev() < compactAt {
				below++
			}
		}
		// At most the key's last value below the compaction point.
		if below > 1 {
			t.Errorf("snapshot holds %d revisions of %s below the compaction point %d, want at most 1", below, ki.key, compactAt)
		}
		return true
	})
	if want := revisionCount(s); n != want {
		t.Errorf("snapshot holds %d revisions, want the store's %d", n, want)
	}
	if st.compactRev != compactAt {
		t.Errorf("snapshot's compaction point %d, want %d", st.compactRev, compactAt)
	}
	// A member restored from it answers as the compacted one does.
	r := newTestStore(t)
	if err := r.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Range(&pb.RangeRequest{Key: []byte("hot"), Revision: compactAt - 1}); !errors.Is(err, ErrCompacted) {
		t.Errorf("restored: range below the compaction point: got %v, want ErrCompacted", err)
	}
	if got := mustGet(t, r, "cold", compactAt); got == nil || string(got.Value) != "v" {
		t.Errorf("restored: cold at %d = %v, want v", compactAt, got)
	}
}
