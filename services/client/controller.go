// This file holds the controller loop's pieces: informer handlers that
// enqueue keys, the Reconciler type, and the workers that reconcile keys
// from a queue with retries.

package client

import (
	"context"
	"log/slog"
	"sync"

	"google.golang.org/protobuf/proto"
)

// EnqueueHandler returns informer handlers that add the key of every added,
// updated or deleted object to q: the usual glue between an informer and a
// reconcile loop.
func EnqueueHandler[T proto.Message](q Queue) Handler[T] {
	return Handler[T]{
		OnAdd:    func(o T) { q.Add(Key(o)) },
		OnUpdate: func(_, o T) { q.Add(Key(o)) },
		OnDelete: func(o T) { q.Add(Key(o)) },
	}
}

// Reconciler brings the world in line with the object named by key
// ("namespace/name"); it must be idempotent and read the current state
// itself (level-based), since keys are deduplicated. An error requeues the
// key with back-off.
type Reconciler func(ctx context.Context, key string) error

// RunWorkers runs n workers that take keys from q and reconcile them: a
// failed key is re-added with per-key back-off, a successful one has its
// back-off forgotten. It returns when ctx ends, after shutting q down and
// letting every worker finish its current key. Start it after
// WaitForCacheSync.
func RunWorkers(ctx context.Context, q Queue, n int, reconcile Reconciler, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var wg sync.WaitGroup
	for range max(n, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for processNext(ctx, q, reconcile, log) {
			}
		}()
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
}

func processNext(ctx context.Context, q Queue, reconcile Reconciler, log *slog.Logger) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	if err := reconcile(ctx, key); err != nil {
		if ctx.Err() != nil {
			return true
		}
		log.Warn("reconcile failed; requeued with back-off", "key", key, "err", err, "requeues", q.NumRequeues(key))
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}
