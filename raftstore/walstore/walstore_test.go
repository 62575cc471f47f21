// This file holds the tests of the WAL log store: appends across reopen,
// truncation at the tail and compaction at the head, an emptied log, and a
// torn tail repaired.

package walstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func entries(first, last, term uint64) []*raft.Log {
	var out []*raft.Log
	for i := first; i <= last; i++ {
		out = append(out, &raft.Log{
			Index:      i,
			Term:       term,
			Type:       raft.LogCommand,
			Data:       []byte(fmt.Sprintf("v%d-t%d", i, term)),
			AppendedAt: time.Unix(1700000000, int64(i)),
		})
	}
	return out
}

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// check asserts the store holds exactly [first, last], entry i carrying
// the term terms(i).
func check(t *testing.T, s *Store, first, last uint64, terms func(uint64) uint64) {
	t.Helper()
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	if f != first || l != last {
		t.Fatalf("range [%d, %d], want [%d, %d]", f, l, first, last)
	}
	for i := first; i <= last && last > 0; i++ {
		var got raft.Log
		if err := s.GetLog(i, &got); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		want := fmt.Sprintf("v%d-t%d", i, terms(i))
		if got.Index != i || got.Term != terms(i) || string(got.Data) != want || got.Type != raft.LogCommand ||
			!got.AppendedAt.Equal(time.Unix(1700000000, int64(i))) {
			t.Fatalf("entry %d = %+v, want term %d data %q", i, got, terms(i), want)
		}
	}
	var l0 raft.Log
	if first > 0 {
		if err := s.GetLog(first-1, &l0); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("get %d below the first: %v", first-1, err)
		}
	}
	if err := s.GetLog(last+1, &l0); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("get %d past the last: %v", last+1, err)
	}
}

func term(t uint64) func(uint64) uint64 { return func(uint64) uint64 { return t } }

func TestAppendReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	s := open(t, dir)
	check(t, s, 0, 0, term(1))
	if err := s.StoreLogs(entries(1, 100, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(entries(101, 101, 1)[0]); err != nil {
		t.Fatal(err)
	}
	check(t, s, 1, 101, term(1))
	if err := s.StoreLogs(entries(103, 104, 1)); err == nil {
		t.Fatal("an append leaving a gap was accepted")
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	check(t, s, 1, 101, term(1))
}

// A follower's conflicting tail: deleted, then replaced by fewer entries of
// a newer term. The replacement must win after a restart, and the deleted
// entries past it must not come back.
func TestTailTruncationSurvivesRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	s := open(t, dir)
	if err := s.StoreLogs(entries(1, 50, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(41, 50); err != nil {
		t.Fatal(err)
	}
	check(t, s, 1, 40, term(1))
	if err := s.StoreLogs(entries(41, 45, 2)); err != nil {
		t.Fatal(err)
	}
	terms := func(i uint64) uint64 {
		if i > 40 {
			return 2
		}
		return 1
	}
	check(t, s, 1, 45, terms)
	s.Close()
	s = open(t, dir)
	defer s.Close()
	check(t, s, 1, 45, terms)
}

// Compaction after a snapshot, then a restart: the head stays gone, and the
// segments wholly below it are removed from disk.
func TestHeadCompactionReleasesSegments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	s := open(t, dir)
	big := func(first, last uint64) []*raft.Log {
		ls := entries(first, last, 1)
		for _, l := range ls {
			l.Data = append(l.Data, make([]byte, 1<<20)...) // 1 MiB: a 64 MiB segment fills after ~64 entries
		}
		return ls
	}
	for i := uint64(1); i <= 200; i += 10 {
		if err := s.StoreLogs(big(i, i+9)); err != nil {
			t.Fatal(err)
		}
	}
	before := segments(t, dir)
	if len(before) < 3 {
		t.Fatalf("want at least 3 segments after 200 MiB, have %v", before)
	}
	if err := s.DeleteRange(1, 180); err != nil {
		t.Fatal(err)
	}
	after := segments(t, dir)
	if len(after) >= len(before) {
		t.Fatalf("segments before compaction %v, after %v: none removed", before, after)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	if f != 181 || l != 200 {
		t.Fatalf("after restart [%d, %d], want [181, 200]", f, l)
	}
	if err := s.StoreLogs(big(201, 201)); err != nil {
		t.Fatal(err)
	}
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		if strings.HasSuffix(de.Name(), ".wal") {
			out = append(out, de.Name())
		}
	}
	return out
}

// After a snapshot is installed raft (the store being monotonic) deletes
// the whole log and appends right after the snapshot's index.
func TestEmptiedLogRestartsAfterSnapshot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	s := open(t, dir)
	if err := s.StoreLogs(entries(1, 30, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 30); err != nil {
		t.Fatal(err)
	}
	check(t, s, 0, 0, term(1))
	s.Close()
	s = open(t, dir)
	check(t, s, 0, 0, term(1))
	if err := s.StoreLogs(entries(5001, 5010, 3)); err != nil {
		t.Fatal(err)
	}
	check(t, s, 5001, 5010, term(3))
	s.Close()
	s = open(t, dir)
	defer s.Close()
	check(t, s, 5001, 5010, term(3))
}

// A follower whose stale tail reached past the snapshot it is sent: raft
// deletes the whole log, then appends right after the snapshot, below what
// was deleted. The stale entries must not come back after a restart.
func TestAppendBelowEmptiedLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	s := open(t, dir)
	if err := s.StoreLogs(entries(1, 500, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(101, 500); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(entries(301, 310, 3)); err != nil {
		t.Fatal(err)
	}
	check(t, s, 301, 310, term(3))
	if err := s.StoreLogs(entries(311, 311, 3)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	check(t, s, 301, 311, term(3))
	if _, err := os.Stat(dir + discardSuffix); !os.IsNotExist(err) {
		t.Fatalf("the old WAL is still there: %v", err)
	}
}

// A record torn by a crash mid-write (the batch was never acknowledged) is
// cut off on open; everything before it stays.
func TestTornTailIsRepaired(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	s := open(t, dir)
	if err := s.StoreLogs(entries(1, 20, 1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	segs := segments(t, dir)
	last := filepath.Join(dir, segs[len(segs)-1])
	f, err := os.OpenFile(last, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A frame header promising 1,000 bytes whose sectors never reached
	// the disk (the preallocated file is zero there).
	off := endOfRecords(t, f)
	if _, err := f.WriteAt([]byte{0xe8, 0x03, 0, 0, 0, 0, 0, 0}, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s = open(t, dir)
	defer s.Close()
	check(t, s, 1, 20, term(1))
	if err := s.StoreLogs(entries(21, 21, 1)); err != nil {
		t.Fatal(err)
	}
}

// endOfRecords finds where the records end in a preallocated (zero-filled)
// segment: frames are 8-byte aligned, so the end is the first zero length
// word.
func endOfRecords(t *testing.T, f *os.File) int64 {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	off := int64(0)
	for off+8 <= int64(len(b)) {
		var n uint64
		for i := 7; i >= 0; i-- {
			n = n<<8 | uint64(b[off+int64(i)])
		}
		if n == 0 {
			return off
		}
		size := int64(n & 0x00ffffffffffffff)
		pad := int64(n>>56) & 0x7
		off += 8 + size + pad
	}
	t.Fatal("no end of records")
	return 0
}
