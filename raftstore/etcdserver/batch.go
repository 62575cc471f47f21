// This file holds proposal batching: group commit for the Raft log. On the
// leader, concurrent proposals (this member's clients' and the groups
// followers forward) are gathered into one log entry in fsm's batch
// envelope, so that hashicorp/raft's per-entry costs (a future, a msgpack
// Log in every AppendEntries to every follower, WAL and FSM bookkeeping) are
// paid once per batch instead of once per request. On a follower, the
// proposals it forwards are gathered the same way into one call of the
// leader's peer service, instead of a gRPC call each.
//
// There is no timer: a proposal that finds no batch in flight goes at once
// (alone, in the plain single-request format); the others queue, and
// whatever queued while a batch was in flight goes together in the next one.

package etcdserver

import (
	"context"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/raftstore/fsm"
)

const (
	// maxInflightBatches is how many batches may be in flight at once
	// (between raft.Apply and the apply on the leader, or in a forwarding
	// call). Measured on the put benchmark (BENCHMARKS.md, store section):
	// 2 cost 5% more CPU per put than 1 for the same throughput, as the
	// queue splits into smaller batches.
	maxInflightBatches = 1
	// maxBatchRequests and maxBatchBytes bound one batch: a follower that
	// catches up receives up to raft's MaxAppendEntries (256) entries per
	// AppendEntries, and a big entry holds up the WAL write and the
	// replication of everything behind it. A request bigger than
	// maxBatchBytes (up to MaxRequestBytes) goes alone.
	maxBatchRequests = 256
	maxBatchBytes    = 512 * 1024
)

// batcher gathers proposals into batches and hands each batch to send.
type batcher struct {
	// send delivers one batch of marshalled InternalRaftRequests, in
	// order, within ctx, and returns what every caller of the batch gets:
	// an applied index and an error, the same for all of them.
	send func(ctx context.Context, reqs [][]byte) (uint64, error)

	mu       sync.Mutex
	queue    []*pendingProposal
	inflight int
}

// pendingProposal is one caller's requests waiting for their batch; they
// stay together in one batch.
type pendingProposal struct {
	ctx  context.Context
	reqs [][]byte
	size int
	done chan batchResult // buffered: the batcher never blocks on a caller gone
}

type batchResult struct {
	idx uint64
	err error
}

// do queues reqs (marshalled InternalRaftRequests, applied in this order
// in one entry) and waits for their batch's result.
func (b *batcher) do(ctx context.Context, reqs ...[]byte) (uint64, error) {
	p := &pendingProposal{ctx: ctx, reqs: reqs, done: make(chan batchResult, 1)}
	for _, r := range reqs {
		p.size += len(r)
	}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	start := b.inflight < maxInflightBatches
	if start {
		b.inflight++
	}
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case r := <-p.done:
		return r.idx, r.err
	case <-ctx.Done():
		return 0, ctxErr(ctx)
	}
}

// run sends batches until the queue is empty.
func (b *batcher) run() {
	for {
		batch := b.next()
		if batch == nil {
			return
		}
		b.flush(batch)
	}
}

// next takes the next batch off the queue (nil, and one fewer runner, when
// it is empty).
func (b *batcher) next() []*pendingProposal {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, count, size := 0, 0, 0
	for n < len(b.queue) {
		p := b.queue[n]
		if n > 0 && (count+len(p.reqs) > maxBatchRequests || size+p.size > maxBatchBytes) {
			break
		}
		count += len(p.reqs)
		size += p.size
		n++
	}
	if n == 0 {
		b.inflight--
		b.queue = nil
		return nil
	}
	batch := make([]*pendingProposal, n)
	copy(batch, b.queue)
	clear(b.queue[:n])
	b.queue = b.queue[n:]
	return batch
}

// flush sends one batch and answers its callers. Callers whose context is
// already done are answered at once and left out (their requests were never
// sent, so "timed out" is exact).
func (b *batcher) flush(batch []*pendingProposal) {
	live := batch[:0]
	var deadline time.Time
	n := 0
	for _, p := range batch {
		if p.ctx.Err() != nil {
			p.done <- batchResult{err: ctxErr(p.ctx)}
			continue
		}
		if dl, ok := p.ctx.Deadline(); ok && dl.After(deadline) {
			deadline = dl
		}
		n += len(p.reqs)
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	var ctx context.Context
	var cancel context.CancelFunc
	if len(live) == 1 {
		// One caller: its own context (and trace) carries the call.
		ctx, cancel = context.WithCancel(live[0].ctx)
	} else {
		// Several: the batch outlives any one caller giving up, until the
		// last deadline.
		ctx, cancel = context.WithDeadline(context.Background(), deadline)
	}
	reqs := make([][]byte, 0, n)
	for _, p := range live {
		reqs = append(reqs, p.reqs...)
	}
	idx, err := b.send(ctx, reqs)
	cancel()
	for _, p := range live {
		p.done <- batchResult{idx, err}
	}
}

// entryData is the log entry holding reqs: the plain request when there is
// one, as before batching, the batch envelope otherwise. It is a new buffer
// each time: raft keeps an entry's data (in the log store's memory and the
// replication pipeline) after Apply.
func entryData(reqs [][]byte) []byte {
	if len(reqs) == 1 {
		return reqs[0]
	}
	size := 0
	for _, r := range reqs {
		size += len(r)
	}
	return fsm.AppendBatch(make([]byte, 0, fsm.BatchSize(size, len(reqs))), reqs...)
}

// appendBatch is the leader's send: one log entry, applied here.
func (s *Server) appendBatch(ctx context.Context, reqs [][]byte) (uint64, error) {
	dl, _ := ctx.Deadline()
	return 0, s.applyRaft(dl, entryData(reqs))
}

// forwardBatch is a follower's send: one ProposeBatch call of the leader's
// peer service, whose answer is an index at or above the batch's entry,
// applied on the leader. Errors are the call's, for submit to sort out
// (retry or give up).
func (s *Server) forwardBatch(ctx context.Context, reqs [][]byte) (uint64, error) {
	pc, err := s.leaderPeer(ctx)
	if err != nil {
		return 0, err
	}
	size := 0
	for _, r := range reqs {
		size += len(r)
	}
	return pc.ProposeBatch(ctx, fsm.AppendBatch(make([]byte, 0, fsm.BatchSize(size, len(reqs))), reqs...))
}

// splitForwarded checks a batch a follower forwarded and returns its
// requests.
func (s *Server) splitForwarded(data []byte) ([][]byte, error) {
	reqs, err := fsm.SplitBatch(data)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "forwarded batch: %v", err)
	}
	if len(reqs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "forwarded batch: empty")
	}
	for i, r := range reqs {
		if len(r) > s.cfg.MaxRequestBytes {
			return nil, toGRPCError(errRequestTooBig)
		}
		var req pb.InternalRaftRequest
		if err := req.Unmarshal(r); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "forwarded batch: request %d: %v", i, err)
		}
		if err := fsm.CheckRequest(&req); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "forwarded batch: request %d: %v", i, err)
		}
	}
	return reqs, nil
}
