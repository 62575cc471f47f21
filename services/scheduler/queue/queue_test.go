// This file holds the scheduling queue's tests: active order, unschedulable
// pods moved by cluster events or a timeout, exponential back-off, updates
// and deletes, and Pop.

package queue_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/queue"
)

// clock is a fake clock tests advance by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newQueue() (*queue.Queue, *clock) {
	c := &clock{t: time.Unix(1000, 0)}
	return queue.New(queue.Config{InitialBackoff: time.Second, MaxBackoff: 8 * time.Second, MaxUnschedulableDuration: time.Minute, Now: c.now}), c
}

func prio(name string, p int32) *framework.PodInfo {
	return fixture.Pod(name, "", "", func(pod *corev1.Pod) { pod.Spec.Priority = &p })
}

func pop(t *testing.T, q *queue.Queue) (*framework.PodInfo, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pi, cycle, err := q.Pop(ctx)
	if err != nil {
		t.Fatalf("Pop: %v", err)
	}
	return pi, cycle
}

func TestActiveOrder(t *testing.T) {
	q, c := newQueue()
	q.Add(prio("low-old", 0))
	c.step(time.Millisecond)
	q.Add(prio("high", 10))
	c.step(time.Millisecond)
	q.Add(prio("low-new", 0))
	var got []string
	for range 3 {
		pi, _ := pop(t, q)
		got = append(got, pi.Pod.Metadata.Name)
	}
	want := []string{"high", "low-old", "low-new"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pop order: got %v, want %v", got, want)
		}
	}
}

func TestUnschedulableMovedByClusterEvent(t *testing.T) {
	tests := []struct {
		name    string
		elapsed time.Duration // since the failed attempt, before the event
		want    string        // where the pod goes
	}{
		{name: "back-off over: straight to activeQ", elapsed: 2 * time.Second, want: "active"},
		{name: "back-off running: to backoffQ", elapsed: 100 * time.Millisecond, want: "backoff"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, c := newQueue()
			q.Add(prio("p", 0))
			pi, cycle := pop(t, q)
			q.AddUnschedulable(pi, cycle)
			if got := q.Where(pi.Key); got != "unschedulable" {
				t.Fatalf("after failure: got %q, want unschedulable", got)
			}
			q.Flush()
			if got := q.Where(pi.Key); got != "unschedulable" {
				t.Fatalf("flush without event: got %q, want unschedulable", got)
			}
			c.step(tc.elapsed)
			q.MoveAllToActiveOrBackoff("NodeAdd")
			if got := q.Where(pi.Key); got != tc.want {
				t.Fatalf("after NodeAdd: got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEventDuringAttemptSendsToBackoff(t *testing.T) {
	q, _ := newQueue()
	q.Add(prio("p", 0))
	pi, cycle := pop(t, q)
	// A node appears while the pod is being tried: it must not be parked
	// as unschedulable, or it would wait for the next event.
	q.MoveAllToActiveOrBackoff("NodeAdd")
	q.AddUnschedulable(pi, cycle)
	if got := q.Where(pi.Key); got != "backoff" {
		t.Fatalf("got %q, want backoff", got)
	}
}

func TestExponentialBackoff(t *testing.T) {
	q, c := newQueue()
	q.Add(prio("p", 0))
	// Attempts 1..5 wait 1s, 2s, 4s, 8s, 8s (capped).
	for attempt, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		pi, _ := pop(t, q)
		if pi.Attempts != attempt+1 {
			t.Fatalf("attempts: got %d, want %d", pi.Attempts, attempt+1)
		}
		q.AddBackoff(pi)
		c.step(wait - time.Millisecond)
		q.Flush()
		if got := q.Where(pi.Key); got != "backoff" {
			t.Fatalf("attempt %d, just before %v: got %q, want backoff", attempt+1, wait, got)
		}
		c.step(time.Millisecond)
		q.Flush()
		if got := q.Where(pi.Key); got != "active" {
			t.Fatalf("attempt %d, after %v: got %q, want active", attempt+1, wait, got)
		}
	}
}

func TestUnschedulableTimeout(t *testing.T) {
	q, c := newQueue()
	q.Add(prio("p", 0))
	pi, cycle := pop(t, q)
	q.AddUnschedulable(pi, cycle)
	c.step(time.Minute)
	q.Flush()
	if got := q.Where(pi.Key); got != "active" {
		t.Fatalf("after MaxUnschedulableDuration: got %q, want active", got)
	}
}

func TestUpdateAndDelete(t *testing.T) {
	q, c := newQueue()
	q.Add(prio("p", 0))
	pi, cycle := pop(t, q)
	q.AddUnschedulable(pi, cycle)
	c.step(5 * time.Second)
	// A status-only update keeps it parked; a spec change may make it fit.
	q.Update(prio("p", 0), false)
	if got := q.Where(pi.Key); got != "unschedulable" {
		t.Fatalf("status update: got %q, want unschedulable", got)
	}
	q.Update(prio("p", 0), true)
	if got := q.Where(pi.Key); got != "active" {
		t.Fatalf("spec update: got %q, want active", got)
	}
	q.Delete(pi.Key)
	if got := q.Where(pi.Key); got != "" {
		t.Fatalf("after delete: got %q, want nowhere", got)
	}
}

func TestInFlightNotDuplicated(t *testing.T) {
	q, _ := newQueue()
	q.Add(prio("p", 0))
	pi, _ := pop(t, q)
	q.Add(prio("p", 0))
	q.Update(prio("p", 0), true)
	if got := q.Where(pi.Key); got != "inflight" {
		t.Fatalf("got %q, want inflight", got)
	}
	if a, b, u := q.Lens(); a+b+u != 0 {
		t.Fatalf("queues hold %d/%d/%d, want empty", a, b, u)
	}
	q.Done(pi.Key)
	if got := q.Where(pi.Key); got != "" {
		t.Fatalf("after Done: got %q, want nowhere", got)
	}
}

func TestPopUnblocks(t *testing.T) {
	q, _ := newQueue()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, _, err := q.Pop(ctx); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Pop after cancel: got %v, want context.Canceled", err)
	}
	q.Close()
	if _, _, err := q.Pop(context.Background()); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Pop after Close: got %v, want ErrClosed", err)
	}
}

// TestMoveRejectedBy: an event for some plugins moves only the pods one of
// them rejected, and sends a pod one of them rejects during the event's
// attempt to backoffQ.
func TestMoveRejectedBy(t *testing.T) {
	tests := []struct {
		name     string
		rejected string // the plugin that rejected the pod
		want     string
	}{
		{name: "rejected by InterPodAffinity: moved", rejected: "InterPodAffinity", want: "active"},
		{name: "rejected by NodeResourcesFit: stays", rejected: "NodeResourcesFit", want: "unschedulable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, c := newQueue()
			q.Add(prio("p", 0))
			pi, cycle := pop(t, q)
			pi.UnschedulablePlugins = map[string]bool{tc.rejected: true}
			q.AddUnschedulable(pi, cycle)
			c.step(2 * time.Second)
			q.MoveRejectedBy("AssignedPodAdd", "InterPodAffinity", "PodTopologySpread")
			if got := q.Where(pi.Key); got != tc.want {
				t.Fatalf("after AssignedPodAdd: got %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("event during the attempt", func(t *testing.T) {
		q, _ := newQueue()
		q.Add(prio("a", 0))
		q.Add(prio("b", 0))
		a, ca := pop(t, q)
		b, cb := pop(t, q)
		q.MoveRejectedBy("AssignedPodAdd", "PodTopologySpread")
		a.UnschedulablePlugins = map[string]bool{"PodTopologySpread": true}
		b.UnschedulablePlugins = map[string]bool{"NodeResourcesFit": true}
		q.AddUnschedulable(a, ca)
		q.AddUnschedulable(b, cb)
		if got := q.Where(a.Key); got != "backoff" {
			t.Errorf("pod the event's plugin rejected: got %q, want backoff", got)
		}
		if got := q.Where(b.Key); got != "unschedulable" {
			t.Errorf("pod another plugin rejected: got %q, want unschedulable", got)
		}
	})
}
