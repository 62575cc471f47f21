// This file holds compaction and HashKV: the history below a revision
// dropped, and the CRC-32C of what a compaction keeps, as etcd computes it.

package mvcc

import (
	"encoding/binary"
	"hash/crc32"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// keepFrom returns the index of the first revision of ki that compaction at
// compactRev keeps: every revision >= compactRev, and the last one below it
// if it is not a tombstone (the key's value at compactRev, and the prev_kv of
// its next event). len(ki.revs) means none.
func (ki *keyIndex) keepFrom(compactRev int64) int {
	i, _ := slices.BinarySearchFunc(ki.revs, compactRev, func(e entry, rev int64) int {
		if e.rev() < rev {
			return -1
		}
		return 1
	})
	if i > 0 && !ki.revs[i-1].tomb {
		i--
	}
	return i
}

// Compact drops the history below rev: reads, hashes and watches below it
// get ErrCompacted afterwards, while every key keeps its value at rev and
// every revision from rev on. It returns ErrCompacted if rev is not above the
// last compaction and ErrFutureRev if rev is above the current revision. It
// does not change the revision. Watchers that still need revisions below rev
// are told so and cancelled.
func (s *Store) Compact(rev int64) (*pb.CompactionResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev <= s.compactRev {
		return nil, ErrCompacted
	}
	if rev > s.rev {
		return nil, ErrFutureRev
	}
	var changed []keyIndex
	s.tree.Ascend(func(ki keyIndex) bool {
		if i := ki.keepFrom(rev); i > 0 {
			// A new slice, so that snapshots sharing the old one are untouched
			// and the dropped revisions can be freed.
			ki.revs = slices.Clone(ki.revs[i:])
			changed = append(changed, ki)
		}
		return true
	})
	for _, ki := range changed {
		if len(ki.revs) == 0 {
			s.tree.Delete(ki)
		} else {
			s.tree.ReplaceOrInsert(ki)
		}
	}
	s.hist.dropBefore(s.hist.index(rev))
	s.compactRev = rev
	s.kickWatchers()
	s.log.Debug("compacted", "revision", rev, "keys_changed", len(changed))
	return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: s.rev}}, nil
}

// HashKV returns a CRC-32C over every key-value revision <= rev (0 = the
// current revision) that compaction at the current compaction point keeps, in
// key then revision order. Two stores that applied the same log report the
// same hash, and compaction does not change the hash at a revision above it.
// It returns ErrFutureRev or ErrCompacted for a revision out of reach.
func (s *Store) HashKV(rev int64) (hash uint32, hashRev, compactRev int64, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	hashRev, err = s.checkReadRev(rev)
	if err != nil {
		return 0, 0, 0, err
	}
	return s.hashKV(hashRev, s.compactRev), hashRev, s.compactRev, nil
}

// hashKV hashes the revisions <= rev that compaction at lower keeps.
func (s *Store) hashKV(rev, lower int64) uint32 {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	var buf []byte
	s.tree.Ascend(func(ki keyIndex) bool {
		for _, e := range ki.revs[ki.keepFrom(lower):] {
			if e.rev() > rev {
				break
			}
			buf = buf[:0]
			buf = binary.AppendUvarint(buf, uint64(len(ki.key)))
			buf = append(buf, ki.key...)
			buf = binary.AppendVarint(buf, e.rev())
			buf = binary.AppendVarint(buf, e.sub)
			if e.tomb {
				buf = append(buf, 1)
			} else {
				buf = append(buf, 0)
				buf = binary.AppendVarint(buf, e.kv.CreateRevision)
				buf = binary.AppendVarint(buf, e.kv.Version)
				buf = binary.AppendVarint(buf, e.kv.Lease)
				buf = binary.AppendUvarint(buf, uint64(len(e.kv.Value)))
				buf = append(buf, e.kv.Value...)
			}
			h.Write(buf)
		}
		return true
	})
	return h.Sum32()
}
