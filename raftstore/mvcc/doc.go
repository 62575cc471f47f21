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
package mvcc
