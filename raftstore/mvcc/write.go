// This file holds the writer: puts, deletes and tombstones of one write at
// one revision, committed at once, and the checks etcd makes of a put.

package mvcc

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// writer applies the operations of one write request at revision rev, each
// op numbered by sub-revision. Its operations cannot fail: every request is
// checked against the state before anything is applied, so a failing request
// changes nothing. commit publishes the revision if anything changed.
type writer struct {
	s      *Store
	rev    int64
	sub    int64
	events []*mvccpb.Event
}

// newWriter starts a write; the caller holds s.mu exclusively.
func (s *Store) newWriter() *writer {
	return &writer{s: s, rev: s.rev + 1}
}

// put writes key at the writer's revision and returns the previous value.
func (w *writer) put(key, value []byte, leaseID int64) (prev *mvccpb.KeyValue) {
	s := w.s
	ki, found := s.tree.Get(keyIndex{key: key})
	if found {
		prev = ki.live()
	} else {
		ki.key = key
	}
	kv := &mvccpb.KeyValue{Key: ki.key, Value: value, ModRevision: w.rev, Lease: leaseID}
	if prev != nil {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
	} else {
		kv.CreateRevision = w.rev
		kv.Version = 1
	}
	ki.revs = append(ki.revs, entry{kv: kv, sub: w.sub})
	s.tree.ReplaceOrInsert(ki)
	var oldLease int64
	if prev != nil {
		oldLease = prev.Lease
	}
	if oldLease != leaseID {
		s.detach(oldLease, ki.key)
		s.attach(leaseID, ki.key)
	}
	w.events = append(w.events, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev})
	w.sub++
	return prev
}

// deleteSpan deletes every live key in sp and returns the deleted values.
func (w *writer) deleteSpan(sp keySpan, wantPrev bool) (deleted int64, prevs []*mvccpb.KeyValue) {
	s := w.s
	var victims []keyIndex
	s.ascend(s.tree, sp, func(ki *keyIndex) bool {
		if ki.live() != nil {
			victims = append(victims, *ki)
		}
		return true
	})
	for i := range victims {
		prev := w.deleteKey(victims[i])
		if wantPrev {
			prevs = append(prevs, prev)
		}
	}
	return int64(len(victims)), prevs
}

// deleteKey writes a tombstone for a live key and returns its last value.
func (w *writer) deleteKey(ki keyIndex) *mvccpb.KeyValue {
	s := w.s
	prev := ki.live()
	tomb := &mvccpb.KeyValue{Key: ki.key, ModRevision: w.rev}
	ki.revs = append(ki.revs, entry{kv: tomb, sub: w.sub, tomb: true})
	s.tree.ReplaceOrInsert(ki)
	s.detach(prev.Lease, ki.key)
	w.events = append(w.events, &mvccpb.Event{Type: mvccpb.DELETE, Kv: tomb, PrevKv: prev})
	w.sub++
	return prev
}

// commit publishes the write: if anything changed, the revision moves to
// w.rev, the events join the history and the watchers are notified. It
// returns the store's revision after the write.
func (w *writer) commit() int64 {
	s := w.s
	if len(w.events) == 0 {
		return s.rev
	}
	s.rev = w.rev
	s.notify(s.hist.append(histRecord{rev: w.rev, events: w.events}))
	return s.rev
}

// checkPut checks a put against the current state: the errors etcd returns
// before applying anything.
func (s *Store) checkPut(req *pb.PutRequest) error {
	if req.IgnoreValue && len(req.Value) != 0 {
		return ErrValueProvided
	}
	if req.IgnoreLease && req.Lease != 0 {
		return ErrLeaseProvided
	}
	if req.IgnoreValue || req.IgnoreLease {
		ki, ok := s.tree.Get(keyIndex{key: req.Key})
		if !ok || ki.live() == nil {
			return ErrKeyNotFound
		}
	}
	if req.Lease != 0 {
		if _, ok := s.leases[req.Lease]; !ok {
			return ErrLeaseNotFound
		}
	}
	return nil
}

// applyPut applies a checked put.
func (w *writer) applyPut(req *pb.PutRequest) *pb.PutResponse {
	value, leaseID := req.Value, req.Lease
	if req.IgnoreValue || req.IgnoreLease {
		ki, _ := w.s.tree.Get(keyIndex{key: req.Key})
		cur := ki.live()
		if req.IgnoreValue {
			value = cur.Value
		}
		if req.IgnoreLease {
			leaseID = cur.Lease
		}
	}
	prev := w.put(req.Key, value, leaseID)
	resp := &pb.PutResponse{}
	if req.PrevKv {
		resp.PrevKv = prev
	}
	return resp
}

// applyDeleteRange applies a delete.
func (w *writer) applyDeleteRange(req *pb.DeleteRangeRequest) *pb.DeleteRangeResponse {
	n, prevs := w.deleteSpan(newKeySpan(req.Key, req.RangeEnd), req.PrevKv)
	return &pb.DeleteRangeResponse{Deleted: n, PrevKvs: prevs}
}

// Put sets a key, as etcd's Put: a new key gets create_revision = mod_revision
// = the new revision and version 1; an existing key keeps its create_revision
// and its version grows by one. Attaching a lease moves the key from its old
// lease. ignore_value and ignore_lease keep the current value or lease and
// fail with ErrKeyNotFound if the key does not exist. The response's header
// carries only the new revision.
func (s *Store) Put(req *pb.PutRequest) (*pb.PutResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkPut(req); err != nil {
		return nil, err
	}
	w := s.newWriter()
	resp := w.applyPut(req)
	resp.Header = &pb.ResponseHeader{Revision: w.commit()}
	return resp, nil
}

// DeleteRange deletes one key, a range [key, range_end) or every key from key
// on (range_end "\x00"), in one revision. Deleting nothing does not bump the
// revision.
func (s *Store) DeleteRange(req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.newWriter()
	resp := w.applyDeleteRange(req)
	resp.Header = &pb.ResponseHeader{Revision: w.commit()}
	return resp, nil
}
