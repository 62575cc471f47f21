// This file holds the snapshot format and its writer and reader: every
// uncompacted revision of every key and the leases, checked by a CRC, and
// Restore.

package mvcc

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The snapshot format (all integers varints unless said otherwise):
//
//	magic "kplane-mvcc-snapshot\n", format version (uvarint, 1)
//	revision, compact revision
//	lease count (uvarint), then per lease: ID, TTL
//	key count (uvarint), then per key in key order: revision count (uvarint),
//	  then per revision in order: flags (1 byte, bit 0 = tombstone),
//	  sub-revision, length (uvarint) + mvccpb.KeyValue protobuf
//	CRC-32C of everything before it, 4 bytes big-endian
//
// It holds every uncompacted revision of every key, so the history, the
// attached leases and the hash are all rebuilt from it.

const (
	snapshotMagic   = "kplane-mvcc-snapshot\n"
	snapshotVersion = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Snapshot is a consistent copy of the store's state, written out by WriteTo.
type Snapshot interface {
	// WriteTo writes the snapshot to w and returns the bytes written.
	WriteTo(w io.Writer) (int64, error)
}

type snapshot struct {
	tree       *btree.BTreeG[keyIndex]
	rev        int64
	compactRev int64
	leases     []LeaseInfo // IDs and TTLs, sorted by ID
}

var _ Snapshot = (*snapshot)(nil)

// Snapshot takes a consistent copy of the state. It holds the store's lock
// only to clone the key index (copy-on-write, O(1)) and copy the lease table;
// WriteTo serialises the copy while writes go on.
func (s *Store) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := &snapshot{tree: s.tree.Clone(), rev: s.rev, compactRev: s.compactRev}
	for _, l := range s.leases {
		snap.leases = append(snap.leases, LeaseInfo{ID: l.id, TTL: l.ttl})
	}
	slices.SortFunc(snap.leases, func(a, b LeaseInfo) int { return cmp.Compare(a.ID, b.ID) })
	return snap
}

// snapWriter writes through a buffer and a CRC, remembering the first error.
type snapWriter struct {
	bw  *bufio.Writer
	crc hash.Hash32
	n   int64
	buf []byte
	err error
}

func (sw *snapWriter) write(p []byte) {
	if sw.err != nil {
		return
	}
	n, err := sw.bw.Write(p)
	sw.n += int64(n)
	sw.crc.Write(p[:n])
	sw.err = err
}

func (sw *snapWriter) uvarint(v uint64) {
	sw.buf = binary.AppendUvarint(sw.buf[:0], v)
	sw.write(sw.buf)
}
func (sw *snapWriter) varint(v int64) { sw.buf = binary.AppendVarint(sw.buf[:0], v); sw.write(sw.buf) }

// WriteTo writes the snapshot in the format above.
func (snap *snapshot) WriteTo(w io.Writer) (int64, error) {
	sw := &snapWriter{bw: bufio.NewWriterSize(w, 64<<10), crc: crc32.New(crcTable)}
	sw.write([]byte(snapshotMagic))
	sw.uvarint(snapshotVersion)
	sw.varint(snap.rev)
	sw.varint(snap.compactRev)
	sw.uvarint(uint64(len(snap.leases)))
	for _, l := range snap.leases {
		sw.varint(l.ID)
		sw.varint(l.TTL)
	}
	sw.uvarint(uint64(snap.tree.Len()))
	var kvBuf []byte
	snap.tree.Ascend(func(ki keyIndex) bool {
		sw.uvarint(uint64(len(ki.revs)))
		for _, e := range ki.revs {
			var flags byte
			if e.tomb {
				flags = 1
			}
			sw.write([]byte{flags})
			sw.varint(e.sub)
			size := e.kv.Size()
			kvBuf = slices.Grow(kvBuf[:0], size)[:size]
			if _, err := e.kv.MarshalToSizedBuffer(kvBuf); err != nil && sw.err == nil {
				sw.err = fmt.Errorf("mvcc: marshal key-value: %w", err)
			}
			sw.uvarint(uint64(size))
			sw.write(kvBuf)
		}
		return sw.err == nil
	})
	if sw.err == nil {
		var sum [4]byte
		binary.BigEndian.PutUint32(sum[:], sw.crc.Sum32())
		n, err := sw.bw.Write(sum[:])
		sw.n += int64(n)
		sw.err = err
	}
	if sw.err == nil {
		sw.err = sw.bw.Flush()
	}
	if sw.err != nil {
		return sw.n, fmt.Errorf("mvcc: write snapshot: %w", sw.err)
	}
	return sw.n, nil
}

// snapReader parses a snapshot held in memory.
type snapReader struct {
	b   []byte
	err error
}

func (sr *snapReader) fail(what string) {
	if sr.err == nil {
		sr.err = fmt.Errorf("%w: bad %s", ErrSnapshotCorrupt, what)
	}
}

func (sr *snapReader) uvarint(what string) uint64 {
	if sr.err != nil {
		return 0
	}
	v, n := binary.Uvarint(sr.b)
	if n <= 0 {
		sr.fail(what)
		return 0
	}
	sr.b = sr.b[n:]
	return v
}

func (sr *snapReader) varint(what string) int64 {
	if sr.err != nil {
		return 0
	}
	v, n := binary.Varint(sr.b)
	if n <= 0 {
		sr.fail(what)
		return 0
	}
	sr.b = sr.b[n:]
	return v
}

func (sr *snapReader) bytes(n uint64, what string) []byte {
	if sr.err != nil {
		return nil
	}
	if n > uint64(len(sr.b)) {
		sr.fail(what)
		return nil
	}
	p := sr.b[:n]
	sr.b = sr.b[n:]
	return p
}

// count reads a count and checks that at least min bytes per item remain, so
// a corrupt count cannot make Restore allocate without bound.
func (sr *snapReader) count(minBytes int, what string) int {
	n := sr.uvarint(what)
	if sr.err == nil && n > uint64(len(sr.b)/minBytes) {
		sr.fail(what)
		return 0
	}
	return int(n)
}

// restoredState is a state read from a snapshot, not yet installed.
type restoredState struct {
	tree       *btree.BTreeG[keyIndex]
	rev        int64
	compactRev int64
	hist       history
	leases     map[int64]*lease
}

func readSnapshot(r io.Reader) (*restoredState, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("mvcc: read snapshot: %w", err)
	}
	if len(data) < len(snapshotMagic)+4 || !bytes.HasPrefix(data, []byte(snapshotMagic)) {
		return nil, fmt.Errorf("%w: not a kplane mvcc snapshot", ErrSnapshotCorrupt)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrSnapshotCorrupt)
	}
	sr := &snapReader{b: body[len(snapshotMagic):]}
	if v := sr.uvarint("version"); sr.err == nil && v != snapshotVersion {
		return nil, fmt.Errorf("%w: unknown format version %d", ErrSnapshotCorrupt, v)
	}
	st := &restoredState{
		tree:   btree.NewG(btreeDegree, lessKeyIndex),
		leases: make(map[int64]*lease),
	}
	st.rev = sr.varint("revision")
	st.compactRev = sr.varint("compact revision")
	if sr.err == nil && (st.rev < 1 || st.compactRev < 0 || st.compactRev > st.rev) {
		sr.fail("revisions")
	}
	nLeases := sr.count(2, "lease count")
	for range nLeases {
		id, ttl := sr.varint("lease ID"), sr.varint("lease TTL")
		if sr.err != nil {
			break
		}
		if _, dup := st.leases[id]; dup || id == 0 {
			sr.fail("lease ID")
			break
		}
		st.leases[id] = &lease{id: id, ttl: ttl, keys: make(map[string]struct{})}
	}
	nKeys := sr.count(4, "key count")
	var prevKey []byte
	// The history's events, with the sub-revision that orders them.
	type histEvent struct {
		sub int64
		ev  *mvccpb.Event
	}
	var events []histEvent
	for k := 0; k < nKeys && sr.err == nil; k++ {
		n := sr.count(3, "revision count")
		if sr.err == nil && n == 0 {
			sr.fail("revision count")
		}
		ki := keyIndex{revs: make([]entry, 0, n)}
		for j := 0; j < n && sr.err == nil; j++ {
			flags := sr.bytes(1, "flags")
			sub := sr.varint("sub-revision")
			raw := sr.bytes(sr.uvarint("key-value length"), "key-value")
			if sr.err != nil {
				break
			}
			kv := &mvccpb.KeyValue{}
			if err := kv.Unmarshal(raw); err != nil {
				sr.err = fmt.Errorf("%w: key-value: %w", ErrSnapshotCorrupt, err)
				break
			}
			e := entry{kv: kv, sub: sub, tomb: flags[0]&1 != 0}
			if j == 0 {
				ki.key = kv.Key
			}
			if !bytes.Equal(kv.Key, ki.key) || kv.ModRevision > st.rev || kv.ModRevision < 1 ||
				(j > 0 && !revLess(ki.revs[j-1], e)) {
				sr.fail("revision order")
				break
			}
			kv.Key = ki.key
			if e.rev() >= st.compactRev {
				ev := &mvccpb.Event{Type: mvccpb.PUT, Kv: kv}
				if e.tomb {
					ev.Type = mvccpb.DELETE
				}
				if j > 0 && !ki.revs[j-1].tomb {
					ev.PrevKv = ki.revs[j-1].kv
				}
				events = append(events, histEvent{sub: sub, ev: ev})
			}
			ki.revs = append(ki.revs, e)
		}
		if sr.err != nil {
			break
		}
		if prevKey != nil && bytes.Compare(prevKey, ki.key) >= 0 {
			sr.fail("key order")
			break
		}
		prevKey = ki.key
		if cur := ki.live(); cur != nil && cur.Lease != 0 {
			if l, ok := st.leases[cur.Lease]; ok {
				l.keys[string(ki.key)] = struct{}{}
			}
		}
		st.tree.ReplaceOrInsert(ki)
	}
	if sr.err == nil && len(sr.b) != 0 {
		sr.fail("trailing data")
	}
	if sr.err != nil {
		return nil, sr.err
	}
	// The history is the events of every revision from the compaction point
	// on, in (revision, sub-revision) order.
	slices.SortFunc(events, func(a, b histEvent) int {
		if c := cmp.Compare(a.ev.Kv.ModRevision, b.ev.Kv.ModRevision); c != 0 {
			return c
		}
		return cmp.Compare(a.sub, b.sub)
	})
	for i := 0; i < len(events); {
		rev := events[i].ev.Kv.ModRevision
		rec := histRecord{rev: rev}
		for ; i < len(events) && events[i].ev.Kv.ModRevision == rev; i++ {
			rec.events = append(rec.events, events[i].ev)
		}
		st.hist.append(rec)
	}
	return st, nil
}

func revLess(a, b entry) bool {
	if a.rev() != b.rev() {
		return a.rev() < b.rev()
	}
	return a.sub < b.sub
}

// Restore replaces the whole state with a snapshot written by WriteTo, read
// from r to its end (so the snapshot must be the last thing in r): every
// uncompacted revision, the compaction point and the leases. A snapshot that
// cannot be read leaves the state untouched and returns an error wrapping
// ErrSnapshotCorrupt (or the reader's error).
//
// Live watchers survive: each is caught up again from the revision after the
// last one it was sent, against the restored history, or told that revision
// is compacted; none gets an event twice or out of order.
func (s *Store) Restore(r io.Reader) error {
	st, err := readSnapshot(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	oldRev := s.rev
	s.tree, s.rev, s.compactRev, s.hist, s.leases = st.tree, st.rev, st.compactRev, st.hist, st.leases
	s.restoreWatchers(oldRev)
	s.log.Info("restored snapshot", "revision", s.rev, "compact_revision", s.compactRev, "keys", s.tree.Len())
	return nil
}
