// This file holds the tests of compaction and of HashKV depending on the
// content only.

package mvcc

import (
	"errors"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestCompaction(t *testing.T) {
	s := newTestStore(t)
	mustPut(t, s, "a", "1")   // 2
	mustPut(t, s, "a", "2")   // 3
	mustPut(t, s, "b", "1")   // 4
	mustDelete(t, s, "b", "") // 5
	mustPut(t, s, "c", "1")   // 6
	mustPut(t, s, "a", "3")   // 7
	mustDelete(t, s, "c", "") // 8
	mustPut(t, s, "d", "1")   // 9
	hashBefore := map[int64]uint32{}
	for rev := int64(6); rev <= 9; rev++ {
		hashBefore[rev] = s.hashKV(rev, 6)
	}
	if _, err := s.Compact(6); err != nil {
		t.Fatal(err)
	}
	if got := s.CompactRev(); got != 6 {
		t.Fatalf("CompactRev() = %d, want 6", got)
	}
	if got := s.Rev(); got != 9 {
		t.Fatalf("compaction moved the revision to %d", got)
	}
	t.Run("reads below the compaction point fail", func(t *testing.T) {
		for _, rev := range []int64{2, 5} {
			if _, err := s.Range(&pb.RangeRequest{Key: []byte("a"), Revision: rev}); !errors.Is(err, ErrCompacted) {
				t.Errorf("range at %d: got %v, want ErrCompacted", rev, err)
			}
		}
		if _, _, _, err := s.HashKV(5); !errors.Is(err, ErrCompacted) {
			t.Errorf("HashKV(5): got %v, want ErrCompacted", err)
		}
	})
	t.Run("values at and above the compaction point are kept", func(t *testing.T) {
		tests := []struct {
			key  string
			rev  int64
			want kvSummary
		}{
			{"a", 6, kvSummary{Key: "a", Value: "2", Create: 2, Mod: 3, Version: 2}},
			{"b", 6, kvSummary{}},
			{"c", 6, kvSummary{Key: "c", Value: "1", Create: 6, Mod: 6, Version: 1}},
			{"a", 7, kvSummary{Key: "a", Value: "3", Create: 2, Mod: 7, Version: 3}},
			{"c", 8, kvSummary{}},
			{"a", 0, kvSummary{Key: "a", Value: "3", Create: 2, Mod: 7, Version: 3}},
			{"d", 0, kvSummary{Key: "d", Value: "1", Create: 9, Mod: 9, Version: 1}},
		}
		for _, tt := range tests {
			if got := summarize(mustGet(t, s, tt.key, tt.rev)); got != tt.want {
				t.Errorf("%s at %d = %+v, want %+v", tt.key, tt.rev, got, tt.want)
			}
		}
	})
	t.Run("hash above the compaction point is unchanged", func(t *testing.T) {
		for rev, want := range hashBefore {
			if got := mustHash(t, s, rev); got != want {
				t.Errorf("HashKV(%d) = %x after compaction, want %x as before", rev, got, want)
			}
		}
	})
	t.Run("compaction errors", func(t *testing.T) {
		tests := []struct {
			name    string
			rev     int64
			wantErr error
		}{
			{name: "same revision", rev: 6, wantErr: ErrCompacted},
			{name: "older revision", rev: 3, wantErr: ErrCompacted},
			{name: "future revision", rev: 10, wantErr: ErrFutureRev},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if _, err := s.Compact(tt.rev); !errors.Is(err, tt.wantErr) {
					t.Errorf("Compact(%d): got %v, want %v", tt.rev, err, tt.wantErr)
				}
			})
		}
	})
	t.Run("compact to the current revision keeps every live key", func(t *testing.T) {
		if _, err := s.Compact(9); err != nil {
			t.Fatal(err)
		}
		resp, err := s.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(keysOf(resp.Kvs)); got != "[a d]" {
			t.Errorf("keys after compaction at the current revision: %s, want [a d]", got)
		}
		if got := s.tree.Len(); got != 2 {
			t.Errorf("key index holds %d keys, want 2 (tombstoned keys dropped)", got)
		}
	})
}

func TestHashKVDependsOnContent(t *testing.T) {
	a, b := newTestStore(t), newTestStore(t)
	mustPut(t, a, "k", "1")
	mustPut(t, b, "k", "2")
	if mustHash(t, a, 0) == mustHash(t, b, 0) {
		t.Error("different values hash the same")
	}
	if _, _, _, err := a.HashKV(3); !errors.Is(err, ErrFutureRev) {
		t.Errorf("HashKV(future): got %v, want ErrFutureRev", err)
	}
	h1 := mustHash(t, a, 2)
	mustPut(t, a, "k", "3")
	if got := mustHash(t, a, 2); got != h1 {
		t.Errorf("HashKV(2) changed after a later write: %x, want %x", got, h1)
	}
}
