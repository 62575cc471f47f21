// This file holds the Store and its data: the key index of revisions per
// key, the history records, the leases, and the key spans reads and watches
// cover.

package mvcc

import (
	"bytes"
	"log/slog"
	"sort"
	"sync"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Config configures a Store.
type Config struct {
	// Logger receives the store's logs; nil discards them.
	Logger *slog.Logger
	// WatchBufferSize is the capacity of each WatchStream's channel; 0 means
	// defaultWatchBufferSize. A stream whose channel is full has its watchers
	// moved aside and caught up later; it never blocks a write.
	WatchBufferSize int
}

const (
	defaultWatchBufferSize = 128
	// btreeDegree is the key index's B-tree degree.
	btreeDegree = 32
)

// entry is one revision of one key. Entries are immutable once written: the
// key index, the history and snapshots share them.
type entry struct {
	// kv is the key's value at this revision. For a tombstone only Key and
	// ModRevision are set, as in etcd's delete events.
	kv   *mvccpb.KeyValue
	sub  int64
	tomb bool
}

func (e entry) rev() int64 { return e.kv.ModRevision }

// keyIndex is one key and its revisions in ascending order. It is stored by
// value in the B-tree and replaced, never changed in place, on every write, so
// a cloned tree (a snapshot) keeps seeing exactly what it was cloned with:
// appending to revs only writes past the length that any older copy holds, and
// compaction builds a new slice.
type keyIndex struct {
	key  []byte
	revs []entry
}

func lessKeyIndex(a, b keyIndex) bool { return bytes.Compare(a.key, b.key) < 0 }

// at returns the key's entry visible at rev: the last one with a revision
// <= rev. ok is false when the key did not exist then (no entry, or a tombstone).
func (ki *keyIndex) at(rev int64) (e entry, ok bool) {
	n := len(ki.revs)
	if n == 0 {
		return entry{}, false
	}
	if last := ki.revs[n-1]; last.rev() <= rev {
		return last, !last.tomb
	}
	i := sort.Search(n, func(i int) bool { return ki.revs[i].rev() > rev })
	if i == 0 {
		return entry{}, false
	}
	e = ki.revs[i-1]
	return e, !e.tomb
}

// live returns the key's current value, if it exists.
func (ki *keyIndex) live() *mvccpb.KeyValue {
	if n := len(ki.revs); n > 0 && !ki.revs[n-1].tomb {
		return ki.revs[n-1].kv
	}
	return nil
}

// histRecord holds the events of one revision, in sub-revision order, for
// watch catch-up. events carry PrevKv; plain is the same events without it,
// built on first use.
type histRecord struct {
	rev    int64
	events []*mvccpb.Event
	plain  []*mvccpb.Event
}

func (r *histRecord) plainEvents() []*mvccpb.Event {
	if r.plain == nil {
		r.plain = make([]*mvccpb.Event, len(r.events))
		for i, ev := range r.events {
			if ev.PrevKv == nil {
				r.plain[i] = ev
				continue
			}
			r.plain[i] = &mvccpb.Event{Type: ev.Type, Kv: ev.Kv}
		}
	}
	return r.plain
}

// lease is one granted lease and the keys currently attached to it.
type lease struct {
	id, ttl int64
	keys    map[string]struct{}
}

// Store is the MVCC state: the key index with every uncompacted revision of
// every key, the history of events by revision, the lease table and the
// watchers.
//
// Writes (Put, DeleteRange, Txn, Compact, LeaseGrant, LeaseRevoke, Restore)
// are called by one caller at a time, in Raft log order; each either changes
// nothing and returns an error, or applies completely. Reads (Range, Rev,
// CompactRev, Lease, Leases, HashKV, Snapshot) may be called concurrently with
// writes and with each other.
type Store struct {
	log        *slog.Logger
	bufferSize int
	limits     syncLimits

	// mu guards everything below. Writes and watcher bookkeeping take it
	// exclusively; reads share it.
	mu         sync.RWMutex
	tree       *btree.BTreeG[keyIndex]
	rev        int64
	compactRev int64
	hist       history
	leases     map[int64]*lease

	watch watchState
}

// New returns an empty store at revision 1, as etcd starts.
func New(cfg Config) *Store {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	size := cfg.WatchBufferSize
	if size <= 0 {
		size = defaultWatchBufferSize
	}
	s := &Store{
		log:        logger.With("component", "mvcc"),
		bufferSize: size,
		limits:     defaultSyncLimits,
		tree:       btree.NewG(btreeDegree, lessKeyIndex),
		rev:        1,
		leases:     make(map[int64]*lease),
	}
	s.watch.init()
	return s
}

// Rev returns the current revision.
func (s *Store) Rev() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rev
}

// CompactRev returns the revision of the last compaction, 0 if there was none.
func (s *Store) CompactRev() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.compactRev
}

// keySpan is a normalised etcd key range: one key (end empty), [key, end), or
// every key >= key (end "\x00").
type keySpan struct {
	key, end []byte
	single   bool
	toInf    bool
}

func newKeySpan(key, end []byte) keySpan {
	switch {
	case len(end) == 0:
		return keySpan{key: key, single: true}
	case len(end) == 1 && end[0] == 0:
		return keySpan{key: key, toInf: true}
	default:
		return keySpan{key: key, end: end}
	}
}

// empty reports whether the span can hold no key.
func (sp keySpan) empty() bool {
	return !sp.single && !sp.toInf && bytes.Compare(sp.key, sp.end) >= 0
}

func (sp keySpan) contains(k []byte) bool {
	if sp.single {
		return bytes.Equal(k, sp.key)
	}
	if bytes.Compare(k, sp.key) < 0 {
		return false
	}
	return sp.toInf || bytes.Compare(k, sp.end) < 0
}

// overlaps reports whether two spans share a key.
func (sp keySpan) overlaps(o keySpan) bool {
	if sp.empty() || o.empty() {
		return false
	}
	if sp.single {
		return o.contains(sp.key)
	}
	if o.single {
		return sp.contains(o.key)
	}
	// Two half-open intervals [a, b) and [c, d) overlap iff a < d and c < b.
	return (o.toInf || bytes.Compare(sp.key, o.end) < 0) && (sp.toInf || bytes.Compare(o.key, sp.end) < 0)
}

// ascend calls fn for every key index in the span, in key order, until fn
// returns false.
func (s *Store) ascend(tree *btree.BTreeG[keyIndex], sp keySpan, fn func(ki *keyIndex) bool) {
	switch {
	case sp.single:
		if ki, ok := tree.Get(keyIndex{key: sp.key}); ok {
			fn(&ki)
		}
	case sp.toInf:
		tree.AscendGreaterOrEqual(keyIndex{key: sp.key}, func(ki keyIndex) bool { return fn(&ki) })
	case sp.empty():
	default:
		tree.AscendRange(keyIndex{key: sp.key}, keyIndex{key: sp.end}, func(ki keyIndex) bool { return fn(&ki) })
	}
}
