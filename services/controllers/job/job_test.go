// This file holds the Job controller's tests on a real in-process API
// service, the test standing in for the node agents: completions and
// parallelism, Indexed Jobs, backoffLimit, the deadline, suspend, every pod
// counted once across restarts, orphans, adoption and the policies.

package job_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
	"github.com/kplane/kplane/services/controllers/job"
)

const waitLimit = 30 * time.Second

// clock is the controller's clock, moved by the test. It starts an hour
// after the real time, so that no failed pod (finished at a real time)
// holds back its replacement unless a test says so.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is an in-process API service with the Job controller, which the
// test may stop and start again; nothing runs the pods but the test.
type env struct {
	ctx   context.Context
	conn  *grpc.ClientConn
	pods  *client.Client[*corev1.Pod]
	jobs  *client.Client[*batchv1.Job]
	clock *clock
	stop  func()
}

func start(t *testing.T) *env {
	t.Helper()
	apienv := apiservertest.Start(t, apiservertest.Options{})
	conn := apienv.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &env{ctx: ctx, conn: conn, pods: client.Must[*corev1.Pod](conn), jobs: client.Must[*batchv1.Job](conn),
		clock: &clock{t: time.Now().Add(time.Hour)}}
	e.run(t)
	t.Cleanup(func() { e.stop() })
	return e
}

// run starts a fresh controller with fresh informers (as a new leader
// does).
func (e *env) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	podInf := client.NewInformer(client.ListWatch(e.pods, "", "", "", 500), client.InformerOptions[*corev1.Pod]{})
	jobInf := client.NewInformer(client.ListWatch(e.jobs, "", "", "", 500), client.InformerOptions[*batchv1.Job]{})
	rec := client.NewRecorder(client.RecorderConfig{Sink: client.Must[*corev1.Event](e.conn), Component: "job-controller"})
	c := job.New(job.Config{Pods: e.pods, Jobs: e.jobs, PodInformer: podInf, JobInformer: jobInf, Recorder: rec, Now: e.clock.Now})
	var wg sync.WaitGroup
	for _, f := range []func(){
		func() { rec.Run(ctx) },
		func() { _ = podInf.Run(ctx) },
		func() { _ = jobInf.Run(ctx) },
		func() { c.Run(ctx, 2) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	e.stop = func() { cancel(); wg.Wait() }
}

func newJob(name string, tweak func(*batchv1.JobSpec)) *batchv1.Job {
	s := &batchv1.JobSpec{Template: &corev1.PodTemplateSpec{
		Metadata: &metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec: &corev1.PodSpec{RestartPolicy: "Never", Containers: []*corev1.Container{{Name: "work", Image: "busybox",
			Env: []*corev1.EnvVar{{Name: "A", Value: "1"}}}}},
	}}
	if tweak != nil {
		tweak(s)
	}
	return &batchv1.Job{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: s}
}

func (e *env) create(t *testing.T, j *batchv1.Job) *batchv1.Job {
	t.Helper()
	got, err := e.jobs.Create(e.ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// podsOf lists the Job's pods, by name.
func (e *env) podsOf(t *testing.T, j *batchv1.Job) []*corev1.Pod {
	t.Helper()
	l, _, err := e.pods.List(e.ctx, "default", client.ListOptions{LabelSelector: "batch.kubernetes.io/controller-uid=" + j.GetMetadata().GetUid()})
	if err != nil {
		t.Errorf("list pods: %v", err)
		return nil
	}
	sort.Slice(l, func(a, b int) bool { return l[a].GetMetadata().GetName() < l[b].GetMetadata().GetName() })
	return l
}

// running are the Job's pods not finished and not being deleted.
func (e *env) running(t *testing.T, j *batchv1.Job) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range e.podsOf(t, j) {
		if ctrl.PodActive(p) {
			out = append(out, p)
		}
	}
	return out
}

// waitRunning waits for n running pods of j and returns them.
func (e *env) waitRunning(t *testing.T, j *batchv1.Job, n int) []*corev1.Pod {
	t.Helper()
	var got []*corev1.Pod
	testutil.Eventually(t, fmt.Sprintf("%d running pods of %s", n, j.GetMetadata().GetName()), func() (bool, string) {
		got = e.running(t, j)
		return len(got) == n, podStates(got)
	})
	return got
}

func podStates(ps []*corev1.Pod) string {
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("%s:%s:%v", p.GetMetadata().GetName(), p.GetStatus().GetPhase(), p.GetMetadata().GetFinalizers()))
	}
	return strings.Join(s, " ")
}

// finish sets p's phase (Succeeded or Failed), as its node agent would.
func (e *env) finish(t *testing.T, p *corev1.Pod, phase string) {
	t.Helper()
	for attempt := 0; attempt < 10; attempt++ {
		cur, err := e.pods.Get(e.ctx, "default", p.GetMetadata().GetName())
		if err != nil {
			t.Fatal(err)
		}
		cur.Status = &corev1.PodStatus{Phase: phase}
		if _, err = e.pods.UpdateStatus(e.ctx, cur); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatalf("status of %s: too many conflicts", p.GetMetadata().GetName())
}

// waitStatus waits until cond holds for the Job's status and returns it.
func (e *env) waitStatus(t *testing.T, j *batchv1.Job, what string, cond func(*batchv1.JobStatus) bool) *batchv1.Job {
	t.Helper()
	var got *batchv1.Job
	testutil.Eventually(t, what, func() (bool, string) {
		var err error
		got, err = e.jobs.Get(e.ctx, "default", j.GetMetadata().GetName())
		if err != nil {
			return false, err.Error()
		}
		return cond(got.GetStatus()), fmt.Sprintf("%v", got.GetStatus())
	})
	return got
}

func condition(st *batchv1.JobStatus, typ string) *batchv1.JobCondition {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

func isTrue(st *batchv1.JobStatus, typ string) bool {
	c := condition(st, typ)
	return c != nil && c.GetStatus() == "True"
}

// conditionTypes are the Job's conditions' types, in order.
func conditionTypes(st *batchv1.JobStatus) string {
	var s []string
	for _, c := range st.GetConditions() {
		s = append(s, c.GetType()+"="+c.GetStatus()+"/"+c.GetReason())
	}
	return strings.Join(s, ",")
}

// noFinalizers checks that every pod of j was released.
func (e *env) noFinalizers(t *testing.T, j *batchv1.Job) {
	t.Helper()
	testutil.Eventually(t, "no pod of "+j.GetMetadata().GetName()+" holding the tracking finalizer", func() (bool, string) {
		ps := e.podsOf(t, j)
		for _, p := range ps {
			if ctrl.HasFinalizer(p.GetMetadata(), job.TrackingFinalizer) {
				return false, podStates(ps)
			}
		}
		return true, ""
	})
}

func TestCompletionsAndParallelism(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("pi", func(s *batchv1.JobSpec) {
		s.Completions, s.Parallelism = proto.Int32(4), proto.Int32(2)
	}))
	first := e.waitRunning(t, j, 2)
	for _, p := range first {
		m := p.GetMetadata()
		if !strings.HasPrefix(m.GetName(), "pi-") || len(m.GetName()) != len("pi-")+5 {
			t.Errorf("pod name %q, want pi-<5 characters>", m.GetName())
		}
		if m.GetLabels()["batch.kubernetes.io/job-name"] != "pi" || m.GetLabels()["job-name"] != "pi" ||
			m.GetLabels()["controller-uid"] != j.GetMetadata().GetUid() || m.GetLabels()["app"] != "pi" {
			t.Errorf("pod labels %v", m.GetLabels())
		}
		if !ctrl.HasFinalizer(m, job.TrackingFinalizer) {
			t.Errorf("pod finalizers %v, want %s", m.GetFinalizers(), job.TrackingFinalizer)
		}
		ref := ctrl.ControllerRef(p)
		if ref.GetApiVersion() != "batch/v1" || ref.GetKind() != "Job" || ref.GetName() != "pi" || ref.GetUid() != j.GetMetadata().GetUid() || !ref.GetBlockOwnerDeletion() {
			t.Errorf("controller ref %v", ref)
		}
	}
	e.waitStatus(t, j, "active 2 and a start time", func(st *batchv1.JobStatus) bool {
		return st.GetActive() == 2 && st.GetStartTime() != nil && st.Ready != nil && st.GetUncountedTerminatedPods() != nil
	})
	for _, p := range first {
		e.finish(t, p, "Succeeded")
	}
	e.waitStatus(t, j, "2 succeeded", func(st *batchv1.JobStatus) bool { return st.GetSucceeded() == 2 })
	second := e.waitRunning(t, j, 2)
	e.finish(t, second[0], "Succeeded")
	e.finish(t, second[1], "Succeeded")
	got := e.waitStatus(t, j, "Complete", func(st *batchv1.JobStatus) bool { return isTrue(st, "Complete") })
	st := got.GetStatus()
	if st.GetSucceeded() != 4 || st.GetFailed() != 0 || st.GetActive() != 0 || st.GetCompletionTime() == nil {
		t.Errorf("status %v, want succeeded 4, active 0, a completion time", st)
	}
	if got, want := conditionTypes(st), "SuccessCriteriaMet=True/CompletionsReached,Complete=True/CompletionsReached"; got != want {
		t.Errorf("conditions %s, want %s", got, want)
	}
	if c := condition(st, "Complete"); c.GetMessage() != "Reached expected number of succeeded pods" {
		t.Errorf("Complete message %q", c.GetMessage())
	}
	if u := st.GetUncountedTerminatedPods(); len(u.GetSucceeded())+len(u.GetFailed()) > 0 {
		t.Errorf("uncounted %v after completion", u)
	}
	e.noFinalizers(t, j)
	if n := len(e.podsOf(t, j)); n != 4 {
		t.Errorf("%d pods, want 4 (no more created after completion)", n)
	}
}

func TestIndexed(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("idx", func(s *batchv1.JobSpec) {
		s.Completions, s.Parallelism, s.CompletionMode = proto.Int32(3), proto.Int32(3), proto.String("Indexed")
	}))
	pods := e.waitRunning(t, j, 3)
	byIndex := map[string]*corev1.Pod{}
	for _, p := range pods {
		m := p.GetMetadata()
		ix := m.GetAnnotations()[job.CompletionIndexKey]
		byIndex[ix] = p
		if m.GetLabels()[job.CompletionIndexKey] != ix {
			t.Errorf("pod %s: label %q, annotation %q", m.GetName(), m.GetLabels()[job.CompletionIndexKey], ix)
		}
		if want := "idx-" + ix + "-"; !strings.HasPrefix(m.GetName(), want) || len(m.GetName()) != len(want)+5 {
			t.Errorf("pod name %q, want %s<5 characters>", m.GetName(), want)
		}
		if h := p.GetSpec().GetHostname(); h != "idx-"+ix {
			t.Errorf("hostname %q, want idx-%s", h, ix)
		}
		env := p.GetSpec().GetContainers()[0].GetEnv()
		if len(env) != 2 || env[1].GetName() != "JOB_COMPLETION_INDEX" ||
			env[1].GetValueFrom().GetFieldRef().GetFieldPath() != "metadata.labels['batch.kubernetes.io/job-completion-index']" {
			t.Errorf("env %v", env)
		}
	}
	if len(byIndex) != 3 || byIndex["0"] == nil || byIndex["1"] == nil || byIndex["2"] == nil {
		t.Fatalf("indexes %v, want 0, 1, 2", byIndex)
	}
	e.finish(t, byIndex["1"], "Succeeded")
	e.waitStatus(t, j, "completedIndexes 1", func(st *batchv1.JobStatus) bool {
		return st.GetCompletedIndexes() == "1" && st.GetSucceeded() == 1
	})
	// A failed index gets a new pod with the same index.
	e.finish(t, byIndex["0"], "Failed")
	e.waitStatus(t, j, "failed 1", func(st *batchv1.JobStatus) bool { return st.GetFailed() == 1 })
	var again *corev1.Pod
	testutil.Eventually(t, "a new pod for index 0", func() (bool, string) {
		for _, p := range e.running(t, j) {
			if p.GetMetadata().GetAnnotations()[job.CompletionIndexKey] == "0" {
				again = p
				return true, ""
			}
		}
		return false, podStates(e.podsOf(t, j))
	})
	e.finish(t, again, "Succeeded")
	e.finish(t, byIndex["2"], "Succeeded")
	got := e.waitStatus(t, j, "Complete", func(st *batchv1.JobStatus) bool { return isTrue(st, "Complete") })
	if st := got.GetStatus(); st.GetCompletedIndexes() != "0-2" || st.GetSucceeded() != 3 || st.GetFailed() != 1 {
		t.Errorf("status %v, want completedIndexes 0-2, succeeded 3, failed 1", st)
	}
	e.noFinalizers(t, j)
}

func TestBackoffLimit(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("flaky", func(s *batchv1.JobSpec) { s.BackoffLimit = proto.Int32(1) }))
	for i := range 2 {
		p := e.waitRunning(t, j, 1)[0]
		e.finish(t, p, "Failed")
		e.waitStatus(t, j, fmt.Sprintf("failed %d", i+1), func(st *batchv1.JobStatus) bool { return st.GetFailed() == int32(i+1) })
	}
	got := e.waitStatus(t, j, "Failed", func(st *batchv1.JobStatus) bool { return isTrue(st, "Failed") })
	st := got.GetStatus()
	if got, want := conditionTypes(st), "FailureTarget=True/BackoffLimitExceeded,Failed=True/BackoffLimitExceeded"; got != want {
		t.Errorf("conditions %s, want %s", got, want)
	}
	if c := condition(st, "Failed"); c.GetMessage() != "Job has reached the specified backoff limit" {
		t.Errorf("Failed message %q", c.GetMessage())
	}
	if st.GetFailed() != 2 || st.GetActive() != 0 || st.GetCompletionTime() != nil {
		t.Errorf("status %v, want failed 2, active 0, no completion time", st)
	}
	if n := len(e.podsOf(t, j)); n != 2 {
		t.Errorf("%d pods, want 2 (backoffLimit 1: one retry)", n)
	}
	e.noFinalizers(t, j)
}

func TestActiveDeadline(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("slow", func(s *batchv1.JobSpec) {
		s.ActiveDeadlineSeconds, s.Parallelism, s.Completions = proto.Int64(30), proto.Int32(2), proto.Int32(2)
	}))
	pods := e.waitRunning(t, j, 2)
	e.waitStatus(t, j, "started", func(st *batchv1.JobStatus) bool { return st.GetStartTime() != nil })
	e.clock.add(31 * time.Second)
	// Any change brings the Job back to the controller (a real one also
	// comes back when its deadline is due).
	e.finish(t, pods[0], "Running")
	got := e.waitStatus(t, j, "Failed", func(st *batchv1.JobStatus) bool { return isTrue(st, "Failed") })
	st := got.GetStatus()
	if c := condition(st, "Failed"); c.GetReason() != "DeadlineExceeded" || c.GetMessage() != "Job was active longer than specified deadline" {
		t.Errorf("Failed condition %v", c)
	}
	if st.GetFailed() != 2 || st.GetActive() != 0 {
		t.Errorf("status %v, want failed 2 (its running pods), active 0", st)
	}
	testutil.Eventually(t, "the pods deleted", func() (bool, string) {
		ps := e.podsOf(t, j)
		return len(ps) == 0, podStates(ps)
	})
}

func TestSuspend(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("later", func(s *batchv1.JobSpec) {
		s.Suspend, s.Parallelism, s.Completions = proto.Bool(true), proto.Int32(2), proto.Int32(2)
	}))
	got := e.waitStatus(t, j, "Suspended", func(st *batchv1.JobStatus) bool { return isTrue(st, "Suspended") })
	if c := condition(got.GetStatus(), "Suspended"); c.GetReason() != "JobSuspended" || c.GetMessage() != "Job suspended" || got.GetStatus().GetStartTime() != nil {
		t.Errorf("status %v, want Suspended JobSuspended and no start time", got.GetStatus())
	}
	if n := len(e.podsOf(t, j)); n != 0 {
		t.Fatalf("%d pods of a suspended Job", n)
	}
	setSuspend := func(v bool) {
		for attempt := 0; ; attempt++ {
			cur, err := e.jobs.Get(e.ctx, "default", "later")
			if err != nil {
				t.Fatal(err)
			}
			cur.Spec.Suspend = proto.Bool(v)
			if _, err = e.jobs.Update(e.ctx, cur); err == nil {
				return
			} else if !apierrors.IsConflict(err) || attempt > 10 {
				t.Fatal(err)
			}
		}
	}
	setSuspend(false)
	e.waitRunning(t, j, 2)
	got = e.waitStatus(t, j, "resumed", func(st *batchv1.JobStatus) bool {
		c := condition(st, "Suspended")
		return c.GetStatus() == "False" && c.GetReason() == "JobResumed" && st.GetStartTime() != nil && st.GetActive() == 2
	})
	setSuspend(true)
	testutil.Eventually(t, "pods of the suspended Job deleted", func() (bool, string) {
		ps := e.podsOf(t, j)
		return len(ps) == 0, podStates(ps)
	})
	// The deleted pods pass through uncountedTerminatedPods (and
	// terminating) before they are counted: wait for the counts to settle.
	got = e.waitStatus(t, j, "suspended again", func(st *batchv1.JobStatus) bool {
		u := st.GetUncountedTerminatedPods()
		return isTrue(st, "Suspended") && st.GetActive() == 0 && len(u.GetFailed()) == 0 && len(u.GetSucceeded()) == 0
	})
	// Deleted while suspended, the pods count as failed (Kubernetes
	// counts every deleted pod that did not succeed).
	if st := got.GetStatus(); st.GetFailed() != 2 || isTrue(st, "Failed") || isTrue(st, "Complete") {
		t.Errorf("status %v", st)
	}
}

// TestCountedOnceAcrossRestart stops the controller, finishes pods while
// none runs, and leaves the Job as a controller that died between its two
// status writes would: one succeeded pod's UID in uncountedTerminatedPods
// with its finalizer already removed. The next controller counts every
// pod exactly once.
func TestCountedOnceAcrossRestart(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("once", func(s *batchv1.JobSpec) {
		s.Completions, s.Parallelism = proto.Int32(3), proto.Int32(3)
	}))
	pods := e.waitRunning(t, j, 3)
	e.waitStatus(t, j, "active 3", func(st *batchv1.JobStatus) bool { return st.GetActive() == 3 })
	e.stop()

	// Pod 0: finished, counted as uncounted, finalizer removed (the
	// controller died before moving it into succeeded).
	e.finish(t, pods[0], "Succeeded")
	cur, err := e.jobs.Get(e.ctx, "default", "once")
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: []string{pods[0].GetMetadata().GetUid()}}
	if _, err := e.jobs.UpdateStatus(e.ctx, cur); err != nil {
		t.Fatal(err)
	}
	p0, err := e.pods.Get(e.ctx, "default", pods[0].GetMetadata().GetName())
	if err != nil {
		t.Fatal(err)
	}
	ctrl.RemoveFinalizer(p0.GetMetadata(), job.TrackingFinalizer)
	if _, err := e.pods.Update(e.ctx, p0); err != nil {
		t.Fatal(err)
	}
	// Pod 1: finished while no controller ran; still holds its finalizer.
	e.finish(t, pods[1], "Succeeded")

	e.run(t)
	got := e.waitStatus(t, j, "2 succeeded", func(st *batchv1.JobStatus) bool {
		u := st.GetUncountedTerminatedPods()
		return st.GetSucceeded() == 2 && len(u.GetSucceeded()) == 0
	})
	if st := got.GetStatus(); st.GetActive() != 1 || st.GetFailed() != 0 {
		t.Errorf("status %v, want active 1", st)
	}
	// A restart again changes nothing.
	e.stop()
	e.run(t)
	e.finish(t, pods[2], "Succeeded")
	got = e.waitStatus(t, j, "Complete", func(st *batchv1.JobStatus) bool { return isTrue(st, "Complete") })
	if st := got.GetStatus(); st.GetSucceeded() != 3 {
		t.Errorf("succeeded %d, want 3", st.GetSucceeded())
	}
	if n := len(e.podsOf(t, j)); n != 3 {
		t.Errorf("%d pods, want 3", n)
	}
	e.noFinalizers(t, j)
}

// TestOrphanedPodsReleased: a Job deleted while its pods run (orphaning
// them, as batch/v1 does without a propagation policy) leaves no pod held
// by the tracking finalizer.
func TestOrphanedPodsReleased(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("gone", func(s *batchv1.JobSpec) { s.Parallelism = proto.Int32(2) }))
	pods := e.waitRunning(t, j, 2)
	if err := e.jobs.Delete(e.ctx, "default", "gone", client.DeleteOptions{PropagationPolicy: "Background"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "finalizers released", func() (bool, string) {
		var s []string
		for _, p := range pods {
			cur, err := e.pods.Get(e.ctx, "default", p.GetMetadata().GetName())
			if err != nil {
				return false, err.Error()
			}
			if ctrl.HasFinalizer(cur.GetMetadata(), job.TrackingFinalizer) {
				s = append(s, cur.GetMetadata().GetName())
			}
		}
		return len(s) == 0, strings.Join(s, " ")
	})
}

// TestManagedElsewhere: a Job whose managedBy names another controller is
// left to it, as by Kubernetes' controller.
func TestManagedElsewhere(t *testing.T) {
	e := start(t)
	other := e.create(t, newJob("queued", func(s *batchv1.JobSpec) { s.ManagedBy = proto.String("example.com/queue") }))
	mine := e.create(t, newJob("mine", nil))
	// The controller has seen both once it runs the second one's pod.
	e.waitRunning(t, mine, 1)
	e.waitStatus(t, mine, "mine started", func(st *batchv1.JobStatus) bool { return st.GetStartTime() != nil })
	got, err := e.jobs.Get(e.ctx, "default", "queued")
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus().GetStartTime() != nil || len(e.podsOf(t, other)) != 0 {
		t.Errorf("a Job managed by example.com/queue was run: %v", got.GetStatus())
	}
}

// TestBackoffLimitPerIndex: an index whose pods fail backoffLimitPerIndex
// + 1 times is failed (status.failedIndexes) and not run again; the others
// go on; the Job then fails with reason FailedIndexes.
func TestBackoffLimitPerIndex(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("perindex", func(s *batchv1.JobSpec) {
		s.CompletionMode, s.Completions, s.Parallelism = proto.String("Indexed"), proto.Int32(2), proto.Int32(2)
		s.BackoffLimitPerIndex = proto.Int32(1)
	}))
	byIndex := func() map[string]*corev1.Pod {
		m := map[string]*corev1.Pod{}
		for _, p := range e.running(t, j) {
			m[p.GetMetadata().GetAnnotations()[job.CompletionIndexKey]] = p
		}
		return m
	}
	e.waitRunning(t, j, 2)
	first := byIndex()
	if got := first["0"].GetMetadata().GetAnnotations()[job.IndexFailureCountKey]; got != "0" {
		t.Errorf("failure count of the first pod of index 0: %q, want 0", got)
	}
	e.finish(t, first["0"], "Failed")
	var again *corev1.Pod
	testutil.Eventually(t, "index 0 run again", func() (bool, string) {
		again = byIndex()["0"]
		return again != nil && again.GetMetadata().GetName() != first["0"].GetMetadata().GetName(), podStates(e.podsOf(t, j))
	})
	if got := again.GetMetadata().GetAnnotations()[job.IndexFailureCountKey]; got != "1" {
		t.Errorf("failure count of the second pod of index 0: %q, want 1", got)
	}
	e.finish(t, again, "Failed")
	e.waitStatus(t, j, "index 0 failed", func(st *batchv1.JobStatus) bool { return st.GetFailedIndexes() == "0" && st.GetFailed() == 2 })
	e.finish(t, first["1"], "Succeeded")
	got := e.waitStatus(t, j, "Failed", func(st *batchv1.JobStatus) bool { return isTrue(st, "Failed") })
	st := got.GetStatus()
	if c := condition(st, "Failed"); c.GetReason() != "FailedIndexes" || c.GetMessage() != "Job has failed indexes" {
		t.Errorf("Failed condition %v", c)
	}
	if st.GetCompletedIndexes() != "1" || st.GetFailedIndexes() != "0" || st.GetSucceeded() != 1 {
		t.Errorf("status %v", st)
	}
	if n := len(e.podsOf(t, j)); n != 3 {
		t.Errorf("%d pods, want 3 (index 0 not run a third time)", n)
	}
}

// TestPodFailurePolicy: a failure a rule ignores is not counted and the
// pod is replaced; a failure a FailJob rule matches fails the Job at once,
// with Kubernetes' reason and message.
func TestPodFailurePolicy(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("pfp", func(s *batchv1.JobSpec) {
		s.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []*batchv1.PodFailurePolicyRule{
			{Action: "FailJob", OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: proto.String("work"), Operator: "In", Values: []int32{42}}},
			{Action: "Ignore", OnPodConditions: []*batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: "DisruptionTarget"}}},
		}}
	}))
	fail := func(p *corev1.Pod, exit int32, cond string) {
		t.Helper()
		cur, err := e.pods.Get(e.ctx, "default", p.GetMetadata().GetName())
		if err != nil {
			t.Fatal(err)
		}
		cur.Status = &corev1.PodStatus{Phase: "Failed", ContainerStatuses: []*corev1.ContainerStatus{{Name: "work",
			State: &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: "Error"}}}}}
		if cond != "" {
			cur.Status.Conditions = []*corev1.PodCondition{{Type: cond, Status: "True"}}
		}
		if _, err := e.pods.UpdateStatus(e.ctx, cur); err != nil {
			t.Fatal(err)
		}
	}
	first := e.waitRunning(t, j, 1)[0]
	fail(first, 137, "DisruptionTarget")
	var second *corev1.Pod
	testutil.Eventually(t, "a replacement", func() (bool, string) {
		r := e.running(t, j)
		if len(r) == 1 && r[0].GetMetadata().GetName() != first.GetMetadata().GetName() {
			second = r[0]
			return true, ""
		}
		return false, podStates(e.podsOf(t, j))
	})
	e.noFinalizersOn(t, first)
	if got, _ := e.jobs.Get(e.ctx, "default", "pfp"); got.GetStatus().GetFailed() != 0 {
		t.Errorf("failed %d, want 0 (ignored)", got.GetStatus().GetFailed())
	}
	fail(second, 42, "")
	got := e.waitStatus(t, j, "Failed", func(st *batchv1.JobStatus) bool { return isTrue(st, "Failed") })
	c := condition(got.GetStatus(), "Failed")
	want := fmt.Sprintf("Container work for pod default/%s failed with exit code 42 matching FailJob rule at index 0", second.GetMetadata().GetName())
	if c.GetReason() != "PodFailurePolicy" || c.GetMessage() != want {
		t.Errorf("Failed condition %s %q, want PodFailurePolicy %q", c.GetReason(), c.GetMessage(), want)
	}
	if got.GetStatus().GetFailed() != 1 {
		t.Errorf("failed %d, want 1", got.GetStatus().GetFailed())
	}
}

// noFinalizersOn waits until p no longer holds the tracking finalizer.
func (e *env) noFinalizersOn(t *testing.T, p *corev1.Pod) {
	t.Helper()
	testutil.Eventually(t, "finalizer of "+p.GetMetadata().GetName()+" removed", func() (bool, string) {
		cur, err := e.pods.Get(e.ctx, "default", p.GetMetadata().GetName())
		if err != nil {
			return apierrors.IsNotFound(err), err.Error()
		}
		return !ctrl.HasFinalizer(cur.GetMetadata(), job.TrackingFinalizer), fmt.Sprint(cur.GetMetadata().GetFinalizers())
	})
}

// TestOrphanPolicyReleasesPods: a Job deleted with the Orphan policy (the
// default of batch/v1) leaves pods without a controller once the garbage
// collector has orphaned them; the controller releases their finalizer.
func TestOrphanPolicyReleasesPods(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("orphans", func(s *batchv1.JobSpec) { s.Parallelism = proto.Int32(2) }))
	pods := e.waitRunning(t, j, 2)
	if err := e.jobs.Delete(e.ctx, "default", "orphans", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// What the garbage collector does for the orphan finalizer.
	for _, p := range pods {
		for attempt := 0; ; attempt++ {
			cur, err := e.pods.Get(e.ctx, "default", p.GetMetadata().GetName())
			if err != nil {
				t.Fatal(err)
			}
			cur.Metadata.OwnerReferences = nil
			if _, err = e.pods.Update(e.ctx, cur); err == nil {
				break
			} else if !apierrors.IsConflict(err) || attempt > 10 {
				t.Fatal(err)
			}
		}
	}
	cur, err := e.jobs.Get(e.ctx, "default", "orphans")
	if err != nil {
		t.Fatal(err)
	}
	if fs := cur.GetMetadata().GetFinalizers(); len(fs) != 1 || fs[0] != "orphan" {
		t.Fatalf("finalizers of the deleted Job %v, want orphan (batch/v1's default policy)", fs)
	}
	testutil.Eventually(t, "finalizers of the orphans released", func() (bool, string) {
		var held []string
		for _, p := range pods {
			cur, err := e.pods.Get(e.ctx, "default", p.GetMetadata().GetName())
			if err != nil {
				return false, err.Error()
			}
			if ctrl.HasFinalizer(cur.GetMetadata(), job.TrackingFinalizer) {
				held = append(held, cur.GetMetadata().GetName())
			}
		}
		return len(held) == 0, strings.Join(held, " ")
	})
}

// TestAdoptAndRelease, as Kubernetes' conformance test of the same name:
// a pod of the Job orphaned (its controller reference removed) is adopted
// again; a pod whose labels no longer match the selector is released
// (reference and tracking finalizer removed).
func TestAdoptAndRelease(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("adopt", func(s *batchv1.JobSpec) { s.Parallelism = proto.Int32(2) }))
	pods := e.waitRunning(t, j, 2)
	change := func(name string, f func(*corev1.Pod)) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			cur, err := e.pods.Get(e.ctx, "default", name)
			if err != nil {
				t.Fatal(err)
			}
			f(cur)
			if _, err = e.pods.Update(e.ctx, cur); err == nil {
				return
			} else if !apierrors.IsConflict(err) || attempt > 10 {
				t.Fatal(err)
			}
		}
	}
	orphan := pods[0].GetMetadata().GetName()
	// Ready, so that of the three pods the Job has once it adopts it back
	// (its replacement was made meanwhile) the new one goes, as Kubernetes
	// picks not-ready pods first.
	ready, err := e.pods.Get(e.ctx, "default", orphan)
	if err != nil {
		t.Fatal(err)
	}
	ready.Status = &corev1.PodStatus{Phase: "Running", Conditions: []*corev1.PodCondition{{Type: "Ready", Status: "True"}}}
	if _, err := e.pods.UpdateStatus(e.ctx, ready); err != nil {
		t.Fatal(err)
	}
	change(orphan, func(p *corev1.Pod) { p.Metadata.OwnerReferences = nil })
	testutil.Eventually(t, "the orphan adopted", func() (bool, string) {
		p, err := e.pods.Get(e.ctx, "default", orphan)
		if err != nil {
			return false, err.Error()
		}
		ref := ctrl.ControllerRef(p)
		return ref.GetUid() == j.GetMetadata().GetUid() && ctrl.HasFinalizer(p.GetMetadata(), job.TrackingFinalizer), fmt.Sprint(p.GetMetadata())
	})
	// Once the Job is back to two pods, one of them stops matching.
	var other string
	testutil.Eventually(t, "two pods again", func() (bool, string) {
		r := e.running(t, j)
		for _, p := range r {
			if p.GetMetadata().GetName() != orphan {
				other = p.GetMetadata().GetName()
			}
		}
		return len(r) == 2, podStates(r)
	})
	change(other, func(p *corev1.Pod) {
		delete(p.Metadata.Labels, "batch.kubernetes.io/controller-uid")
	})
	testutil.Eventually(t, "the pod that no longer matches released", func() (bool, string) {
		p, err := e.pods.Get(e.ctx, "default", other)
		if err != nil {
			return false, err.Error()
		}
		return ctrl.ControllerRef(p) == nil && !ctrl.HasFinalizer(p.GetMetadata(), job.TrackingFinalizer), fmt.Sprint(p.GetMetadata())
	})
	// The Job runs two pods again: the adopted one and a new one.
	e.waitRunning(t, j, 2)
}

// TestSuccessPolicy: an Indexed Job whose success policy is met completes
// with reason SuccessPolicy; its other pods are deleted.
func TestSuccessPolicy(t *testing.T) {
	e := start(t)
	j := e.create(t, newJob("leader", func(s *batchv1.JobSpec) {
		s.CompletionMode, s.Completions, s.Parallelism = proto.String("Indexed"), proto.Int32(3), proto.Int32(3)
		s.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []*batchv1.SuccessPolicyRule{{SucceededIndexes: proto.String("0")}}}
	}))
	pods := e.waitRunning(t, j, 3)
	for _, p := range pods {
		if p.GetMetadata().GetAnnotations()[job.CompletionIndexKey] == "0" {
			e.finish(t, p, "Succeeded")
		}
	}
	got := e.waitStatus(t, j, "Complete", func(st *batchv1.JobStatus) bool { return isTrue(st, "Complete") })
	st := got.GetStatus()
	if want := "SuccessCriteriaMet=True/SuccessPolicy,Complete=True/SuccessPolicy"; conditionTypes(st) != want {
		t.Errorf("conditions %s, want %s", conditionTypes(st), want)
	}
	if c := condition(st, "Complete"); c.GetMessage() != "Matched rules at index 0" {
		t.Errorf("message %q", c.GetMessage())
	}
	if st.GetCompletedIndexes() != "0" || st.GetSucceeded() != 1 || st.GetActive() != 0 || st.GetCompletionTime() == nil {
		t.Errorf("status %v", st)
	}
	testutil.Eventually(t, "the other pods deleted", func() (bool, string) {
		ps := e.podsOf(t, j)
		return len(ps) == 1, podStates(ps)
	})
}
