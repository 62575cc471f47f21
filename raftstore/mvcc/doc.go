// Package mvcc is the deterministic, in-memory multi-version key-value state of
// the kplane store, modelled on etcd's server/storage/mvcc.
//
// One global revision is bumped by every write that changes something; each
// key keeps create_revision, mod_revision and version; reads at past revisions
// work until they are compacted; watches replay history from any uncompacted
// revision and then follow live writes. Writes are applied by the Raft FSM one
// at a time in log order and are deterministic (no clock, no randomness, no map
// order), so every replica that applied the same log holds the same state and
// reports the same HashKV.
//
// The request and response types are etcd's own (etcdserverpb, mvccpb). The
// Store keeps references to the byte slices of the requests it applies, and the
// KeyValues and Events it returns are shared with its history: callers must
// not modify either.
//
// # Data structures
//
//   - The key index (store.go) is a github.com/google/btree B-tree of keys,
//     each with its revisions in order. Items are values, replaced on every
//     write, so a Clone of the tree is a consistent, copy-on-write snapshot
//     and a Put is O(log n).
//   - The history (history.go) holds the events of every uncompacted revision
//     in revision order, in fixed-size chunks, for watch catch-up.
//   - The lease table (lease.go) maps each lease to the keys attached to it.
//   - Watchers (watch.go, watch_sync.go) are synced, unsynced or victims, as in
//     etcd's watchable store; a write only ever does non-blocking sends.
//
// # Files
//
// write.go holds Put and DeleteRange, txn.go Txn and etcd's duplicate-key
// rule, range.go Range, compact.go Compact and HashKV, snapshot.go the
// snapshot format, Snapshot and Restore.
package mvcc
