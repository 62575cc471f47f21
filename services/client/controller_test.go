// This file holds the tests of RunWorkers: every key reconciled, never
// twice at once, failures retried with back-off, terminal failures dropped,
// and a Result's requeue honoured.

package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunWorkers(t *testing.T) {
	noLeaks(t)
	q := NewQueue("workers", time.Millisecond, 10*time.Millisecond)
	var (
		mu       sync.Mutex
		attempts = map[string]int{}
		active   = map[string]int{}
		overlap  atomic.Bool
		done     = make(chan struct{})
		okSteady atomic.Bool
		okFlaky  atomic.Bool
		once     sync.Once
	)
	reconcile := func(_ context.Context, key string) (Result, error) {
		mu.Lock()
		attempts[key]++
		n := attempts[key]
		active[key]++
		if active[key] > 1 {
			overlap.Store(true)
		}
		mu.Unlock()
		time.Sleep(time.Millisecond) // widen any overlap window
		mu.Lock()
		active[key]--
		mu.Unlock()
		if key == "ns/flaky" && n < 3 {
			return Result{}, errors.New("not yet")
		}
		if key == "ns/flaky" {
			okFlaky.Store(true)
		} else {
			okSteady.Store(true)
		}
		if okFlaky.Load() && okSteady.Load() {
			once.Do(func() { close(done) })
		}
		return Result{}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); RunWorkers(ctx, q, 4, reconcile, nil) }()
	for range 20 {
		q.Add("ns/steady") // deduplicated while queued; re-added while processing
	}
	q.Add("ns/flaky")
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("keys were not reconciled")
	}
	cancel()
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	if attempts["ns/flaky"] != 3 {
		t.Errorf("flaky key: got %d attempts, want 3 (two failures re-queued with back-off)", attempts["ns/flaky"])
	}
	if attempts["ns/steady"] < 1 || attempts["ns/steady"] > 20 {
		t.Errorf("steady key: got %d attempts, want between 1 and 20", attempts["ns/steady"])
	}
	if overlap.Load() {
		t.Error("one key was reconciled by two workers at once")
	}
	if !q.ShuttingDown() {
		t.Error("queue not shut down after RunWorkers returned")
	}
}

// recordingQueue is a real queue that records the calls a worker makes on
// it after reconciling a key.
type recordingQueue struct {
	Queue
	calls []string
}

func (q *recordingQueue) AddRateLimited(key string) {
	q.calls = append(q.calls, "AddRateLimited")
	q.Queue.AddRateLimited(key)
}

func (q *recordingQueue) Forget(key string) {
	q.calls = append(q.calls, "Forget")
	q.Queue.Forget(key)
}

func (q *recordingQueue) AddAfter(key string, d time.Duration) {
	q.calls = append(q.calls, fmt.Sprintf("AddAfter %v", d))
	q.Queue.AddAfter(key, d)
}

func TestProcessNextResult(t *testing.T) {
	noLeaks(t)
	fail := errors.New("boom")
	for _, tc := range []struct {
		name string
		res  Result
		err  error
		want []string
	}{
		{"success", Result{}, nil, []string{"Forget"}},
		{"requeue after", Result{RequeueAfter: time.Hour}, nil, []string{"Forget", "AddAfter 1h0m0s"}},
		{"requeue with back-off", Result{Requeue: true}, nil, []string{"AddRateLimited"}},
		{"requeue after wins over requeue", Result{Requeue: true, RequeueAfter: time.Hour}, nil, []string{"Forget", "AddAfter 1h0m0s"}},
		{"error", Result{}, fail, []string{"AddRateLimited"}},
		{"error keeps its wait", Result{RequeueAfter: time.Hour}, fail, []string{"AddRateLimited", "AddAfter 1h0m0s"}},
		{"terminal error", Result{}, fmt.Errorf("sync: %w", Terminal(fail)), []string{"Forget"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &recordingQueue{Queue: NewQueue("record", time.Hour, time.Hour)}
			defer q.ShutDown()
			q.Add("ns/a")
			var got string
			ok := processNext(context.Background(), q, func(_ context.Context, key string) (Result, error) {
				got = key
				return tc.res, tc.err
			}, slog.New(slog.DiscardHandler))
			if !ok || got != "ns/a" {
				t.Fatalf("processNext = %v reconciling %q, want true reconciling ns/a", ok, got)
			}
			if !slices.Equal(q.calls, tc.want) {
				t.Errorf("queue calls %q, want %q", q.calls, tc.want)
			}
			// Nothing is queued at once: every requeue waits (back-off of
			// an hour, or RequeueAfter), and the rest drop the key.
			if n := q.Len(); n != 0 {
				t.Errorf("%d keys queued at once, want 0", n)
			}
			wantRequeues := 0
			if slices.Contains(tc.want, "AddRateLimited") {
				wantRequeues = 1
			}
			if n := q.NumRequeues("ns/a"); n != wantRequeues {
				t.Errorf("NumRequeues = %d, want %d", n, wantRequeues)
			}
		})
	}
}

func TestTerminal(t *testing.T) {
	if Terminal(nil) != nil {
		t.Error("Terminal(nil) is not nil")
	}
	base := errors.New("bad spec")
	err := fmt.Errorf("reconcile: %w", Terminal(base))
	if !IsTerminal(err) || !errors.Is(err, base) {
		t.Errorf("IsTerminal = %v, errors.Is(base) = %v; want both true", IsTerminal(err), errors.Is(err, base))
	}
	if IsTerminal(base) {
		t.Error("a plain error is terminal")
	}
}

func TestResultSooner(t *testing.T) {
	for _, tc := range []struct {
		have, d, want time.Duration
	}{
		{0, time.Second, time.Second},
		{time.Second, 2 * time.Second, time.Second},
		{2 * time.Second, time.Second, time.Second},
		{time.Second, 0, time.Second},
		{time.Second, -time.Second, time.Second},
		{0, -time.Second, 0},
	} {
		if got := (Result{RequeueAfter: tc.have}).Sooner(tc.d).RequeueAfter; got != tc.want {
			t.Errorf("Result{%v}.Sooner(%v) = %v, want %v", tc.have, tc.d, got, tc.want)
		}
	}
}
