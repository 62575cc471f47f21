// Package queue is the scheduling queue: pods waiting for a node, in three
// sub-queues as kube-scheduler keeps them.
//
//   - activeQ: ready to be tried, a heap ordered by priority (higher first),
//     then by the time they entered the queue (older first).
//   - backoffQ: tried and failed; each waits out an exponential per-pod
//     back-off (initial × 2^(attempts-1), capped) before going back to activeQ.
//   - unschedulable: fit nowhere last time; they stay until a cluster
//     event that could make them fit (a node added or changed, a pod deleted
//     or terminated) moves them to backoffQ or activeQ, or until they have
//     waited MaxUnschedulableDuration.
//
// A pod is in at most one sub-queue, or "in flight" (popped and being
// tried), at a time.
package queue

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// Config tunes the queue; zero values take the defaults.
type Config struct {
	InitialBackoff           time.Duration // default 1 s
	MaxBackoff               time.Duration // default 10 s
	MaxUnschedulableDuration time.Duration // default 5 min
	// FlushInterval is how often Run moves due pods (default 100 ms).
	FlushInterval time.Duration
	// Now is the clock (default time.Now); tests pass a fake one.
	Now func() time.Time
}

// Queue is safe for concurrent use.
type Queue struct {
	cfg  Config
	mu   sync.Mutex
	cond *sync.Cond

	active        *podHeap
	backoff       *podHeap
	unschedulable map[string]*framework.PodInfo
	inFlight      map[string]bool
	// schedulingCycle counts Pops; moveRequestCycle is the cycle of the
	// last cluster event. A pod that failed in a cycle before a move
	// request goes to backoffQ rather than unschedulable: the event may
	// have made it fit while it was being tried.
	schedulingCycle  int64
	moveRequestCycle int64
	// pluginMoveCycle is, by plugin, the cycle of the last event that
	// moved only the pods that plugin rejected: a pod it rejects in a
	// cycle before that goes to backoffQ too.
	pluginMoveCycle map[string]int64
	closed          bool
}

// New returns an empty queue.
func New(cfg Config) *Queue {
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.MaxUnschedulableDuration <= 0 {
		cfg.MaxUnschedulableDuration = 5 * time.Minute
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 100 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	q := &Queue{cfg: cfg, unschedulable: map[string]*framework.PodInfo{}, inFlight: map[string]bool{}, moveRequestCycle: -1,
		pluginMoveCycle: map[string]int64{}}
	q.cond = sync.NewCond(&q.mu)
	q.active = newHeap(func(a, b *framework.PodInfo) bool {
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return a.Timestamp.Before(b.Timestamp)
	})
	q.backoff = newHeap(func(a, b *framework.PodInfo) bool { return q.backoffExpiry(a).Before(q.backoffExpiry(b)) })
	return q
}

// backoffDuration is initial × 2^(attempts-1), capped at MaxBackoff.
func (q *Queue) backoffDuration(pi *framework.PodInfo) time.Duration {
	d := q.cfg.InitialBackoff
	for i := 1; i < pi.Attempts; i++ {
		d *= 2
		if d >= q.cfg.MaxBackoff {
			return q.cfg.MaxBackoff
		}
	}
	return min(d, q.cfg.MaxBackoff)
}

func (q *Queue) backoffExpiry(pi *framework.PodInfo) time.Time {
	return pi.Timestamp.Add(q.backoffDuration(pi))
}

// Add queues a new pending pod in activeQ (or updates it where it is).
func (q *Queue) Add(pi *framework.PodInfo) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inFlight[pi.Key] {
		return
	}
	if q.replaceLocked(pi) {
		return
	}
	now := q.cfg.Now()
	pi.Timestamp, pi.InitialTimestamp = now, now
	q.active.push(pi)
	q.cond.Broadcast()
}

// replaceLocked swaps in a newer PodInfo for a queued pod, keeping its
// queue bookkeeping; it reports whether the pod was queued.
func (q *Queue) replaceLocked(pi *framework.PodInfo) bool {
	for _, h := range []*podHeap{q.active, q.backoff} {
		if old, ok := h.get(pi.Key); ok {
			copyBookkeeping(pi, old)
			h.update(pi)
			return true
		}
	}
	if old, ok := q.unschedulable[pi.Key]; ok {
		copyBookkeeping(pi, old)
		q.unschedulable[pi.Key] = pi
		return true
	}
	return false
}

func copyBookkeeping(dst, src *framework.PodInfo) {
	dst.Timestamp, dst.InitialTimestamp, dst.Attempts, dst.UnschedulablePlugins = src.Timestamp, src.InitialTimestamp, src.Attempts, src.UnschedulablePlugins
}

// Update replaces a queued pod's PodInfo. If the pod was unschedulable
// and specChanged, it may fit now: it goes to backoffQ or activeQ.
func (q *Queue) Update(pi *framework.PodInfo, specChanged bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inFlight[pi.Key] {
		return
	}
	if old, ok := q.unschedulable[pi.Key]; ok && specChanged {
		copyBookkeeping(pi, old)
		delete(q.unschedulable, pi.Key)
		q.requeueLocked(pi)
		return
	}
	if q.replaceLocked(pi) {
		return
	}
	now := q.cfg.Now()
	pi.Timestamp, pi.InitialTimestamp = now, now
	q.active.push(pi)
	q.cond.Broadcast()
}

// Delete removes a pod from every sub-queue.
func (q *Queue) Delete(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.active.remove(key)
	q.backoff.remove(key)
	delete(q.unschedulable, key)
}

// Pop blocks until a pod is in activeQ, or ctx ends or the queue is
// closed (nil, ctx's error or ErrClosed). The pod is in flight until Done.
func (q *Queue) Pop(ctx context.Context) (*framework.PodInfo, int64, error) {
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.cond.Broadcast()
	})
	defer stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.active.Len() == 0 {
		if q.closed {
			return nil, 0, ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		q.cond.Wait()
	}
	pi := q.active.pop()
	pi.Attempts++
	q.schedulingCycle++
	q.inFlight[pi.Key] = true
	return pi, q.schedulingCycle, nil
}

// Done ends a pod's time in flight (after it was assumed or re-queued).
func (q *Queue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.inFlight, key)
}

// AddUnschedulable re-queues a pod that fit nowhere in cycle: to
// unschedulable, or to backoffQ if a cluster event came during the
// attempt. The pod stops being in flight.
func (q *Queue) AddUnschedulable(pi *framework.PodInfo, cycle int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.inFlight, pi.Key)
	pi.Timestamp = q.cfg.Now()
	if q.moveRequestCycle >= cycle || q.movedForLocked(pi, cycle) {
		q.backoff.push(pi)
		return
	}
	q.unschedulable[pi.Key] = pi
}

// movedForLocked reports whether an event for one of the plugins that
// rejected pi came at or after cycle.
func (q *Queue) movedForLocked(pi *framework.PodInfo, cycle int64) bool {
	for p := range pi.UnschedulablePlugins {
		if c, ok := q.pluginMoveCycle[p]; ok && c >= cycle {
			return true
		}
	}
	return false
}

// AddBackoff re-queues a pod whose attempt or bind failed with an error:
// it retries after its back-off.
func (q *Queue) AddBackoff(pi *framework.PodInfo) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.inFlight, pi.Key)
	pi.Timestamp = q.cfg.Now()
	q.backoff.push(pi)
}

// MoveAllToActiveOrBackoff is called on a cluster event that could make
// unschedulable pods fit: each goes to activeQ if its back-off is over,
// else to backoffQ.
func (q *Queue) MoveAllToActiveOrBackoff(event string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for key, pi := range q.unschedulable {
		delete(q.unschedulable, key)
		q.requeueLocked(pi)
	}
	q.moveRequestCycle = q.schedulingCycle
}

// MoveRejectedBy is called on a cluster event that could make only the
// pods one of plugins rejected fit (a pod placed, for inter-pod affinity):
// those are moved as MoveAllToActiveOrBackoff moves every pod; the rest
// stay unschedulable.
func (q *Queue) MoveRejectedBy(event string, plugins ...string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for key, pi := range q.unschedulable {
		for _, p := range plugins {
			if pi.UnschedulablePlugins[p] {
				delete(q.unschedulable, key)
				q.requeueLocked(pi)
				break
			}
		}
	}
	for _, p := range plugins {
		q.pluginMoveCycle[p] = q.schedulingCycle
	}
}

func (q *Queue) requeueLocked(pi *framework.PodInfo) {
	if q.cfg.Now().Before(q.backoffExpiry(pi)) {
		q.backoff.push(pi)
		return
	}
	q.active.push(pi)
	q.cond.Broadcast()
}

// Flush moves the backoffQ pods whose back-off is over to activeQ, and
// the pods unschedulable for longer than MaxUnschedulableDuration out of
// unschedulable. Run calls it periodically.
func (q *Queue) Flush() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.cfg.Now()
	moved := false
	for q.backoff.Len() > 0 {
		pi := q.backoff.peek()
		if now.Before(q.backoffExpiry(pi)) {
			break
		}
		q.backoff.pop()
		q.active.push(pi)
		moved = true
	}
	for key, pi := range q.unschedulable {
		if now.Sub(pi.Timestamp) >= q.cfg.MaxUnschedulableDuration {
			delete(q.unschedulable, key)
			q.requeueLocked(pi)
		}
	}
	if moved {
		q.cond.Broadcast()
	}
}

// Run flushes every FlushInterval until ctx ends, then closes the queue.
func (q *Queue) Run(ctx context.Context) {
	t := time.NewTicker(q.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			q.Close()
			return
		case <-t.C:
			q.Flush()
		}
	}
}

// Close wakes Pop callers; Pop returns ErrClosed once activeQ is empty.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

// Lens reports the sizes of activeQ, backoffQ and unschedulable.
func (q *Queue) Lens() (active, backoff, unschedulable int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.active.Len(), q.backoff.Len(), len(q.unschedulable)
}

// Where reports which sub-queue holds key: "active", "backoff",
// "unschedulable", "inflight" or "".
func (q *Queue) Where(key string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.inFlight[key]:
		return "inflight"
	case q.active.has(key):
		return "active"
	case q.backoff.has(key):
		return "backoff"
	case q.unschedulable[key] != nil:
		return "unschedulable"
	}
	return ""
}

// ErrClosed is returned by Pop after Close.
var ErrClosed = errClosed{}

type errClosed struct{}

func (errClosed) Error() string { return "queue: closed" }

// podHeap is a heap of pods with O(log n) update and removal by key.
type podHeap struct {
	items []*framework.PodInfo
	index map[string]int
	less  func(a, b *framework.PodInfo) bool
}

func newHeap(less func(a, b *framework.PodInfo) bool) *podHeap {
	return &podHeap{index: map[string]int{}, less: less}
}

func (h *podHeap) Len() int           { return len(h.items) }
func (h *podHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *podHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.index[h.items[i].Key] = i
	h.index[h.items[j].Key] = j
}
func (h *podHeap) Push(x any) {
	pi := x.(*framework.PodInfo)
	h.index[pi.Key] = len(h.items)
	h.items = append(h.items, pi)
}
func (h *podHeap) Pop() any {
	n := len(h.items)
	pi := h.items[n-1]
	h.items[n-1] = nil
	h.items = h.items[:n-1]
	delete(h.index, pi.Key)
	return pi
}

func (h *podHeap) push(pi *framework.PodInfo) {
	if _, ok := h.index[pi.Key]; ok {
		h.update(pi)
		return
	}
	heap.Push(h, pi)
}
func (h *podHeap) pop() *framework.PodInfo  { return heap.Pop(h).(*framework.PodInfo) }
func (h *podHeap) peek() *framework.PodInfo { return h.items[0] }
func (h *podHeap) has(key string) bool      { _, ok := h.index[key]; return ok }
func (h *podHeap) get(key string) (*framework.PodInfo, bool) {
	i, ok := h.index[key]
	if !ok {
		return nil, false
	}
	return h.items[i], true
}
func (h *podHeap) update(pi *framework.PodInfo) {
	i := h.index[pi.Key]
	h.items[i] = pi
	heap.Fix(h, i)
}
func (h *podHeap) remove(key string) {
	if i, ok := h.index[key]; ok {
		heap.Remove(h, i)
	}
}
