// Package ttlafterfinished is the TTL-after-finished controller, as
// Kubernetes': a Job with spec.ttlSecondsAfterFinished is deleted (its pods
// first: foreground propagation) that many seconds after it finished, the
// time of its Complete or Failed condition. Before deleting, it reads the
// Job again from the API service, so that a TTL extended meanwhile is
// honoured, and deletes with a uid precondition, so that a new Job of the
// same name is never taken for the old one.
package ttlafterfinished

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kplane/kplane/proto/apierrors"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	"github.com/kplane/kplane/services/client"
)

// JobClient is what the controller reads and deletes Jobs with.
type JobClient interface {
	Get(ctx context.Context, namespace, name string) (*batchv1.Job, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// Config wires a Controller. The informer is shared with other
// controllers; New adds its handlers, the caller runs it.
type Config struct {
	Jobs        JobClient
	JobInformer *client.Informer[*batchv1.Job]
	// Now is the clock (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
	// TracerProvider records a span per reconcile; nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the TTL-after-finished controller.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
}

// New returns a controller and registers its informer handlers: only
// Jobs that have a TTL and finished are queued.
func New(cfg Config) *Controller {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "ttlafterfinished"), queue: client.NewQueue("ttl_jobs_to_delete", 0, 0)}
	add := func(j *batchv1.Job) {
		if j.GetMetadata().GetDeletionTimestamp() == nil && needsCleanup(j) {
			c.queue.Add(client.Key(j))
		}
	}
	cfg.JobInformer.AddEventHandler(client.Handler[*batchv1.Job]{OnAdd: add, OnUpdate: func(_, j *batchv1.Job) { add(j) }})
	return c
}

// Run waits for the informer's cache, then reconciles with workers
// goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.JobInformer) {
		return
	}
	client.RunWorkers(ctx, c.queue, workers, client.TracedReconciler(c.cfg.TracerProvider, "ttlafterfinished.reconcile", c.cfg.JobInformer.Store(), c.Reconcile), c.log)
}

// Reconcile deletes the Job named by key if its TTL has expired, or asks to
// be called again when it will.
func (c *Controller) Reconcile(ctx context.Context, key string) (client.Result, error) {
	j, ok := c.cfg.JobInformer.Store().Get(key)
	if !ok || j.GetMetadata().GetDeletionTimestamp() != nil || !needsCleanup(j) {
		return client.Result{}, nil
	}
	if left, err := c.timeLeft(j); err != nil || left > 0 {
		return client.Result{}.Sooner(left), err
	}
	ns, name := client.SplitKey(key)
	fresh, err := c.cfg.Jobs.Get(ctx, ns, name)
	if apierrors.IsNotFound(err) {
		return client.Result{}, nil
	}
	if err != nil {
		return client.Result{}, fmt.Errorf("ttlafterfinished %s: get: %w", key, err)
	}
	if fresh.GetMetadata().GetDeletionTimestamp() != nil || !needsCleanup(fresh) {
		return client.Result{}, nil
	}
	if left, err := c.timeLeft(fresh); err != nil || left > 0 {
		return client.Result{}.Sooner(left), err
	}
	err = c.cfg.Jobs.Delete(ctx, ns, name, client.DeleteOptions{PropagationPolicy: "Foreground", UID: fresh.GetMetadata().GetUid()})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return client.Result{}, fmt.Errorf("ttlafterfinished %s: delete: %w", key, err)
	}
	c.log.Debug("deleted finished job", "job", key)
	return client.Result{}, nil
}

// needsCleanup reports whether j has a TTL and finished.
func needsCleanup(j *batchv1.Job) bool {
	_, ok := finishTime(j)
	return j.GetSpec().TtlSecondsAfterFinished != nil && ok
}

// finishTime is when j finished: its Complete or Failed condition's
// transition.
func finishTime(j *batchv1.Job) (time.Time, bool) {
	for _, cond := range j.GetStatus().GetConditions() {
		if (cond.GetType() == "Complete" || cond.GetType() == "Failed") && cond.GetStatus() == "True" {
			return cond.GetLastTransitionTime().AsTime(), cond.GetLastTransitionTime() != nil
		}
	}
	return time.Time{}, false
}

// timeLeft is how long until j's TTL expires (0 or less: expired).
func (c *Controller) timeLeft(j *batchv1.Job) (time.Duration, error) {
	at, ok := finishTime(j)
	if !ok {
		return 0, fmt.Errorf("ttlafterfinished %s: no time the Job finished", client.Key(j))
	}
	expire := at.Add(time.Duration(j.GetSpec().GetTtlSecondsAfterFinished()) * time.Second)
	return expire.Sub(c.cfg.Now()), nil
}
