// This file holds the batch envelope: one Raft log entry carrying several
// marshalled InternalRaftRequests, which the leader gathers from concurrent
// proposals so that hashicorp/raft's per-entry costs (a future, a msgpack
// Log in every AppendEntries to every follower, WAL and FSM bookkeeping) are
// paid once for many requests.
//
// Layout: batchMagic, then per request its length (uvarint) and its bytes.
// A marshalled InternalRaftRequest never starts with a zero byte (its first
// byte is a field tag, and field numbers start at 1; a request always carries
// an ID, so it is never empty), so entries written before batching existed
// still decode as single requests.

package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// batchMagic starts every batch entry; the second byte is the format's
// version.
const batchMagic = "\x00\x01"

// IsBatch reports whether a command entry's data is a batch envelope.
func IsBatch(data []byte) bool {
	return len(data) >= len(batchMagic) && string(data[:len(batchMagic)]) == batchMagic
}

// BatchSize returns the size of the envelope holding requests of these
// marshalled sizes.
func BatchSize(total, n int) int {
	return len(batchMagic) + total + n*binary.MaxVarintLen32
}

// AppendBatch appends to dst the envelope holding reqs (each a marshalled
// InternalRaftRequest), in order.
func AppendBatch(dst []byte, reqs ...[]byte) []byte {
	for _, r := range reqs {
		dst = AppendBatchEntry(dst, r)
	}
	return dst
}

// AppendBatchEntry appends one request to the envelope in dst, starting the
// envelope when dst is empty.
func AppendBatchEntry(dst, req []byte) []byte {
	if len(dst) == 0 {
		dst = append(dst, batchMagic...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(req)))
	return append(dst, req...)
}

var errBadBatch = errors.New("malformed batch envelope")

// forEachInBatch calls fn with each request of a batch envelope, in order.
// The slices alias data.
func forEachInBatch(data []byte, fn func([]byte)) error {
	if !IsBatch(data) {
		return errBadBatch
	}
	b := data[len(batchMagic):]
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return fmt.Errorf("%w: bad length at offset %d", errBadBatch, len(data)-len(b))
		}
		fn(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	return nil
}

// SplitBatch returns the requests of a batch envelope, in order; the
// slices alias data.
func SplitBatch(data []byte) ([][]byte, error) {
	var reqs [][]byte
	err := forEachInBatch(data, func(r []byte) { reqs = append(reqs, r) })
	return reqs, err
}

// CheckRequest reports whether req is something Apply knows: it carries a
// request ID and one of the requests the FSM applies. Apply panics on
// anything else (every member would, rather than drift), so the leader
// checks what followers forward before it enters the log.
func CheckRequest(req *pb.InternalRaftRequest) error {
	if req.ID == 0 {
		return errors.New("request without an ID")
	}
	switch {
	case req.Put != nil, req.DeleteRange != nil, req.Txn != nil, req.Compaction != nil,
		req.LeaseGrant != nil, req.LeaseRevoke != nil, req.ClusterMemberAttrSet != nil:
		return nil
	case req.ClusterVersionSet != nil:
		return checkClusterVersion(req.ClusterVersionSet)
	}
	return errors.New("request of a kind the store does not apply")
}
