// Package walstore is a raft.LogStore on etcd's write-ahead log: every
// StoreLogs batch is one append and one fdatasync, where raft-boltdb's bbolt
// commit costs two fdatasyncs and several page writes. It keeps the entries
// since the last compaction in memory for GetLog, as etcd keeps raft's
// MemoryStorage beside its WAL; the WAL is only read back when the member
// starts.
//
// The WAL has no delete. Both kinds of raft.LogStore.DeleteRange map onto
// what etcd's own replay already does:
//   - the tail (a follower's conflicting entries): dropped from memory only;
//     raft appends the replacing entries right after, and the WAL's replay
//     lets an entry at a lower index overwrite everything after it. If the
//     member dies in between, the old uncommitted entries come back, which
//     is the state before the AppendEntries that removed them.
//   - the head (compaction after a snapshot): a WAL snapshot record at the
//     new base index, which is where the next start replays from, and the
//     segments wholly below it are removed.
//
// The open position is the newest snapshot record, found with
// wal.ValidSnapshotEntries; that function only trusts records at or below
// the last HardState's commit, so each snapshot record is preceded by a
// HardState whose Commit is its index (raft's own term and vote stay in the
// stable store; the WAL's HardState carries nothing else).
package walstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// Store is a raft.LogStore (and raft.MonotonicLogStore) on an etcd WAL.
type Store struct {
	dir string
	log *slog.Logger

	// wmu serialises the writers (raft's main loop appends and truncates
	// the tail, its snapshot goroutine compacts the head) so that an
	// fdatasync does not hold mu, which GetLog readers take.
	wmu sync.Mutex
	w   *wal.WAL

	// mu guards base and ents for readers. They change only with both wmu
	// and mu held, so a writer holding wmu reads them without mu.
	mu sync.RWMutex
	// base is the index just below the first entry: the newest snapshot
	// record. ents[i] has index base+1+i.
	base uint64
	ents []raft.Log
}

var (
	_ raft.LogStore          = (*Store)(nil)
	_ raft.MonotonicLogStore = (*Store)(nil)
)

// Exists reports whether dir holds a WAL.
func Exists(dir string) bool { return wal.Exist(dir) }

// Open opens the WAL in dir, creating it if there is none, and reads its
// entries back into memory. A record torn by a crash at the tail (never
// acknowledged, since the batch's fdatasync had not returned) is cut off,
// as etcd does on start.
func Open(dir string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lg := zap.NewNop()
	s := &Store{dir: dir, log: log}
	if err := os.RemoveAll(dir + discardSuffix); err != nil {
		return nil, fmt.Errorf("remove the WAL a reset left behind: %w", err)
	}
	if !wal.Exist(dir) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return nil, fmt.Errorf("wal parent dir: %w", err)
		}
		w, err := wal.Create(lg, dir, nil)
		if err != nil {
			return nil, fmt.Errorf("create wal %s: %w", dir, err)
		}
		s.w = w
		return s, nil
	}

	repaired := false
	for {
		snaps, err := wal.ValidSnapshotEntries(lg, dir)
		if err != nil {
			return nil, fmt.Errorf("read wal %s snapshot records: %w", dir, err)
		}
		if len(snaps) == 0 {
			return nil, fmt.Errorf("wal %s has no snapshot record", dir)
		}
		start := newest(snaps)
		w, err := wal.Open(lg, dir, start)
		if err != nil {
			return nil, fmt.Errorf("open wal %s: %w", dir, err)
		}
		_, _, ents, err := w.ReadAll()
		if err != nil {
			w.Close()
			if errors.Is(err, io.ErrUnexpectedEOF) && !repaired {
				if !wal.Repair(lg, dir) {
					return nil, fmt.Errorf("repair wal %s: %w", dir, err)
				}
				log.Warn("raft wal: cut a torn record off the tail", "dir", dir)
				repaired = true
				continue
			}
			return nil, fmt.Errorf("read wal %s: %w", dir, err)
		}
		s.w = w
		s.base = start.Index
		s.ents = make([]raft.Log, 0, len(ents))
		for i := range ents {
			l, err := decode(&ents[i])
			if err != nil {
				w.Close()
				return nil, fmt.Errorf("wal %s entry %d: %w", dir, ents[i].Index, err)
			}
			s.ents = append(s.ents, l)
		}
		if err := s.purge(); err != nil {
			log.Warn("raft wal: remove old segments", "dir", dir, "err", err)
		}
		return s, nil
	}
}

func newest(snaps []walpb.Snapshot) walpb.Snapshot {
	best := snaps[0]
	for _, s := range snaps[1:] {
		if s.Index >= best.Index {
			best = s
		}
	}
	return best
}

// Close syncs and closes the WAL.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.w == nil {
		return nil
	}
	err := s.w.Close()
	s.w = nil
	return err
}

// IsMonotonic tells raft never to leave a gap in the log: after installing
// a snapshot it deletes all older entries, and the next append starts a
// fresh log right after the snapshot.
func (s *Store) IsMonotonic() bool { return true }

// FirstIndex returns the first index in the log, 0 if it is empty.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.ents) == 0 {
		return 0, nil
	}
	return s.base + 1, nil
}

// LastIndex returns the last index in the log, 0 if it is empty.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.ents) == 0 {
		return 0, nil
	}
	return s.base + uint64(len(s.ents)), nil
}

// GetLog fills out with the entry at index, or returns raft.ErrLogNotFound.
func (s *Store) GetLog(index uint64, out *raft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if index <= s.base || index > s.base+uint64(len(s.ents)) {
		return raft.ErrLogNotFound
	}
	*out = s.ents[index-s.base-1]
	return nil
}

// StoreLog appends one entry.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs appends a batch with one write and one fdatasync. The batch must
// be contiguous and start at most one past the last entry; an entry at or
// below the last one replaces it and everything after it (raft deletes a
// conflicting tail first, but the WAL's replay does the same on its own).
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	base, n, err := s.extent()
	if err != nil {
		return err
	}
	first := logs[0].Index
	ents := make([]raftpb.Entry, len(logs))
	for i, l := range logs {
		if l.Index != first+uint64(i) {
			return fmt.Errorf("raft wal: batch not contiguous: index %d after %d", l.Index, logs[i-1].Index)
		}
		ents[i] = encode(l)
	}

	// An empty log (new, or emptied by DeleteRange after a snapshot was
	// installed) starts wherever raft says: a snapshot record just below
	// the first entry makes that the replay's start.
	newBase := base
	switch {
	case n == 0 && first > base+1:
		newBase = first - 1
		if err := s.saveBase(newBase, logs[0].Term); err != nil {
			return err
		}
	case n == 0 && first <= base:
		// A snapshot below what this member had compacted: a follower
		// whose stale uncommitted tail reached past the leader's
		// snapshot. Nothing in the WAL is needed any more, so it starts
		// over.
		newBase = first - 1
		if err := s.reset(newBase, logs[0].Term); err != nil {
			return err
		}
	case first <= base:
		return fmt.Errorf("raft wal: append at %d below the compacted index %d", first, base)
	case first > base+n+1:
		return fmt.Errorf("raft wal: append at %d leaves a gap after %d", first, base+n)
	}
	if err := s.w.Save(raftpb.HardState{}, ents); err != nil {
		return fmt.Errorf("raft wal: append: %w", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.base = newBase
	keep := first - 1 - newBase // entries before the batch that stay
	s.ents = s.ents[:keep]
	for _, l := range logs {
		s.ents = append(s.ents, *l)
	}
	return nil
}

// extent returns base and the number of entries, or an error once the
// store is closed. The caller holds wmu.
func (s *Store) extent() (base, n uint64, err error) {
	if s.w == nil {
		return 0, 0, errors.New("raft wal: closed")
	}
	return s.base, uint64(len(s.ents)), nil
}

// DeleteRange deletes [lo, hi]. Raft deletes either a head (compaction) or
// a tail (a follower's conflicting entries), never a middle.
func (s *Store) DeleteRange(lo, hi uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	base, n, err := s.extent()
	if err != nil {
		return err
	}
	first, last := base+1, base+n
	if n == 0 || hi < first || lo > last || lo > hi {
		return nil
	}

	if lo > first {
		if hi < last {
			return fmt.Errorf("raft wal: cannot delete [%d, %d] from the middle of [%d, %d]", lo, hi, first, last)
		}
		// The tail: memory only (see the package comment).
		s.mu.Lock()
		s.ents = s.ents[:lo-first]
		s.mu.Unlock()
		return nil
	}

	// The head, possibly the whole log.
	if hi > last {
		hi = last
	}
	if err := s.saveBase(hi, s.ents[hi-first].Term); err != nil {
		return err
	}
	s.mu.Lock()
	s.ents = append([]raft.Log(nil), s.ents[hi-first+1:]...)
	s.base = hi
	s.mu.Unlock()

	if err := s.w.ReleaseLockTo(hi); err != nil {
		return fmt.Errorf("raft wal: release segments: %w", err)
	}
	if err := s.purge(); err != nil {
		// The segments stay on disk until the next compaction or start;
		// the log itself is consistent.
		s.log.Warn("raft wal: remove old segments", "dir", s.dir, "err", err)
	}
	return nil
}

// reset replaces the WAL by an empty one whose replay starts at index. The
// old one is renamed away first (atomic), so a crash leaves either the old
// WAL, or none (an empty log, which is what the caller had), or the new one.
func (s *Store) reset(index, term uint64) error {
	if err := s.w.Close(); err != nil {
		return fmt.Errorf("raft wal: reset: %w", err)
	}
	s.w = nil
	if err := os.Rename(s.dir, s.dir+discardSuffix); err != nil {
		return fmt.Errorf("raft wal: reset: %w", err)
	}
	if err := os.RemoveAll(s.dir + discardSuffix); err != nil {
		return fmt.Errorf("raft wal: reset: %w", err)
	}
	w, err := wal.Create(zap.NewNop(), s.dir, nil)
	if err != nil {
		return fmt.Errorf("raft wal: reset: %w", err)
	}
	s.w = w
	s.log.Info("raft wal: started over below the compacted index", "dir", s.dir, "index", index)
	if index == 0 {
		return nil
	}
	return s.saveBase(index, term)
}

// discardSuffix names a WAL directory being removed by reset.
const discardSuffix = ".discard"

// saveBase makes index the replay's start: a HardState whose Commit vouches
// for it (see the package comment) and the snapshot record, synced together.
func (s *Store) saveBase(index, term uint64) error {
	if err := s.w.Save(raftpb.HardState{Commit: index}, nil); err != nil {
		return fmt.Errorf("raft wal: save base %d: %w", index, err)
	}
	if err := s.w.SaveSnapshot(walpb.Snapshot{Index: index, Term: term, ConfState: &raftpb.ConfState{}}); err != nil {
		return fmt.Errorf("raft wal: save base %d: %w", index, err)
	}
	return nil
}

// purge removes the oldest segments that the WAL no longer holds a lock
// on, stopping at the first it still holds, as etcd's purge does.
func (s *Store) purge() error {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	var names []string
	for _, de := range des {
		if strings.HasSuffix(de.Name(), ".wal") {
			names = append(names, de.Name())
		}
	}
	sort.Strings(names)
	// The newest segment is always in use.
	for _, name := range names[:max(len(names)-1, 0)] {
		path := filepath.Join(s.dir, name)
		l, err := fileutil.TryLockFile(path, os.O_WRONLY, fileutil.PrivateFileMode)
		if err != nil {
			return nil // held: this one and all after it are in use
		}
		err = os.Remove(path)
		l.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// An entry's Data holds the raft.Log fields other than index and term:
// type (1 byte), data and extensions (each a uvarint length and the
// bytes), AppendedAt in Unix nanoseconds (varint; 0 for the zero time).
func encode(l *raft.Log) raftpb.Entry {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(l.Data)+len(l.Extensions)+binary.MaxVarintLen64)
	b = append(b, byte(l.Type))
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	b = append(b, l.Extensions...)
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.AppendVarint(b, at)
	return raftpb.Entry{Index: l.Index, Term: l.Term, Type: raftpb.EntryNormal, Data: b}
}

var errCorrupt = errors.New("malformed entry")

func decode(e *raftpb.Entry) (raft.Log, error) {
	b := e.Data
	l := raft.Log{Index: e.Index, Term: e.Term}
	if len(b) < 1 {
		return l, errCorrupt
	}
	l.Type = raft.LogType(b[0])
	b = b[1:]
	var err error
	if l.Data, b, err = lengthPrefixed(b); err != nil {
		return l, err
	}
	if l.Extensions, b, err = lengthPrefixed(b); err != nil {
		return l, err
	}
	at, k := binary.Varint(b)
	if k <= 0 {
		return l, errCorrupt
	}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	return l, nil
}

func lengthPrefixed(b []byte) (field, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return nil, nil, errCorrupt
	}
	b = b[k:]
	if n == 0 {
		return nil, b, nil
	}
	return b[:n:n], b[n:], nil
}
