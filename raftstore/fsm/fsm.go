// Package fsm is the replicated state machine of the store: it applies Raft
// log entries (etcd InternalRaftRequest envelopes) to the MVCC store and the
// members table, in log order, and snapshots and restores both.
//
// Apply is deterministic: it reads no clock and no randomness, and iterates
// no maps in an order that matters. Everything time- or identity-dependent
// (lease IDs, request IDs) is stamped by the proposer before proposing.
package fsm

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kplane/kplane/raftstore/mvcc"
)

// Result is what applying one proposal produced. Resp is one of the etcd
// response messages (*pb.PutResponse, *pb.TxnResponse, ...) or nil; Err is
// the store's error (an mvcc sentinel) when the request changed nothing.
type Result struct {
	Index uint64
	Resp  any
	Err   error
}

// Member is what the members table holds about one member: the attributes a
// member publishes about itself through Raft once it starts.
type Member struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name"`
	ClientURLs []string `json:"clientURLs"`
}

// FSM implements raft.BatchingFSM over an mvcc.Store.
type FSM struct {
	store *mvcc.Store
	log   *slog.Logger

	mu      sync.Mutex
	members map[uint64]Member
	waiters map[uint64]chan Result

	applied atomic.Uint64
	// clusterVersion is the applied cluster version (version.go).
	clusterVersion atomic.Uint32
	appliedMu      sync.Mutex
	appliedCh      chan struct{} // closed and replaced whenever applied advances
}

var _ raft.BatchingFSM = (*FSM)(nil)

// New returns an FSM applying to store. A nil logger discards.
func New(store *mvcc.Store, logger *slog.Logger) *FSM {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := &FSM{
		store:     store,
		log:       logger,
		members:   map[uint64]Member{},
		waiters:   map[uint64]chan Result{},
		appliedCh: make(chan struct{}),
	}
	f.clusterVersion.Store(Version1)
	return f
}

// Store returns the MVCC store the FSM applies to.
func (f *FSM) Store() *mvcc.Store { return f.store }

// Register makes the result of the proposal with this request ID available
// on the returned channel (buffered, at most one value) when this member
// applies it. The caller must call Forget(id) when it stops waiting.
func (f *FSM) Register(id uint64) <-chan Result {
	ch := make(chan Result, 1)
	f.mu.Lock()
	f.waiters[id] = ch
	f.mu.Unlock()
	return ch
}

// Forget drops the waiter registered for id, if any.
func (f *FSM) Forget(id uint64) {
	f.mu.Lock()
	delete(f.waiters, id)
	f.mu.Unlock()
}

// Applied returns the index of the last Raft log entry this FSM applied.
func (f *FSM) Applied() uint64 { return f.applied.Load() }

// AppliedCh returns a channel that is closed when the applied index next
// advances. Callers re-check Applied after it fires.
func (f *FSM) AppliedCh() <-chan struct{} {
	f.appliedMu.Lock()
	defer f.appliedMu.Unlock()
	return f.appliedCh
}

func (f *FSM) setApplied(idx uint64) {
	f.applied.Store(idx)
	f.appliedMu.Lock()
	close(f.appliedCh)
	f.appliedCh = make(chan struct{})
	f.appliedMu.Unlock()
}

// Member returns one entry of the members table.
func (f *FSM) Member(id uint64) (Member, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.members[id]
	return m, ok
}

// Members returns a copy of the members table.
func (f *FSM) Members() map[uint64]Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[uint64]Member, len(f.members))
	for id, m := range f.members {
		out[id] = m
	}
	return out
}

// Apply applies one log entry; see ApplyBatch.
func (f *FSM) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in order. Command entries are decoded
// and applied; each request's result goes to the waiter registered for its
// ID on this member. A command entry holds one request, or several in the
// batch envelope (see EncodeBatch), applied in order as if each had been its
// own entry: every request is its own revision and its own result. For raft's
// ApplyFuture the entry's result is returned too (a Result for a single
// request, a []Result for a batch). Other entry types (configuration,
// barrier, noop) only advance the applied index.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	var last uint64
	for i, l := range logs {
		last = l.Index
		if l.Type != raft.LogCommand {
			continue
		}
		if !IsBatch(l.Data) {
			out[i] = f.applyOne(l.Index, l.Data)
			continue
		}
		var results []Result
		err := forEachInBatch(l.Data, func(data []byte) {
			results = append(results, f.applyOne(l.Index, data))
		})
		if err != nil {
			// Every member would fail the same way; see applyOne.
			panic(fmt.Sprintf("fsm: undecodable batch in log entry %d: %v", l.Index, err))
		}
		out[i] = results
	}
	if len(logs) > 0 {
		f.setApplied(last)
	}
	return out
}

// applyOne decodes and applies one request of the entry at index, and hands
// its result to the request's waiter.
func (f *FSM) applyOne(index uint64, data []byte) Result {
	var req pb.InternalRaftRequest
	if err := req.Unmarshal(data); err != nil {
		// Every member would fail the same way; carrying on would let
		// replicas drift if one of them decoded it differently.
		panic(fmt.Sprintf("fsm: undecodable log entry %d: %v", index, err))
	}
	res := f.apply(&req)
	res.Index = index
	f.mu.Lock()
	ch, ok := f.waiters[req.ID]
	if ok {
		delete(f.waiters, req.ID)
	}
	f.mu.Unlock()
	if ok {
		ch <- res
	}
	return res
}

func (f *FSM) apply(req *pb.InternalRaftRequest) Result {
	s := f.store
	switch {
	case req.Put != nil:
		resp, err := s.Put(req.Put)
		return Result{Resp: resp, Err: err}
	case req.DeleteRange != nil:
		resp, err := s.DeleteRange(req.DeleteRange)
		return Result{Resp: resp, Err: err}
	case req.Txn != nil:
		resp, err := s.Txn(req.Txn)
		return Result{Resp: resp, Err: err}
	case req.Compaction != nil:
		resp, err := s.Compact(req.Compaction.Revision)
		return Result{Resp: resp, Err: err}
	case req.LeaseGrant != nil:
		if err := s.LeaseGrant(req.LeaseGrant.ID, req.LeaseGrant.TTL); err != nil {
			return Result{Err: err}
		}
		return Result{Resp: &pb.LeaseGrantResponse{
			Header: &pb.ResponseHeader{Revision: s.Rev()},
			ID:     req.LeaseGrant.ID,
			TTL:    req.LeaseGrant.TTL,
		}}
	case req.LeaseRevoke != nil:
		rev, err := s.LeaseRevoke(req.LeaseRevoke.ID)
		if err != nil {
			return Result{Err: err}
		}
		return Result{Resp: &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: rev}}}
	case req.ClusterMemberAttrSet != nil:
		a := req.ClusterMemberAttrSet
		m := Member{ID: a.Member_ID}
		if a.MemberAttributes != nil {
			m.Name = a.MemberAttributes.Name
			m.ClientURLs = append([]string(nil), a.MemberAttributes.ClientUrls...)
		}
		f.mu.Lock()
		f.members[m.ID] = m
		f.mu.Unlock()
		return Result{}
	case req.ClusterVersionSet != nil:
		return f.applyClusterVersion(req.ClusterVersionSet)
	default:
		// A request type this build does not know. The cluster version
		// keeps newer formats out of the log until every member reads
		// them, so this is a member older than the cluster allows:
		// refusing to go on is the only way not to drift.
		panic(fmt.Sprintf("fsm: unknown request in log entry: %s", req.String()))
	}
}
