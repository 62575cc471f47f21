package etcdserver

// This file holds the leader's proposal batcher: group commit for the Raft
// log. Concurrent proposals (this member's clients' and those followers
// forward) are gathered into one log entry in fsm's batch envelope, so that
// hashicorp/raft's per-entry costs are paid once per batch instead of once
// per request. There is no timer: a proposal that finds fewer than
// maxInflightBatches entries in flight goes at once (alone, in the single-
// request format); the others queue, and whatever queued while an entry was
// in flight goes together in the next one.

import (
	"context"
	"sync"
	"time"

	"github.com/kplane/kplane/raftstore/fsm"
)

const (
	// maxInflightBatches is how many batch entries may be between
	// raft.Apply and their apply on the leader at once. One leaves the
	// pipeline idle while a batch's answers go out and the next requests
	// come in; more splits the queue into smaller batches.
	maxInflightBatches = 2
	// maxBatchRequests and maxBatchBytes bound one entry: a follower that
	// catches up receives up to raft's MaxAppendEntries (256) entries per
	// AppendEntries, and a big entry holds up the WAL write and the
	// replication of everything behind it. A request bigger than
	// maxBatchBytes (up to MaxRequestBytes) goes alone.
	maxBatchRequests = 256
	maxBatchBytes    = 512 * 1024
)

// batcher gathers the leader's proposals into batch entries.
type batcher struct {
	s        *Server
	mu       sync.Mutex
	queue    []*pendingProposal
	inflight int
}

// pendingProposal is one marshalled request waiting for its batch.
type pendingProposal struct {
	ctx  context.Context
	data []byte
	done chan error // buffered: the batcher never blocks on a caller gone
}

// apply appends data (a marshalled InternalRaftRequest) to the Raft log in
// a batch, and waits until that batch is committed and applied here. Errors
// are applyLocal's: errNotLeaderLocal means the request was not appended and
// may be retried; any other means its outcome is unknown, the same for every
// request of the batch.
func (b *batcher) apply(ctx context.Context, data []byte) error {
	p := &pendingProposal{ctx: ctx, data: data, done: make(chan error, 1)}
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
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctxErr(ctx)
	}
}

// run sends batches until the queue is empty.
func (b *batcher) run() {
	for {
		batch := b.next()
		if batch == nil {
			return
		}
		b.send(batch)
	}
}

// next takes the next batch off the queue (nil, and one fewer runner, when
// it is empty).
func (b *batcher) next() []*pendingProposal {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, size := 0, 0
	for n < len(b.queue) && n < maxBatchRequests {
		size += len(b.queue[n].data)
		if n > 0 && size > maxBatchBytes {
			break
		}
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

// send appends one batch and answers its callers. Callers whose deadline
// already passed are answered at once and left out (their request was never
// appended, so "timed out" is exact).
func (b *batcher) send(batch []*pendingProposal) {
	live := batch[:0]
	var deadline time.Time
	size := 0
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.done <- ctxErr(p.ctx)
			continue
		}
		if dl, ok := p.ctx.Deadline(); ok && dl.After(deadline) {
			deadline = dl
		}
		size += len(p.data)
		live = append(live, p)
	}
	var data []byte
	switch len(live) {
	case 0:
		return
	case 1:
		// Alone: the plain single-request entry, as before batching.
		data = live[0].data
	default:
		// A new buffer every time: raft keeps the entry's data (in the
		// log store's memory and the replication pipeline) after Apply.
		data = make([]byte, 0, fsm.BatchSize(size, len(live)))
		for _, p := range live {
			data = fsm.AppendBatchEntry(data, p.data)
		}
	}
	err := b.s.applyRaft(deadline, data)
	for _, p := range live {
		p.done <- err
	}
}
