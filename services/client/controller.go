// This file holds the controller loop's pieces: informer handlers that
// enqueue keys, the Reconciler type with the Result it returns and the
// terminal error it may, and the workers that reconcile keys from a queue
// with retries.

package client

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

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
// itself (level-based), since keys are deduplicated. It says when it wants
// to run again by its Result; an error requeues the key with back-off
// unless it is Terminal.
type Reconciler func(ctx context.Context, key string) (Result, error)

// Result is what a reconcile asks of the queue besides its error, as
// controller-runtime's reconcile.Result.
type Result struct {
	// RequeueAfter, if positive, reconciles the key again after this long
	// (sooner if it changes meanwhile): a wait the reconcile computed,
	// such as a deadline or a back-off of its own. It is kept when the
	// reconcile also fails: whichever of it and the error's back-off is
	// sooner runs the key again.
	RequeueAfter time.Duration
	// Requeue, without RequeueAfter, reconciles the key again after the
	// queue's per-key back-off, as an error would, without logging one.
	Requeue bool
}

// Sooner returns r with RequeueAfter lowered to d: d if r has no wait yet
// or d is sooner than it. A d that is not positive leaves r as it is, so
// a reconcile that computes several waits returns the first that falls
// due by folding each in.
func (r Result) Sooner(d time.Duration) Result {
	if d > 0 && (r.RequeueAfter <= 0 || d < r.RequeueAfter) {
		r.RequeueAfter = d
	}
	return r
}

// TerminalError is an error a retry cannot fix (a spec the controller
// cannot act on until it changes): RunWorkers logs it and forgets the key
// instead of retrying it with back-off.
type TerminalError struct{ Err error }

// Terminal wraps err as a TerminalError; nil stays nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &TerminalError{Err: err}
}

func (e *TerminalError) Error() string { return "terminal: " + e.Err.Error() }

// Unwrap returns the wrapped error, for errors.Is and errors.As.
func (e *TerminalError) Unwrap() error { return e.Err }

// IsTerminal reports whether err is, or wraps, a TerminalError.
func IsTerminal(err error) bool {
	var t *TerminalError
	return errors.As(err, &t)
}

// RunWorkers runs n workers that take keys from q and reconcile them: a
// failed key is re-added with per-key back-off (a terminal failure is
// logged and forgotten); a successful one has its back-off forgotten and is
// re-added after its Result's RequeueAfter, or with back-off for Requeue.
// It returns when ctx ends, after shutting q down and letting every worker
// finish its current key. Start it after WaitForCacheSync.
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
	res, err := reconcile(ctx, key)
	switch {
	case err != nil && ctx.Err() != nil:
		return true
	case err != nil && IsTerminal(err):
		log.Error("reconcile failed terminally; not retried", "key", key, "err", err)
		q.Forget(key)
	case err != nil:
		log.Warn("reconcile failed; requeued with back-off", "key", key, "err", err, "requeues", q.NumRequeues(key))
		q.AddRateLimited(key)
	case res.RequeueAfter > 0:
		q.Forget(key)
	case res.Requeue:
		q.AddRateLimited(key)
		return true
	default:
		q.Forget(key)
	}
	if res.RequeueAfter > 0 {
		q.AddAfter(key, res.RequeueAfter)
	}
	return true
}
