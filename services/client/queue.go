// This file holds the work queue controllers take keys from: client-go's
// rate-limited queue, with per-key exponential back-off.

package client

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
)

// Queue is a rate-limited work queue of object keys with client-go's
// semantics: a key added several times before it is processed is processed
// once; a key being processed (between Get and Done) is never handed to a
// second worker, and if it is added meanwhile it is processed again after
// Done; AddRateLimited re-adds a key after a per-key exponential back-off
// that Forget resets.
//
// Workers loop: key, shutdown := q.Get(); if shutdown return; res, err :=
// reconcile(key); if err != nil { q.AddRateLimited(key) } else { q.Forget(key) };
// if res.RequeueAfter > 0 { q.AddAfter(key, res.RequeueAfter) }; q.Done(key)
// (RunWorkers).
type Queue = workqueue.TypedRateLimitingInterface[string]

// NewQueue returns a queue with per-key exponential back-off from
// baseDelay to maxDelay (defaults 5 ms and 1000 s, as client-go's controllers
// use) combined with an overall token bucket of 10 qps, burst 100.
func NewQueue(name string, baseDelay, maxDelay time.Duration) Queue {
	if baseDelay <= 0 {
		baseDelay = 5 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = 1000 * time.Second
	}
	limiter := workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](baseDelay, maxDelay),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
	return workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}
