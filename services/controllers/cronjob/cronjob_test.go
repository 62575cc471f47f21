// This file holds the CronJob controller's tests on a real in-process API
// service with an injectable clock: schedules, concurrency policies,
// deadlines and missed times, history limits, suspend, time zones and
// overlapping controllers.

package cronjob_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/cronjob"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

const waitLimit = 30 * time.Second

// clock is the controllers' clock, moved by the test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// env is an in-process API service with CronJob controllers (no Job
// controller: the test writes the Jobs' status).
type env struct {
	ctx    context.Context
	conn   *grpc.ClientConn
	jobs   *client.Client[*batchv1.Job]
	cjs    *client.Client[*batchv1.CronJob]
	events *client.Client[*corev1.Event]
	clock  *clock
	// cjInfs are the controllers' CronJob caches.
	cjInfs []*client.Informer[*batchv1.CronJob]
}

func start(t *testing.T, controllers int) *env {
	t.Helper()
	apienv := apiservertest.Start(t, apiservertest.Options{})
	conn := apienv.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	e := &env{ctx: ctx, conn: conn, jobs: client.Must[*batchv1.Job](conn), cjs: client.Must[*batchv1.CronJob](conn),
		events: client.Must[*corev1.Event](conn), clock: &clock{t: time.Now()}}
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	rec := client.NewRecorder(client.RecorderConfig{Sink: e.events, Component: "cronjob-controller"})
	run := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	run(func() { rec.Run(ctx) })
	// Several controllers at once stand for leaders that overlap in a
	// failover.
	for range controllers {
		jobInf := client.NewInformer(client.ListWatch(e.jobs, "", "", "", 500), client.InformerOptions[*batchv1.Job]{})
		cjInf := client.NewInformer(client.ListWatch(e.cjs, "", "", "", 500), client.InformerOptions[*batchv1.CronJob]{})
		e.cjInfs = append(e.cjInfs, cjInf)
		c := cronjob.New(cronjob.Config{Jobs: e.jobs, CronJobs: e.cjs, JobInformer: jobInf, CronJobInformer: cjInf, Recorder: rec, Now: e.clock.Now})
		run(func() { _ = jobInf.Run(ctx) })
		run(func() { _ = cjInf.Run(ctx) })
		run(func() { c.Run(ctx, 2) })
	}
	return e
}

func newCronJob(name, schedule string, tweak func(*batchv1.CronJobSpec)) *batchv1.CronJob {
	s := &batchv1.CronJobSpec{Schedule: schedule, JobTemplate: &batchv1.JobTemplateSpec{
		Metadata: &metav1.ObjectMeta{Labels: map[string]string{"team": "a"}},
		Spec: &batchv1.JobSpec{Template: &corev1.PodTemplateSpec{Spec: &corev1.PodSpec{RestartPolicy: "Never",
			Containers: []*corev1.Container{{Name: "c", Image: "busybox"}}}}}}}
	if tweak != nil {
		tweak(s)
	}
	return &batchv1.CronJob{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: s}
}

func (e *env) create(t *testing.T, cj *batchv1.CronJob) *batchv1.CronJob {
	t.Helper()
	got, err := e.cjs.Create(e.ctx, cj)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// at moves the clock to t and brings the CronJob back to the controllers
// (a real controller comes back at its next scheduled time by itself).
func (e *env) at(t *testing.T, cj *batchv1.CronJob, at time.Time) {
	t.Helper()
	e.atWith(t, cj, at, nil)
}

// atWith is at with a change of the CronJob in the same write: no
// controller sees the change before the new time.
func (e *env) atWith(t *testing.T, cj *batchv1.CronJob, at time.Time, change func(*batchv1.CronJob)) {
	t.Helper()
	// The controllers' caches first catch up with what the test saw (a
	// reconcile at the new time on an old status would act on it, as
	// Kubernetes' would on a lagging cache).
	cur, err := e.cjs.Get(e.ctx, "default", cj.GetMetadata().GetName())
	if err != nil {
		t.Fatal(err)
	}
	e.seen(t, cur)
	e.clock.set(at)
	e.update(t, cj.GetMetadata().GetName(), func(c *batchv1.CronJob) {
		if c.Metadata.Annotations == nil {
			c.Metadata.Annotations = map[string]string{}
		}
		c.Metadata.Annotations["test/now"] = at.Format(time.RFC3339Nano)
		if change != nil {
			change(c)
		}
	})
}

func (e *env) update(t *testing.T, name string, f func(*batchv1.CronJob)) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		cur, err := e.cjs.Get(e.ctx, "default", name)
		if err != nil {
			t.Fatal(err)
		}
		f(cur)
		got, err := e.cjs.Update(e.ctx, cur)
		if err == nil {
			e.seen(t, got)
			return
		} else if !apierrors.IsConflict(err) || attempt > 10 {
			t.Fatal(err)
		}
	}
}

// seen waits until every controller's cache has cj at least as new as
// given, so that no later reconcile acts on an older spec.
func (e *env) seen(t *testing.T, cj *batchv1.CronJob) {
	t.Helper()
	want, _ := strconv.ParseInt(cj.GetMetadata().GetResourceVersion(), 10, 64)
	testutil.Eventually(t, "the caches at "+cj.GetMetadata().GetResourceVersion(), func() (bool, string) {
		for _, inf := range e.cjInfs {
			got, ok := inf.Store().Get(client.Key(cj))
			rv, _ := strconv.ParseInt(got.GetMetadata().GetResourceVersion(), 10, 64)
			if !ok || rv < want {
				return false, got.GetMetadata().GetResourceVersion()
			}
		}
		return true, ""
	})
}

// jobsOf lists the CronJob's Jobs not being deleted, by name.
func (e *env) jobsOf(t *testing.T, cj *batchv1.CronJob) []*batchv1.Job {
	l, _, err := e.jobs.List(e.ctx, "default", client.ListOptions{})
	if err != nil {
		t.Errorf("list jobs: %v", err)
		return nil
	}
	var out []*batchv1.Job
	for _, j := range l {
		if r := ctrl.ControllerRef(j); r != nil && r.GetUid() == cj.GetMetadata().GetUid() && j.GetMetadata().GetDeletionTimestamp() == nil {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].GetMetadata().GetName() < out[b].GetMetadata().GetName() })
	return out
}

func names(js []*batchv1.Job) string {
	var s []string
	for _, j := range js {
		s = append(s, j.GetMetadata().GetName())
	}
	return strings.Join(s, ",")
}

// waitJobs waits until the CronJob's Jobs are exactly want (names).
func (e *env) waitJobs(t *testing.T, cj *batchv1.CronJob, want ...string) {
	t.Helper()
	testutil.Eventually(t, "jobs "+strings.Join(want, ","), func() (bool, string) {
		got := names(e.jobsOf(t, cj))
		return got == strings.Join(want, ","), got + "; events: " + e.eventsOf(cj)
	})
}

func (e *env) status(t *testing.T, cj *batchv1.CronJob, what string, cond func(*batchv1.CronJobStatus) bool) *batchv1.CronJobStatus {
	t.Helper()
	var st *batchv1.CronJobStatus
	testutil.Eventually(t, what, func() (bool, string) {
		got, err := e.cjs.Get(e.ctx, "default", cj.GetMetadata().GetName())
		if err != nil {
			return false, err.Error()
		}
		st = got.GetStatus()
		return cond(st), fmt.Sprint(st)
	})
	return st
}

// eventsOf lists the CronJob's Events, for failure messages.
func (e *env) eventsOf(cj *batchv1.CronJob) string {
	l, _, err := e.events.List(e.ctx, "default", client.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var seen []string
	for _, ev := range l {
		if ev.GetInvolvedObject().GetName() == cj.GetMetadata().GetName() {
			seen = append(seen, fmt.Sprintf("%s: %s (x%d)", ev.GetReason(), ev.GetMessage(), ev.GetCount()))
		}
	}
	return strings.Join(seen, "; ")
}

// hasEvent waits for an Event of the CronJob with reason and a message
// containing msg.
func (e *env) hasEvent(t *testing.T, cj *batchv1.CronJob, reason, msg string) {
	t.Helper()
	testutil.Eventually(t, "event "+reason, func() (bool, string) {
		l, _, err := e.events.List(e.ctx, "default", client.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range l {
			if ev.GetInvolvedObject().GetName() == cj.GetMetadata().GetName() {
				seen = append(seen, ev.GetReason()+": "+ev.GetMessage())
				if ev.GetReason() == reason && strings.Contains(ev.GetMessage(), msg) {
					return true, ""
				}
			}
		}
		return false, strings.Join(seen, "; ")
	})
}

// finishJob writes a Job's status as the Job controller does when it ends.
func (e *env) finishJob(t *testing.T, name, how string, at time.Time) {
	t.Helper()
	j, err := e.jobs.Get(e.ctx, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	ts := timestamppb.New(at.Truncate(time.Second))
	start := timestamppb.New(at.Truncate(time.Second).Add(-time.Second))
	j.Status = &batchv1.JobStatus{StartTime: start}
	if how == "Complete" {
		j.Status.Succeeded, j.Status.CompletionTime = 1, ts
		j.Status.Conditions = []*batchv1.JobCondition{
			{Type: "SuccessCriteriaMet", Status: "True", LastTransitionTime: ts}, {Type: "Complete", Status: "True", LastTransitionTime: ts}}
	} else {
		j.Status.Failed = 1
		j.Status.Conditions = []*batchv1.JobCondition{
			{Type: "FailureTarget", Status: "True", LastTransitionTime: ts}, {Type: "Failed", Status: "True", LastTransitionTime: ts}}
	}
	if _, err := e.jobs.UpdateStatus(e.ctx, j); err != nil {
		t.Fatal(err)
	}
}

// slot is the first multiple of every after t.
func slot(t time.Time, every time.Duration) time.Time {
	return t.Truncate(every).Add(every)
}

func jobNameAt(cj string, t time.Time) string { return fmt.Sprintf("%s-%d", cj, t.Unix()/60) }

func TestSchedulesJobs(t *testing.T) {
	e := start(t, 1)
	cj := e.create(t, newCronJob("report", "*/5 * * * *", nil))
	created := cj.GetMetadata().GetCreationTimestamp().AsTime()
	first := slot(created, 5*time.Minute)

	e.at(t, cj, first.Add(-time.Second))
	e.waitJobs(t, cj) // nothing due yet
	e.at(t, cj, first.Add(3*time.Second))
	name := jobNameAt("report", first)
	e.waitJobs(t, cj, name)
	st := e.status(t, cj, "active and lastScheduleTime", func(st *batchv1.CronJobStatus) bool {
		return len(st.GetActive()) == 1 && st.GetLastScheduleTime().AsTime().Equal(first)
	})
	if r := st.GetActive()[0]; r.GetName() != name || r.GetKind() != "Job" || r.GetApiVersion() != "batch/v1" || r.GetUid() == "" {
		t.Errorf("active %v", r)
	}
	j, err := e.jobs.Get(e.ctx, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := j.GetMetadata().GetAnnotations()[cronjob.ScheduledTimestampAnnotation], first.UTC().Format(time.RFC3339); got != want {
		t.Errorf("scheduled timestamp %q, want %q", got, want)
	}
	if j.GetMetadata().GetLabels()["team"] != "a" || ctrl.ControllerRef(j).GetName() != "report" {
		t.Errorf("job metadata %v", j.GetMetadata())
	}
	e.hasEvent(t, cj, "SuccessfulCreate", "Created job "+name)

	// Looking again in the same slot creates nothing more.
	e.at(t, cj, first.Add(4*time.Second))
	e.waitJobs(t, cj, name)

	e.finishJob(t, name, "Complete", first.Add(10*time.Second))
	e.status(t, cj, "the finished Job off the active list, lastSuccessfulTime", func(st *batchv1.CronJobStatus) bool {
		return len(st.GetActive()) == 0 && st.GetLastSuccessfulTime().AsTime().Equal(first.Add(10*time.Second))
	})
	e.hasEvent(t, cj, "SawCompletedJob", "Saw completed job: "+name+", condition: Complete")

	// The next slot.
	second := first.Add(5 * time.Minute)
	e.at(t, cj, second.Add(time.Second))
	e.waitJobs(t, cj, name, jobNameAt("report", second))
}

func TestConcurrencyPolicy(t *testing.T) {
	e := start(t, 1)
	cj := e.create(t, newCronJob("busy", "* * * * *", func(s *batchv1.CronJobSpec) { s.ConcurrencyPolicy = "Forbid" }))
	first := slot(cj.GetMetadata().GetCreationTimestamp().AsTime(), time.Minute)
	e.at(t, cj, first.Add(time.Second))
	j1 := jobNameAt("busy", first)
	e.waitJobs(t, cj, j1)
	e.status(t, cj, "active", func(st *batchv1.CronJobStatus) bool { return len(st.GetActive()) == 1 })

	// Forbid: the next minute starts nothing while the first runs.
	e.at(t, cj, first.Add(time.Minute+time.Second))
	e.hasEvent(t, cj, "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid")
	e.waitJobs(t, cj, j1)

	// Replace: the running Job goes, the new one comes. (Changed during
	// the minute Forbid skipped, Replace would run that minute at once.)
	third := first.Add(2 * time.Minute)
	e.atWith(t, cj, third.Add(time.Second), func(c *batchv1.CronJob) { c.Spec.ConcurrencyPolicy = "Replace" })
	j3 := jobNameAt("busy", third)
	e.waitJobs(t, cj, j3)
	e.status(t, cj, "only the new Job active", func(st *batchv1.CronJobStatus) bool {
		return len(st.GetActive()) == 1 && st.GetActive()[0].GetName() == j3
	})
	e.hasEvent(t, cj, "SuccessfulDelete", "Deleted job "+j1)

	// Allow: both run. (Changed while nothing is due.)
	e.update(t, "busy", func(c *batchv1.CronJob) { c.Spec.ConcurrencyPolicy = "Allow" })
	fourth := first.Add(3 * time.Minute)
	e.at(t, cj, fourth.Add(time.Second))
	e.waitJobs(t, cj, j3, jobNameAt("busy", fourth))
	e.status(t, cj, "two active", func(st *batchv1.CronJobStatus) bool { return len(st.GetActive()) == 2 })
}

func TestStartingDeadlineAndMissedTimes(t *testing.T) {
	e := start(t, 1)
	cj := e.create(t, newCronJob("late", "*/10 * * * *", func(s *batchv1.CronJobSpec) { s.StartingDeadlineSeconds = proto.Int64(60) }))
	first := slot(cj.GetMetadata().GetCreationTimestamp().AsTime(), 10*time.Minute)
	// Two minutes late with a one-minute deadline: missed, nothing runs.
	e.at(t, cj, first.Add(2*time.Minute))
	e.waitJobs(t, cj)
	// In time for the next one.
	second := first.Add(10 * time.Minute)
	e.at(t, cj, second.Add(30*time.Second))
	e.waitJobs(t, cj, jobNameAt("late", second))

	// Without a deadline, a controller back after hours starts one Job,
	// for the latest time, and says that too many were missed.
	e.clock.set(time.Now())
	many := e.create(t, newCronJob("many", "* * * * *", nil))
	start := many.GetMetadata().GetCreationTimestamp().AsTime()
	back := slot(start, time.Minute).Add(200 * time.Minute)
	e.at(t, many, back.Add(time.Second))
	e.waitJobs(t, many, jobNameAt("many", back))
	e.hasEvent(t, many, "TooManyMissedTimes", "too many missed start times")
}

func TestHistoryLimitsAndSuspend(t *testing.T) {
	e := start(t, 1)
	cj := e.create(t, newCronJob("hist", "* * * * *", func(s *batchv1.CronJobSpec) {
		s.SuccessfulJobsHistoryLimit, s.FailedJobsHistoryLimit = proto.Int32(1), proto.Int32(0)
	}))
	base := slot(cj.GetMetadata().GetCreationTimestamp().AsTime(), time.Minute)
	var done []string
	for i := range 3 {
		at := base.Add(time.Duration(i) * time.Minute)
		e.at(t, cj, at.Add(time.Second))
		name := jobNameAt("hist", at)
		testutil.Eventually(t, "job "+name, func() (bool, string) {
			_, err := e.jobs.Get(e.ctx, "default", name)
			return err == nil, fmt.Sprint(err)
		})
		e.finishJob(t, name, "Complete", at.Add(2*time.Second))
		done = append(done, name)
	}
	// One successful Job kept: the newest.
	e.at(t, cj, base.Add(2*time.Minute+10*time.Second))
	e.waitJobs(t, cj, done[2])

	// A failed Job is not kept at all (limit 0).
	failedAt := base.Add(3 * time.Minute)
	e.at(t, cj, failedAt.Add(time.Second))
	fname := jobNameAt("hist", failedAt)
	testutil.Eventually(t, "job "+fname, func() (bool, string) {
		_, err := e.jobs.Get(e.ctx, "default", fname)
		return err == nil, fmt.Sprint(err)
	})
	e.finishJob(t, fname, "Failed", failedAt.Add(2*time.Second))
	e.at(t, cj, failedAt.Add(10*time.Second))
	e.waitJobs(t, cj, done[2])

	// Suspended: nothing more, however late.
	e.update(t, "hist", func(c *batchv1.CronJob) { c.Spec.Suspend = proto.Bool(true) })
	e.at(t, cj, base.Add(6*time.Minute+time.Second))
	e.at(t, cj, base.Add(7*time.Minute+time.Second))
	e.waitJobs(t, cj, done[2])
}

func TestTimeZone(t *testing.T) {
	e := start(t, 1)
	// 09:00 in Kolkata (UTC+05:30) is 03:30 UTC: the slot is on a half
	// hour in UTC.
	cj := e.create(t, newCronJob("tz", "0 * * * *", func(s *batchv1.CronJobSpec) { s.TimeZone = proto.String("Asia/Kolkata") }))
	created := cj.GetMetadata().GetCreationTimestamp().AsTime().UTC()
	due := created.Truncate(time.Hour).Add(30 * time.Minute)
	if !due.After(created) {
		due = due.Add(time.Hour)
	}
	e.at(t, cj, due.Add(time.Second))
	name := jobNameAt("tz", due)
	e.waitJobs(t, cj, name)
	j, err := e.jobs.Get(e.ctx, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	if got, want := j.GetMetadata().GetAnnotations()[cronjob.ScheduledTimestampAnnotation], due.In(kolkata).Format(time.RFC3339); got != want || !strings.HasSuffix(got, "+05:30") {
		t.Errorf("scheduled timestamp %q, want %q", got, want)
	}
}

// TestFailoverRunsEachTimeOnce runs three controllers at once, as leaders
// that overlap in a failover: each scheduled time still gets one Job, the
// name being the idempotency key.
func TestFailoverRunsEachTimeOnce(t *testing.T) {
	e := start(t, 3)
	cj := e.create(t, newCronJob("once", "* * * * *", nil))
	first := slot(cj.GetMetadata().GetCreationTimestamp().AsTime(), time.Minute)
	for i := range 3 {
		at := first.Add(time.Duration(i) * time.Minute)
		e.at(t, cj, at.Add(time.Second))
		var want []string
		for k := 0; k <= i; k++ {
			want = append(want, jobNameAt("once", first.Add(time.Duration(k)*time.Minute)))
		}
		e.waitJobs(t, cj, want...)
		// The next minute only once this one is in the status (a
		// controller that finds a later time due skips this one, as
		// Kubernetes' does).
		e.status(t, cj, "lastScheduleTime "+at.String(), func(st *batchv1.CronJobStatus) bool {
			return st.GetLastScheduleTime().AsTime().Equal(at) && len(st.GetActive()) == i+1
		})
	}
	st := e.status(t, cj, "three active", func(st *batchv1.CronJobStatus) bool { return len(st.GetActive()) == 3 })
	seen := map[string]bool{}
	for _, r := range st.GetActive() {
		if seen[r.GetName()] {
			t.Errorf("%s twice in active: %v", r.GetName(), st.GetActive())
		}
		seen[r.GetName()] = true
	}
}
