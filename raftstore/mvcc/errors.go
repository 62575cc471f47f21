// This file holds the store's sentinel errors, each matching one of etcd's
// errors.

package mvcc

import "errors"

// Sentinel errors. The gRPC layer maps each to etcd's rpctypes error of the
// same meaning; the texts of the last four are etcd's own gRPC messages.
var (
	// ErrCompacted is returned for a read, hash or compaction at a revision
	// below the compaction point.
	ErrCompacted = errors.New("mvcc: required revision has been compacted")
	// ErrFutureRev is returned for a read, hash or compaction at a revision
	// above the current one.
	ErrFutureRev = errors.New("mvcc: required revision is a future revision")
	// ErrKeyNotFound is returned for a put with ignore_value or ignore_lease
	// on a key that does not exist.
	ErrKeyNotFound = errors.New("etcdserver: key not found")
	// ErrLeaseNotFound is returned for a put naming an unknown lease and for a
	// revoke of an unknown lease.
	ErrLeaseNotFound = errors.New("etcdserver: requested lease not found")
	// ErrLeaseExists is returned for a grant of an ID that is already granted.
	ErrLeaseExists = errors.New("etcdserver: lease already exists")
	// ErrDuplicateKey is returned for a txn that puts the same key twice, or
	// puts a key that it also deletes, in branches that can run together.
	ErrDuplicateKey = errors.New("etcdserver: duplicate key given in txn request")
	// ErrValueProvided is returned for a put with ignore_value and a value.
	ErrValueProvided = errors.New("etcdserver: value is provided")
	// ErrLeaseProvided is returned for a put with ignore_lease and a lease.
	ErrLeaseProvided = errors.New("etcdserver: lease is provided")

	// ErrWatcherNotExist is returned by Cancel for an unknown watch ID.
	ErrWatcherNotExist = errors.New("mvcc: watcher does not exist")
	// ErrWatcherDuplicateID is returned by Watch for an ID already in use on
	// the stream.
	ErrWatcherDuplicateID = errors.New("mvcc: duplicate watch ID provided on the WatchStream")
	// ErrEmptyWatcherRange is returned by Watch for a range whose end is not
	// after its start.
	ErrEmptyWatcherRange = errors.New("mvcc: watcher range is empty")
	// ErrStreamClosed is returned by Watch on a closed stream.
	ErrStreamClosed = errors.New("mvcc: watch stream is closed")
	// ErrSnapshotCorrupt is returned by Restore for a snapshot it cannot read.
	ErrSnapshotCorrupt = errors.New("mvcc: snapshot is corrupt")
)
