// Package cronjob is the CronJob controller, as Kubernetes v1.33's: at each
// time a CronJob's schedule (in its timeZone) names, it creates a Job from
// the job template, following concurrencyPolicy (Allow, Forbid, Replace)
// and startingDeadlineSeconds, keeps status.active, lastScheduleTime and
// lastSuccessfulTime, and deletes finished Jobs beyond the history limits.
//
// A Job is named <cronjob>-<scheduled time in minutes since the epoch>:
// the name is the idempotency key, so that a controller that created a Job
// and stopped before writing the CronJob's status, or two leaders in a
// failover, never run one scheduled time twice (the second create fails
// AlreadyExists and the existing Job is taken into status.active).
package cronjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// ScheduledTimestampAnnotation is the scheduled time (RFC 3339, in the
// CronJob's time zone) on every Job the controller creates.
const ScheduledTimestampAnnotation = "batch.kubernetes.io/cronjob-scheduled-timestamp"

// nextScheduleDelta is how long after a scheduled time the controller looks
// again, as Kubernetes: the schedule's time has then surely passed.
const nextScheduleDelta = 100 * time.Millisecond

// tooManyMissed is Kubernetes' limit on missed start times, beyond which
// it says so with an Event.
const tooManyMissed = 100

// JobClient is what the controller writes Jobs with (*client.Client[*batchv1.Job]).
type JobClient interface {
	Get(ctx context.Context, namespace, name string) (*batchv1.Job, error)
	Create(ctx context.Context, obj *batchv1.Job) (*batchv1.Job, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// CronJobClient is what the controller writes CronJob status with.
type CronJobClient interface {
	Get(ctx context.Context, namespace, name string) (*batchv1.CronJob, error)
	UpdateStatus(ctx context.Context, obj *batchv1.CronJob) (*batchv1.CronJob, error)
}

// Config wires a Controller. The informers are shared with other
// controllers; New adds its handlers, the caller runs them.
type Config struct {
	Jobs            JobClient
	CronJobs        CronJobClient
	JobInformer     *client.Informer[*batchv1.Job]
	CronJobInformer *client.Informer[*batchv1.CronJob]
	Recorder        *client.Recorder // nil records nothing
	// Now is the clock (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
	// TracerProvider records a span per reconcile, in the trace of the
	// object's last change; nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the CronJob controller.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
}

// New returns a controller and registers its informer handlers.
func New(cfg Config) *Controller {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "cronjob"), queue: client.NewQueue("cronjob", 0, 0)}
	cfg.CronJobInformer.AddEventHandler(client.EnqueueHandler[*batchv1.CronJob](c.queue))
	enqueueOwner := func(j *batchv1.Job) {
		if r := ctrl.ControllerRef(j); r != nil && r.GetKind() == "CronJob" {
			c.queue.Add(client.KeyOf(j.GetMetadata().GetNamespace(), r.GetName()))
		}
	}
	cfg.JobInformer.AddEventHandler(client.Handler[*batchv1.Job]{
		OnAdd:    enqueueOwner,
		OnUpdate: func(_, j *batchv1.Job) { enqueueOwner(j) },
		OnDelete: enqueueOwner,
	})
	return c
}

// Run waits for the informers' caches, then reconciles with workers
// goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.JobInformer, c.cfg.CronJobInformer) {
		return
	}
	client.RunWorkers(ctx, c.queue, workers, client.TracedReconciler(c.cfg.TracerProvider, "cronjob.reconcile", c.cfg.CronJobInformer.Store(), c.Reconcile), c.log)
}

// Reconcile brings the CronJob named by key up to date: its active list,
// its history, and the Job of its latest due scheduled time. It asks to be
// called again at the next scheduled time.
func (c *Controller) Reconcile(ctx context.Context, key string) (client.Result, error) {
	cached, ok := c.cfg.CronJobInformer.Store().Get(key)
	if !ok {
		return client.Result{}, nil
	}
	cj := proto.Clone(cached).(*batchv1.CronJob)
	if cj.Status == nil {
		cj.Status = &batchv1.CronJobStatus{}
	}
	orig := proto.Clone(cj.Status)
	jobs := c.ownedJobs(cj)
	if err := c.reconcileActive(ctx, cj, jobs); err != nil {
		return client.Result{}, err
	}
	next, err := c.schedule(ctx, cj)
	c.cleanupFinished(ctx, cj, jobs)
	if !proto.Equal(orig, cj.Status) {
		if _, uerr := c.cfg.CronJobs.UpdateStatus(ctx, cj); uerr != nil && !apierrors.IsNotFound(uerr) {
			return client.Result{}, errors.Join(err, fmt.Errorf("cronjob %s: update status: %w", key, uerr))
		}
	}
	if err != nil {
		return client.Result{}, err
	}
	if next != nil {
		// A next time already due runs at once (the least wait there is).
		return client.Result{RequeueAfter: max(*next, time.Nanosecond)}, nil
	}
	return client.Result{}, nil
}

// ownedJobs are the Jobs the CronJob controls.
func (c *Controller) ownedJobs(cj *batchv1.CronJob) []*batchv1.Job {
	uid := cj.GetMetadata().GetUid()
	var out []*batchv1.Job
	for _, j := range c.cfg.JobInformer.Store().ByNamespace(cj.GetMetadata().GetNamespace()) {
		if r := ctrl.ControllerRef(j); r != nil && r.GetUid() == uid {
			out = append(out, j)
		}
	}
	return out
}

// reconcileActive updates status.active and lastSuccessfulTime from the
// CronJob's Jobs, as Kubernetes does.
func (c *Controller) reconcileActive(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) error {
	st := cj.Status
	children := map[string]bool{}
	for _, j := range jobs {
		uid := j.GetMetadata().GetUid()
		children[uid] = true
		found := inActive(cj, uid)
		finished, cond := finishedCondition(j)
		switch {
		case !found && !finished:
			// Created by hand (kubectl create job --from), or our status
			// write was lost: Kubernetes re-reads the CronJob, and says so
			// when the Job is still not listed.
			fresh, err := c.cfg.CronJobs.Get(ctx, cj.GetMetadata().GetNamespace(), cj.GetMetadata().GetName())
			if err == nil && inActive(fresh, uid) {
				continue
			}
			ctrl.Eventf(c.cfg.Recorder, cj, client.EventWarning, "UnexpectedJob", "Saw a job that the controller did not create or forgot: %s", j.GetMetadata().GetName())
		case found && finished:
			removeActive(cj, uid)
			ctrl.Eventf(c.cfg.Recorder, cj, client.EventNormal, "SawCompletedJob", "Saw completed job: %s, condition: %v", j.GetMetadata().GetName(), cond)
		case cond == "Complete":
			if ct := j.GetStatus().GetCompletionTime(); ct != nil && (st.LastSuccessfulTime == nil || ct.AsTime().After(st.LastSuccessfulTime.AsTime())) {
				st.LastSuccessfulTime = ct
			}
		}
	}
	for _, r := range slicesClone(st.Active) {
		if children[r.GetUid()] {
			continue
		}
		// Not in the cache: ask the API service, as the Job informer may
		// lag behind the CronJob's (the status naming a Job just made).
		j, err := c.cfg.Jobs.Get(ctx, r.GetNamespace(), r.GetName())
		switch {
		case apierrors.IsNotFound(err) || err == nil && j.GetMetadata().GetUid() != r.GetUid():
			ctrl.Eventf(c.cfg.Recorder, cj, client.EventNormal, "MissingJob", "Active job went missing: %v", r.GetName())
			removeActive(cj, r.GetUid())
		case err != nil:
			return fmt.Errorf("cronjob %s: get job %s: %w", client.Key(cj), r.GetName(), err)
		}
	}
	return nil
}

func slicesClone(s []*corev1.ObjectReference) []*corev1.ObjectReference {
	return append([]*corev1.ObjectReference(nil), s...)
}

// schedule creates the Job of the latest due scheduled time, if any, and
// returns how long until the next one.
func (c *Controller) schedule(ctx context.Context, cj *batchv1.CronJob) (*time.Duration, error) {
	if cj.GetMetadata().GetDeletionTimestamp() != nil {
		return nil, nil
	}
	spec := cj.GetSpec()
	// Without a timeZone the schedule is read in the controller's local
	// time and the scheduled-timestamp annotation written in UTC, as by
	// kube-controller-manager.
	loc := time.UTC
	if tz := spec.TimeZone; tz != nil {
		var err error
		if loc, err = time.LoadLocation(*tz); err != nil {
			ctrl.Eventf(c.cfg.Recorder, cj, client.EventWarning, "UnknownTimeZone", "invalid timeZone: %q: %s", *tz, err)
			return nil, nil
		}
	}
	if spec.GetSuspend() {
		return nil, nil
	}
	sched, err := cron.ParseStandard(formatSchedule(cj))
	if err != nil {
		ctrl.Eventf(c.cfg.Recorder, cj, client.EventWarning, "UnparseableSchedule", "unparseable schedule: %q : %s", spec.GetSchedule(), err)
		return nil, nil
	}
	if strings.Contains(spec.GetSchedule(), "TZ") {
		ctrl.Eventf(c.cfg.Recorder, cj, client.EventWarning, "UnsupportedSchedule", "CRON_TZ or TZ used in schedule %q is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details", spec.GetSchedule())
	}
	now := c.cfg.Now()
	_, due, missed, err := mostRecentScheduleTime(cj, now, sched, true)
	if err != nil {
		ctrl.Eventf(c.cfg.Recorder, cj, client.EventWarning, "InvalidSchedule", "invalid schedule: %s : %s", spec.GetSchedule(), err)
		return nil, nil
	}
	if missed > tooManyMissed && due != nil {
		ctrl.Eventf(c.cfg.Recorder, cj, client.EventWarning, "TooManyMissedTimes", "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew")
	}
	next := nextScheduleTimeDuration(cj, now, sched)
	if due == nil || due.After(now) {
		return next, nil
	}
	if d := spec.StartingDeadlineSeconds; d != nil && due.Add(time.Duration(*d)*time.Second).Before(now) {
		ctrl.Eventf(c.cfg.Recorder, cj, client.EventWarning, "MissSchedule", "Missed scheduled time to start a job: %s", due.UTC().Format(time.RFC1123Z))
		return next, nil
	}
	name := jobName(cj, *due)
	if inActiveByName(cj, name) || (cj.Status.LastScheduleTime != nil && cj.Status.LastScheduleTime.AsTime().Equal(*due)) {
		return next, nil
	}
	if spec.GetConcurrencyPolicy() == "Forbid" && len(cj.Status.Active) > 0 {
		ctrl.Eventf(c.cfg.Recorder, cj, client.EventNormal, "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid")
		return next, nil
	}
	if spec.GetConcurrencyPolicy() == "Replace" {
		for _, r := range slicesClone(cj.Status.Active) {
			if err := c.deleteJob(ctx, cj, r.GetNamespace(), r.GetName(), r.GetUid()); err != nil {
				return nil, fmt.Errorf("cronjob %s: could not replace job %s/%s: %w", client.Key(cj), r.GetNamespace(), r.GetName(), err)
			}
		}
	}
	job := jobFromTemplate(cj, *due, loc)
	got, err := c.cfg.Jobs.Create(ctx, job)
	switch {
	case apierrors.IsAlreadyExists(err):
		// Created before: by us (a status write lost, or another leader),
		// or by someone else, who then keeps the status.
		got, err = c.cfg.Jobs.Get(ctx, job.GetMetadata().GetNamespace(), name)
		if err != nil {
			return nil, fmt.Errorf("cronjob %s: get job %s: %w", client.Key(cj), name, err)
		}
		if r := ctrl.ControllerRef(got); r == nil || r.GetUid() != cj.GetMetadata().GetUid() || inActive(cj, got.GetMetadata().GetUid()) {
			return next, nil
		}
		c.log.Info("job already exists", "cronjob", client.Key(cj), "job", name)
	case err != nil:
		ctrl.Eventf(c.cfg.Recorder, cj, client.EventWarning, "FailedCreate", "Error creating job: %v", err)
		return nil, fmt.Errorf("cronjob %s: create job: %w", client.Key(cj), err)
	default:
		ctrl.Eventf(c.cfg.Recorder, cj, client.EventNormal, "SuccessfulCreate", "Created job %v", got.GetMetadata().GetName())
	}
	m := got.GetMetadata()
	cj.Status.Active = append(cj.Status.Active, &corev1.ObjectReference{Kind: "Job", Namespace: m.GetNamespace(), Name: m.GetName(),
		Uid: m.GetUid(), ApiVersion: "batch/v1", ResourceVersion: m.GetResourceVersion()})
	cj.Status.LastScheduleTime = timestamppb.New(*due)
	return nextScheduleTimeDuration(cj, now, sched), nil
}

// deleteJob deletes a Job of the CronJob (its pods in the background) and
// takes it off the active list.
func (c *Controller) deleteJob(ctx context.Context, cj *batchv1.CronJob, ns, name, uid string) error {
	err := c.cfg.Jobs.Delete(ctx, ns, name, client.DeleteOptions{UID: uid, PropagationPolicy: "Background"})
	if err != nil && !apierrors.IsNotFound(err) {
		ctrl.Eventf(c.cfg.Recorder, cj, client.EventWarning, "FailedDelete", "Deleted job: %v", err)
		return err
	}
	removeActive(cj, uid)
	ctrl.Eventf(c.cfg.Recorder, cj, client.EventNormal, "SuccessfulDelete", "Deleted job %v", name)
	return nil
}

// cleanupFinished deletes the oldest finished Jobs beyond the history
// limits.
func (c *Controller) cleanupFinished(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) {
	spec := cj.GetSpec()
	var succeeded, failed []*batchv1.Job
	for _, j := range jobs {
		if j.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		switch _, cond := finishedCondition(j); cond {
		case "Complete":
			succeeded = append(succeeded, j)
		case "Failed":
			failed = append(failed, j)
		}
	}
	for _, h := range []struct {
		jobs  []*batchv1.Job
		limit *int32
	}{{succeeded, spec.SuccessfulJobsHistoryLimit}, {failed, spec.FailedJobsHistoryLimit}} {
		if h.limit == nil || len(h.jobs) <= int(*h.limit) {
			continue
		}
		sort.SliceStable(h.jobs, func(a, b int) bool { return startTime(h.jobs[a]).Before(startTime(h.jobs[b])) })
		for _, j := range h.jobs[:len(h.jobs)-int(*h.limit)] {
			m := j.GetMetadata()
			if err := c.deleteJob(ctx, cj, m.GetNamespace(), m.GetName(), m.GetUid()); err != nil {
				c.log.Info("delete finished job", "cronjob", client.Key(cj), "job", m.GetName(), "err", err)
			}
		}
	}
}

// startTime orders Jobs for the history: their start, else their creation.
func startTime(j *batchv1.Job) time.Time {
	if t := j.GetStatus().GetStartTime(); t != nil {
		return t.AsTime()
	}
	return j.GetMetadata().GetCreationTimestamp().AsTime()
}

// formatSchedule is the schedule the cron parser reads: with a timeZone,
// "TZ=<zone> <schedule>".
func formatSchedule(cj *batchv1.CronJob) string {
	if tz := cj.GetSpec().TimeZone; tz != nil && !strings.Contains(cj.GetSpec().GetSchedule(), "TZ") {
		return "TZ=" + *tz + " " + cj.GetSpec().GetSchedule()
	}
	return cj.GetSpec().GetSchedule()
}

// jobName is <cronjob>-<scheduled time in minutes since the epoch>.
func jobName(cj *batchv1.CronJob, scheduled time.Time) string {
	return fmt.Sprintf("%s-%d", cj.GetMetadata().GetName(), scheduled.Unix()/60)
}

// jobFromTemplate is the Job of scheduled time t: the template's labels,
// annotations and spec, the scheduled-timestamp annotation, and the
// CronJob as controller owner.
func jobFromTemplate(cj *batchv1.CronJob, t time.Time, loc *time.Location) *batchv1.Job {
	tm := cj.GetSpec().GetJobTemplate().GetMetadata()
	m := &metav1.ObjectMeta{
		Name:            jobName(cj, t),
		Namespace:       cj.GetMetadata().GetNamespace(),
		Labels:          map[string]string{},
		Annotations:     map[string]string{},
		OwnerReferences: []*metav1.OwnerReference{ctrl.NewControllerRef(cj, "batch/v1", "CronJob")},
	}
	for k, v := range tm.GetLabels() {
		m.Labels[k] = v
	}
	for k, v := range tm.GetAnnotations() {
		m.Annotations[k] = v
	}
	m.Annotations[ScheduledTimestampAnnotation] = t.In(loc).Format(time.RFC3339)
	spec, _ := proto.Clone(cj.GetSpec().GetJobTemplate().GetSpec()).(*batchv1.JobSpec)
	return &batchv1.Job{ApiVersion: "batch/v1", Kind: "Job", Metadata: m, Spec: spec}
}

// finishedCondition reports whether j finished, and how (Complete or
// Failed).
func finishedCondition(j *batchv1.Job) (bool, string) {
	for _, c := range j.GetStatus().GetConditions() {
		if (c.GetType() == "Complete" || c.GetType() == "Failed") && c.GetStatus() == "True" {
			return true, c.GetType()
		}
	}
	return false, ""
}

func inActive(cj *batchv1.CronJob, uid string) bool {
	for _, r := range cj.GetStatus().GetActive() {
		if r.GetUid() == uid {
			return true
		}
	}
	return false
}

func inActiveByName(cj *batchv1.CronJob, name string) bool {
	for _, r := range cj.GetStatus().GetActive() {
		if r.GetName() == name && r.GetNamespace() == cj.GetMetadata().GetNamespace() {
			return true
		}
	}
	return false
}

func removeActive(cj *batchv1.CronJob, uid string) {
	out := cj.Status.Active[:0]
	for _, r := range cj.Status.Active {
		if r.GetUid() != uid {
			out = append(out, r)
		}
	}
	cj.Status.Active = out
}
