// This file holds the test of RunWorkers: every key reconciled, never twice
// at once, failures retried with back-off.

package client

import (
	"context"
	"errors"
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
	reconcile := func(_ context.Context, key string) error {
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
			return errors.New("not yet")
		}
		if key == "ns/flaky" {
			okFlaky.Store(true)
		} else {
			okSteady.Store(true)
		}
		if okFlaky.Load() && okSteady.Load() {
			once.Do(func() { close(done) })
		}
		return nil
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
