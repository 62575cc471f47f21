// This file holds Maintenance.Snapshot: the member's state streamed as a
// backup file (see raftstore/backup) in chunks, then its SHA-256 in a message
// of its own, as etcd streams its database.

package etcdserver

import (
	"crypto/sha256"
	"hash"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kplane/kplane/raftstore/backup"
)

// snapshotChunkSize is the blob size of each message, etcd's.
const snapshotChunkSize = 32 * 1024

// Snapshot streams a point-in-time copy of this member's applied state: every
// uncompacted revision of every key, the compaction point and the leases, at
// one revision. Like etcd it serves the member's local state without asking
// the leader, so a follower that lags serves an older (still consistent)
// revision. Writes wait only while the store's key index is cloned; the
// copy is serialised as it is sent.
//
// Every message but the last carries RemainingBytes, the bytes of the file
// still to come after it (the hash not counted); the last carries the
// SHA-256 of all the bytes before it and RemainingBytes 0.
func (m *maintenanceServer) Snapshot(req *pb.SnapshotRequest, stream pb.Maintenance_SnapshotServer) error {
	s := m.s
	start := time.Now()
	enc, err := backup.NewEncoder(s.store.Snapshot())
	if err != nil {
		return toGRPCError(err)
	}
	total := enc.ContentSize()
	s.log.Info("sending snapshot to client", "total_bytes", total)
	cs := &chunkSender{stream: stream, remaining: total, hash: sha256.New()}
	if _, err := enc.WriteContent(cs); err != nil {
		return toGRPCError(err)
	}
	if err := cs.flush(); err != nil {
		return toGRPCError(err)
	}
	if err := stream.Send(&pb.SnapshotResponse{Blob: cs.hash.Sum(nil), Version: Version}); err != nil {
		return toGRPCError(err)
	}
	s.log.Info("sent snapshot to client", "total_bytes", total, "took", time.Since(start))
	return nil
}

// chunkSender is the io.Writer that cuts the file into messages, hashing
// what it sends.
type chunkSender struct {
	stream    pb.Maintenance_SnapshotServer
	buf       []byte
	remaining int64
	hash      hash.Hash
}

func (c *chunkSender) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if c.buf == nil {
			// A new buffer per message: gRPC may still hold the last one.
			c.buf = make([]byte, 0, snapshotChunkSize)
		}
		k := min(len(p), snapshotChunkSize-len(c.buf))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
		if len(c.buf) == snapshotChunkSize {
			if err := c.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// flush sends what is buffered, if anything.
func (c *chunkSender) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	c.remaining -= int64(len(c.buf))
	c.hash.Write(c.buf)
	err := c.stream.Send(&pb.SnapshotResponse{RemainingBytes: uint64(c.remaining), Blob: c.buf, Version: Version})
	c.buf = nil
	return err
}
