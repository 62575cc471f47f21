package mvcc

import (
	"errors"
	"io"
	"log/slog"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// errNotImplemented marks bodies of the first, compiling skeleton.
var errNotImplemented = errors.New("mvcc: not implemented yet")

// Config configures a Store.
type Config struct {
	// Logger receives the store's logs; nil discards them.
	Logger *slog.Logger
	// WatchBufferSize is the capacity of each WatchStream's channel; 0 means 128.
	WatchBufferSize int
}

// Store is the MVCC state. Writes (Put, DeleteRange, Txn, Compact,
// LeaseGrant, LeaseRevoke, Restore) must be called by one caller at a time, in
// Raft log order. Reads may be called concurrently with writes and with each
// other.
type Store struct {
	cfg Config
}

// New returns an empty store at revision 1, as etcd starts.
func New(cfg Config) *Store {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{cfg: cfg}
}

// Close stops the store's background watch delivery and closes every watch
// stream. The store must not be used afterwards.
func (s *Store) Close() {}

// Put sets a key. Response headers carry only Revision.
func (s *Store) Put(req *pb.PutRequest) (*pb.PutResponse, error) { return nil, errNotImplemented }

// DeleteRange deletes a key or range; deleting nothing does not bump the revision.
func (s *Store) DeleteRange(req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return nil, errNotImplemented
}

// Txn applies a transaction as one revision.
func (s *Store) Txn(req *pb.TxnRequest) (*pb.TxnResponse, error) { return nil, errNotImplemented }

// Compact drops history below rev. ErrCompacted if rev <= CompactRev, ErrFutureRev if rev > Rev.
func (s *Store) Compact(rev int64) (*pb.CompactionResponse, error) { return nil, errNotImplemented }

// LeaseGrant adds a lease to the table.
func (s *Store) LeaseGrant(id, ttl int64) error { return errNotImplemented }

// LeaseRevoke removes a lease and deletes its keys in one revision.
func (s *Store) LeaseRevoke(id int64) (rev int64, err error) { return 0, errNotImplemented }

// Range reads keys.
func (s *Store) Range(req *pb.RangeRequest) (*pb.RangeResponse, error) {
	return nil, errNotImplemented
}

// Rev returns the current revision.
func (s *Store) Rev() int64 { return 0 }

// CompactRev returns the compaction revision (0 if never compacted).
func (s *Store) CompactRev() int64 { return 0 }

// LeaseInfo describes one lease and the keys attached to it.
type LeaseInfo struct {
	ID, TTL int64
	Keys    [][]byte
}

// Lease returns one lease.
func (s *Store) Lease(id int64) (LeaseInfo, bool) { return LeaseInfo{}, false }

// Leases returns every lease, sorted by ID.
func (s *Store) Leases() []LeaseInfo { return nil }

// HashKV hashes all key-value revisions <= rev (0 = current) above the compaction point.
func (s *Store) HashKV(rev int64) (hash uint32, hashRev, compactRev int64, err error) {
	return 0, 0, 0, errNotImplemented
}

// Snapshot is a consistent copy of the store's state.
type Snapshot interface {
	WriteTo(w io.Writer) (int64, error)
}

// Snapshot takes a consistent copy of the state.
func (s *Store) Snapshot() Snapshot { return nil }

// Restore replaces the whole state from a snapshot.
func (s *Store) Restore(r io.Reader) error { return errNotImplemented }
