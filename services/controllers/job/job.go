// Package job is the Job controller, as Kubernetes v1.33's: it runs each
// batch/v1 Job's pods (parallelism, completions, NonIndexed or Indexed),
// replaces failed ones after an exponential back-off until backoffLimit,
// stops at activeDeadlineSeconds, deletes the pods of a suspended Job and
// reports status through jobs/status.
//
// Every pod it creates carries the batch.kubernetes.io/job-tracking
// finalizer, so that a finished pod stays until it is counted: its UID goes
// into status.uncountedTerminatedPods first (one status write), then the
// finalizer is removed, then the UID moves into the succeeded or failed
// counter (another status write). Whatever the controller was doing when
// it stopped, the next one finds each finished pod either still holding
// the finalizer (not counted) or listed as uncounted, and counts it once.
//
// A finished Job gets the interim condition first (SuccessCriteriaMet or
// FailureTarget), then, once no pod is left running or uncounted, the
// terminal one (Complete with completionTime, or Failed), as v1.33 does.
//
// podFailurePolicy, podReplacementPolicy, successPolicy,
// backoffLimitPerIndex and maxFailedIndexes act as on Kubernetes; a Job
// whose managedBy names another controller is left to it.
//
// Like Kubernetes' controller, it adopts orphan pods that match a Job's
// selector and releases its pods that no longer do.
package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/proto/apierrors"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubeconv"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// Names Kubernetes gives the Job's pods' labels, annotations and finalizer.
const (
	TrackingFinalizer      = "batch.kubernetes.io/job-tracking"
	CompletionIndexKey     = "batch.kubernetes.io/job-completion-index"
	completionIndexEnvName = "JOB_COMPLETION_INDEX"
)

// Defaults of Config, Kubernetes' values.
const (
	DefaultPodFailureBackoff = 10 * time.Second
	MaxPodFailureBackoff     = 10 * time.Minute
	// maxPodChangesPerSync caps the pods one sync creates or deletes.
	maxPodChangesPerSync = 500
	// maxUncountedPods caps the UIDs one sync adds to
	// uncountedTerminatedPods (Kubernetes' MaxUncountedPods).
	maxUncountedPods = 500
)

// PodClient is what the controller writes pods with (*client.Client[*corev1.Pod]).
type PodClient interface {
	Get(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	Create(ctx context.Context, obj *corev1.Pod) (*corev1.Pod, error)
	Update(ctx context.Context, obj *corev1.Pod) (*corev1.Pod, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// JobClient is what the controller writes Job status with.
type JobClient interface {
	Get(ctx context.Context, namespace, name string) (*batchv1.Job, error)
	UpdateStatus(ctx context.Context, obj *batchv1.Job) (*batchv1.Job, error)
}

// Config wires a Controller. The informers are shared with other
// controllers; New adds its handlers, the caller runs them.
type Config struct {
	Pods        PodClient
	Jobs        JobClient
	PodInformer *client.Informer[*corev1.Pod]
	JobInformer *client.Informer[*batchv1.Job]
	Recorder    *client.Recorder // nil records nothing
	// PodFailureBackoff is the delay before the first replacement of a
	// failed pod, doubled for each further failure since the last success
	// up to MaxBackoff (defaults 10 s and 10 min, as Kubernetes).
	PodFailureBackoff, MaxBackoff time.Duration
	// Now is the clock (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
	// TracerProvider records a span per reconcile, in the trace of the
	// object's last change; nil uses the global one.
	TracerProvider trace.TracerProvider
}

// backoffRecord is, per Job, how many pods failed since the last success
// and when the last of them finished: the back-off before the next pod.
type backoffRecord struct {
	failures    int
	lastFailure time.Time
}

// Controller is the Job controller.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
	// orphans are the keys of pods holding the tracking finalizer with no
	// controller (orphaned when their Job was deleted): no Job will count
	// them, so their finalizer goes.
	orphans client.Queue
	exp     *ctrl.Expectations

	mu      sync.Mutex
	backoff map[string]backoffRecord // by Job key
}

// New returns a controller and registers its informer handlers.
func New(cfg Config) *Controller {
	if cfg.PodFailureBackoff <= 0 {
		cfg.PodFailureBackoff = DefaultPodFailureBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = MaxPodFailureBackoff
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "job"), queue: client.NewQueue("job", 0, 0), orphans: client.NewQueue("job_orphan_pod", 0, 0),
		exp: ctrl.NewExpectations(), backoff: map[string]backoffRecord{}}
	orphaned := func(p *corev1.Pod) {
		if ctrl.ControllerRef(p) == nil && ctrl.HasFinalizer(p.GetMetadata(), TrackingFinalizer) {
			c.orphans.Add(client.Key(p))
		}
	}
	cfg.JobInformer.AddEventHandler(client.EnqueueHandler[*batchv1.Job](c.queue))
	cfg.PodInformer.AddEventHandler(client.Handler[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) {
			if k := ownerKey(p); k != "" {
				if p.GetMetadata().GetDeletionTimestamp() != nil {
					c.exp.DeletionObserved(k, client.Key(p))
				} else {
					c.exp.CreationObserved(k)
				}
				c.queue.Add(k)
			}
			orphaned(p)
		},
		OnUpdate: func(o, p *corev1.Pod) {
			k := ownerKey(p)
			if k != "" && p.GetMetadata().GetDeletionTimestamp() != nil && o.GetMetadata().GetDeletionTimestamp() == nil {
				c.exp.DeletionObserved(k, client.Key(p))
			}
			if ok := ownerKey(o); ok != "" && ok != k {
				c.queue.Add(ok)
			}
			if k != "" {
				c.queue.Add(k)
			}
			orphaned(p)
		},
		OnDelete: func(p *corev1.Pod) {
			if k := ownerKey(p); k != "" {
				c.exp.DeletionObserved(k, client.Key(p))
				c.queue.Add(k)
			}
		},
	})
	return c
}

// ownerKey is the key of the Job controlling p, or "".
func ownerKey(p *corev1.Pod) string {
	r := ctrl.ControllerRef(p)
	if r == nil || r.GetKind() != "Job" || r.GetApiVersion() != "batch/v1" {
		return ""
	}
	return client.KeyOf(p.GetMetadata().GetNamespace(), r.GetName())
}

// Run waits for the informers' caches, then reconciles with workers
// goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	defer c.orphans.ShutDown()
	if !client.WaitForCacheSync(ctx, c.cfg.PodInformer, c.cfg.JobInformer) {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		client.RunWorkers(ctx, c.orphans, 1, c.releaseOrphanPod, c.log)
	}()
	client.RunWorkers(ctx, c.queue, workers, client.TracedReconciler(c.cfg.TracerProvider, "job.reconcile", c.cfg.JobInformer.Store(), c.Reconcile), c.log)
	<-done
}

// releaseOrphanPod removes the tracking finalizer from the pod named by
// key if it still has no controller.
func (c *Controller) releaseOrphanPod(ctx context.Context, key string) (client.Result, error) {
	p, ok := c.cfg.PodInformer.Store().Get(key)
	orphan := func(p *corev1.Pod) bool { return ctrl.ControllerRef(p) == nil }
	if !ok || !orphan(p) {
		return client.Result{}, nil
	}
	// Checked again on every re-read: a Job may adopt it meanwhile, and
	// its finalizer is then that Job's.
	return client.Result{}, c.removeFinalizer(ctx, p, orphan)
}

// sync is one reconcile's view of a Job.
type jobSync struct {
	job        *batchv1.Job
	pods       []*corev1.Pod // owned by the Job
	active     []*corev1.Pod
	terminated int32 // being deleted, not finished
	ready      int32
	// uncounted are status.uncountedTerminatedPods, as sets.
	uncountedSucceeded, uncountedFailed map[string]bool
	succeeded, failed                   int32
	// succeededIndexes are an Indexed Job's completed indexes.
	succeededIndexes map[int]bool
	// failedIndexes are an Indexed Job's failed indexes, with
	// backoffLimitPerIndex (nil without).
	failedIndexes map[int]bool
	// finished is the condition the Job is to end with (interim type:
	// SuccessCriteriaMet or FailureTarget), nil while it runs.
	finished *batchv1.JobCondition
	// requeue is when the sync asks to run again: the first of the
	// active deadline and the pod-creation back-offs it waits out.
	requeue client.Result
}

// Reconcile brings the Job named by key toward its spec and writes its
// status.
func (c *Controller) Reconcile(ctx context.Context, key string) (client.Result, error) {
	cached, ok := c.cfg.JobInformer.Store().Get(key)
	if !ok {
		c.exp.Delete(key)
		c.forget(key)
		return client.Result{}, c.releaseOrphans(ctx, key, "")
	}
	job := proto.Clone(cached).(*batchv1.Job)
	if managedElsewhere(job) {
		return client.Result{}, nil
	}
	if jobFinished(job) {
		// Counted already; what is left of its pods may go.
		return client.Result{}, c.releaseOrphans(ctx, key, job.GetMetadata().GetUid())
	}
	if job.Status == nil {
		job.Status = &batchv1.JobStatus{}
	}
	st := job.Status
	if st.UncountedTerminatedPods == nil {
		st.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	}
	satisfied := c.exp.Satisfied(key)
	sel, err := kubeconv.Selector(job.GetSpec().GetSelector())
	if err != nil {
		return client.Result{}, fmt.Errorf("job %s: selector: %w", key, err)
	}
	s := &jobSync{job: job, uncountedSucceeded: set(st.UncountedTerminatedPods.Succeeded), uncountedFailed: set(st.UncountedTerminatedPods.Failed)}
	if s.pods, err = c.claimPods(ctx, job, sel); err != nil {
		return client.Result{}, err
	}
	var newSucceeded, newFailed []*corev1.Pod
	for _, p := range s.pods {
		switch {
		case ctrl.PodActive(p):
			s.active = append(s.active, p)
			if ready, _ := ctrl.PodReady(p); ready {
				s.ready++
			}
		case p.GetMetadata().GetDeletionTimestamp() != nil && !podTerminal(p):
			s.terminated++
		}
		if !ctrl.HasFinalizer(p.GetMetadata(), TrackingFinalizer) {
			continue
		}
		uid := p.GetMetadata().GetUid()
		switch {
		case p.GetStatus().GetPhase() == "Succeeded" && !s.uncountedSucceeded[uid] && !s.uncountedFailed[uid]:
			newSucceeded = append(newSucceeded, p)
		case podFailed(job, p) && !s.uncountedFailed[uid] && !s.uncountedSucceeded[uid]:
			newFailed = append(newFailed, p)
		}
	}
	s.succeeded = st.GetSucceeded() + int32(len(newSucceeded)+len(s.uncountedSucceeded))
	s.failed = st.GetFailed() + nonIgnored(job, newFailed) + int32(len(s.uncountedFailed))
	now := c.cfg.Now()
	if st.StartTime == nil && !job.GetSpec().GetSuspend() {
		st.StartTime = timestamppb.New(now.Truncate(time.Second))
	}
	bo := c.backoffRecord(key, newSucceeded, newFailed)
	indexed := job.GetSpec().GetCompletionMode() == "Indexed"
	if indexed {
		s.succeededIndexes = succeededIndexes(job, s.pods)
		s.succeeded = int32(len(s.succeededIndexes))
		if job.GetSpec().BackoffLimitPerIndex != nil {
			s.failedIndexes = failedIndexes(job, s.pods)
		}
	}

	// Evaluate how the Job ends, in Kubernetes' order: a condition an
	// earlier sync set, the back-off limit, the deadline, success.
	if cond := condition(st.Conditions, "SuccessCriteriaMet"); cond != nil && cond.GetStatus() == "True" {
		s.finished = cond
	} else if cond := condition(st.Conditions, "FailureTarget"); cond != nil && cond.GetStatus() == "True" {
		s.finished = cond
	} else if msg := failJobMessage(job, s.pods); msg != "" {
		s.finished = newCondition("FailureTarget", "PodFailurePolicy", msg, now)
	} else if s.failed > job.GetSpec().GetBackoffLimit() || pastBackoffLimitOnFailure(job, s.pods) {
		s.finished = newCondition("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit", now)
	} else if pastDeadline(job, now) {
		s.finished = newCondition("FailureTarget", "DeadlineExceeded", "Job was active longer than specified deadline", now)
	} else if d := job.GetSpec().ActiveDeadlineSeconds; d != nil && !job.GetSpec().GetSuspend() && st.StartTime != nil {
		s.requeue = s.requeue.Sooner(st.StartTime.AsTime().Add(time.Duration(*d)*time.Second).Sub(now) + 100*time.Millisecond)
	}
	if s.finished == nil && s.failedIndexes != nil {
		if m := job.GetSpec().MaxFailedIndexes; m != nil && len(s.failedIndexes) > int(*m) {
			s.finished = newCondition("FailureTarget", "MaxFailedIndexesExceeded", "Job has exceeded the specified maximal number of failed indexes", now)
		} else if len(s.failedIndexes) > 0 && len(s.failedIndexes)+len(s.succeededIndexes) >= int(job.GetSpec().GetCompletions()) {
			s.finished = newCondition("FailureTarget", "FailedIndexes", "Job has failed indexes", now)
		}
	}
	if s.finished == nil && indexed {
		if msg, ok := matchSuccessPolicy(job.GetSpec().GetSuccessPolicy(), int(job.GetSpec().GetCompletions()), s.succeededIndexes); ok {
			s.finished = newCondition("SuccessCriteriaMet", "SuccessPolicy", msg, now)
		}
	}

	active := int32(len(s.active))
	var manageErr error
	suspendChanged := false
	if s.finished != nil {
		deleted, deletedReady, err := c.deletePods(ctx, key, job, s.active)
		if deleted != active || !satisfied {
			s.finished = nil // pods left, or not yet in the cache
		}
		active -= deleted
		s.terminated += deleted
		s.ready -= deletedReady
		manageErr = err
	} else {
		managed := false
		if satisfied && job.GetMetadata().GetDeletionTimestamp() == nil {
			active, manageErr = c.manage(ctx, key, s, bo, now)
			managed = true
		}
		var complete bool
		if job.GetSpec().Completions == nil {
			complete = s.succeeded > 0 && active == 0
		} else {
			complete = s.succeeded >= job.GetSpec().GetCompletions() && active == 0
		}
		switch {
		case complete:
			s.finished = newCondition("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods", now)
		case managed && job.GetSpec().GetSuspend():
			if setCondition(st, "Suspended", "True", "JobSuspended", "Job suspended", now) {
				suspendChanged = true
				ctrl.Eventf(c.cfg.Recorder, job, client.EventNormal, "Suspended", "Job suspended")
			}
		case managed:
			if setCondition(st, "Suspended", "False", "JobResumed", "Job resumed", now) {
				suspendChanged = true
				ctrl.Eventf(c.cfg.Recorder, job, client.EventNormal, "Resumed", "Job resumed")
				// The deadline counts the time the Job runs: it starts again.
				st.StartTime = timestamppb.New(now.Truncate(time.Second))
			}
		}
	}
	flush := suspendChanged || active != st.GetActive() || st.Ready == nil || *st.Ready != s.ready ||
		st.Terminating == nil || *st.Terminating != s.terminated
	st.Active, st.Ready, st.Terminating = active, proto.Int32(s.ready), proto.Int32(s.terminated)
	if err := c.trackAndFinish(ctx, key, s, flush, now); err != nil {
		return s.requeue, errors.Join(manageErr, fmt.Errorf("job %s: tracking status: %w", key, err))
	}
	return s.requeue, manageErr
}

// claimPods returns the pods the Job controls, as Kubernetes' controller
// ref manager does: its own pods that match its selector, orphans that
// match it adopted (controller reference and tracking finalizer added,
// unless the Job is being deleted), and its own pods that no longer match
// released (reference and finalizer removed).
func (c *Controller) claimPods(ctx context.Context, job *batchv1.Job, sel labels.Selector) ([]*corev1.Pod, error) {
	uid := job.GetMetadata().GetUid()
	var out []*corev1.Pod
	var errs []error
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(job.GetMetadata().GetNamespace()) {
		ref := ctrl.ControllerRef(p)
		matches := sel.Matches(labels.Set(p.GetMetadata().GetLabels()))
		switch {
		case ref != nil && ref.GetUid() == uid && matches:
			out = append(out, p)
		case ref != nil && ref.GetUid() == uid:
			if err := c.updatePod(ctx, p, func(m *metav1.ObjectMeta) bool {
				m.OwnerReferences = slices.DeleteFunc(m.OwnerReferences, func(r *metav1.OwnerReference) bool { return r.GetUid() == uid })
				ctrl.RemoveFinalizer(m, TrackingFinalizer)
				return true
			}); err != nil {
				errs = append(errs, fmt.Errorf("release pod %s: %w", client.Key(p), err))
			}
		case ref == nil && matches && job.GetMetadata().GetDeletionTimestamp() == nil && p.GetMetadata().GetDeletionTimestamp() == nil:
			// Adopt only for a Job that is still the one we know.
			fresh, err := c.cfg.Jobs.Get(ctx, job.GetMetadata().GetNamespace(), job.GetMetadata().GetName())
			if err != nil || fresh.GetMetadata().GetUid() != uid || fresh.GetMetadata().GetDeletionTimestamp() != nil {
				continue
			}
			var adopted *corev1.Pod
			err = c.updatePod(ctx, p, func(m *metav1.ObjectMeta) bool {
				for _, r := range m.GetOwnerReferences() {
					if r.GetController() {
						return false // adopted by another meanwhile
					}
				}
				m.OwnerReferences = append(m.OwnerReferences, ctrl.NewControllerRef(job, "batch/v1", "Job"))
				if !ctrl.HasFinalizer(m, TrackingFinalizer) {
					m.Finalizers = append(m.Finalizers, TrackingFinalizer)
				}
				return true
			}, func(got *corev1.Pod) { adopted = got })
			if err != nil {
				errs = append(errs, fmt.Errorf("adopt pod %s: %w", client.Key(p), err))
				continue
			}
			if adopted != nil {
				out = append(out, adopted)
			}
		}
	}
	return out, errors.Join(errs...)
}

// updatePod changes p's metadata with change and writes it, re-reading p
// on a conflict; a pod gone (or replaced), or one change declines (false),
// is left alone. done, if given, receives the written pod.
func (c *Controller) updatePod(ctx context.Context, p *corev1.Pod, change func(*metav1.ObjectMeta) bool, done ...func(*corev1.Pod)) error {
	for attempt := 0; attempt < 5; attempt++ {
		upd := proto.Clone(p).(*corev1.Pod)
		if !change(upd.GetMetadata()) {
			return nil
		}
		got, err := c.cfg.Pods.Update(ctx, upd)
		switch {
		case err == nil:
			for _, f := range done {
				f(got)
			}
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err):
			return err
		}
		fresh, err := c.cfg.Pods.Get(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName())
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if fresh.GetMetadata().GetUid() != p.GetMetadata().GetUid() {
			return nil
		}
		p = fresh
	}
	return errConflicts
}

// managedElsewhere reports whether the Job's managedBy names another
// controller, which then runs it: this one leaves it alone, as Kubernetes'.
func managedElsewhere(job *batchv1.Job) bool {
	m := job.GetSpec().ManagedBy
	return m != nil && *m != "kubernetes.io/job-controller"
}

// forget drops what the controller remembers of a Job that is gone.
func (c *Controller) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.backoff, key)
}

// releaseOrphans removes the tracking finalizer from the pods that name
// the Job key as controller but whose Job is gone (uid "": any) or
// finished (uid: that Job's), as Kubernetes' orphan-pod cleanup does: no
// one will count them any more.
func (c *Controller) releaseOrphans(ctx context.Context, key, uid string) error {
	ns, name := client.SplitKey(key)
	var errs []error
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(ns) {
		ref := ctrl.ControllerRef(p)
		if ref == nil || ref.GetKind() != "Job" || ref.GetName() != name || (uid != "" && ref.GetUid() != uid) {
			continue
		}
		if !ctrl.HasFinalizer(p.GetMetadata(), TrackingFinalizer) {
			continue
		}
		if uid != "" && ctrl.PodActive(p) {
			continue // deleted by the sync that finished the Job
		}
		refUID := ref.GetUid()
		still := func(p *corev1.Pod) bool {
			r := ctrl.ControllerRef(p)
			return r != nil && r.GetUid() == refUID && (uid == "" || !ctrl.PodActive(p))
		}
		if err := c.removeFinalizer(ctx, p, still); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeFinalizer takes the tracking finalizer off p while still says the
// pod is one to release, re-reading it on a conflict (the node agent
// writes its status meanwhile, a Job may adopt it). A pod already gone,
// without the finalizer or no longer to release is done.
func (c *Controller) removeFinalizer(ctx context.Context, p *corev1.Pod, still func(*corev1.Pod) bool) error {
	for attempt := 0; attempt < 5; attempt++ {
		if !ctrl.HasFinalizer(p.GetMetadata(), TrackingFinalizer) || !still(p) {
			return nil
		}
		upd := proto.Clone(p).(*corev1.Pod)
		ctrl.RemoveFinalizer(upd.GetMetadata(), TrackingFinalizer)
		_, err := c.cfg.Pods.Update(ctx, upd)
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err):
			return fmt.Errorf("remove finalizer of pod %s: %w", client.Key(p), err)
		}
		fresh, err := c.cfg.Pods.Get(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName())
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("remove finalizer of pod %s: %w", client.Key(p), err)
		}
		if fresh.GetMetadata().GetUid() != p.GetMetadata().GetUid() {
			return nil
		}
		p = fresh
	}
	return fmt.Errorf("remove finalizer of pod %s: %w", client.Key(p), errConflicts)
}

var errConflicts = errors.New("job: too many conflicts")
