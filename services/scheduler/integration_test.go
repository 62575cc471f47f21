// This file holds the scheduler's tests against a real API service:
// placement by requests, selectors, affinity and taints, leader handover,
// binds tied to the pod's uid, and preemption.

package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	schedulingv1 "github.com/kplane/kplane/proto/kplane/scheduling/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/plugins/defaultbinder"
	"github.com/kplane/kplane/services/scheduler/queue"
)

// testLogger logs through t at debug level when KPLANE_SCHEDULER_DEBUG is set.
func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("KPLANE_SCHEDULER_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type nodeSpec struct {
	name, cpu, mem string
	labels         map[string]string
	taints         []*corev1.Taint
	// extra are further allocatable resources (extended resources).
	extra map[string]string
}

func createNode(t *testing.T, ctx context.Context, nodes *client.Client[*corev1.Node], n nodeSpec) {
	t.Helper()
	created, err := nodes.Create(ctx, &corev1.Node{Metadata: &metav1.ObjectMeta{Name: n.name, Labels: n.labels}, Spec: &corev1.NodeSpec{Taints: n.taints}})
	if err != nil {
		t.Fatalf("create node %s: %v", n.name, err)
	}
	res := map[string]string{"cpu": n.cpu, "memory": n.mem, "pods": "110"}
	maps.Copy(res, n.extra)
	created.Status = &corev1.NodeStatus{Capacity: res, Allocatable: res,
		Conditions: []*corev1.NodeCondition{{Type: "Ready", Status: "True"}}}
	if _, err := nodes.UpdateStatus(ctx, created); err != nil {
		t.Fatalf("node %s status: %v", n.name, err)
	}
}

func pod(name string, cpu string, mut func(*corev1.PodSpec)) *corev1.Pod {
	spec := &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1.27",
		Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": cpu, "memory": "128Mi"}}}}}
	if mut != nil {
		mut(spec)
	}
	return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: spec}
}

// startScheduler runs a scheduler until the test ends; the channel is
// closed when Run has returned.
func startScheduler(t *testing.T, cfg scheduler.Config) (*scheduler.Scheduler, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	s, err := scheduler.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("scheduler did not stop within 30s")
		}
	})
	return s, cancel, done
}

// TestSchedulesAgainstAPIServer: three nodes of different sizes, labels
// and taints; pods with requests, nodeSelectors, affinities and
// tolerations land where they must; pods that fit nowhere report why and
// are bound once a fitting node appears.
func TestSchedulesAgainstAPIServer(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	admin := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := client.Must[*corev1.Node](admin)
	pods := client.Must[*corev1.Pod](admin)
	events := client.Must[*corev1.Event](admin)

	gpuTaint := &corev1.Taint{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}
	for _, n := range []nodeSpec{
		{name: "small", cpu: "1", mem: "2Gi", labels: map[string]string{"size": "small"}},
		{name: "large", cpu: "8", mem: "16Gi", labels: map[string]string{"size": "large", "disk": "ssd"}},
		{name: "gpu", cpu: "4", mem: "8Gi", labels: map[string]string{"size": "medium", "gpu": "true"}, taints: []*corev1.Taint{gpuTaint}},
	} {
		createNode(t, ctx, nodes, n)
	}
	// The scheduler runs with its own identity, so RBAC's
	// system:kube-scheduler role is exercised too.
	startScheduler(t, scheduler.Config{Conn: env.Dial(t, apiservertest.SchedulerToken),
		Queue: queue.Config{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}})

	gpuTol := []*corev1.Toleration{{Key: "dedicated", Operator: "Equal", Value: "gpu", Effect: "NoSchedule"}}
	requireGPU := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []*corev1.NodeSelectorTerm{{MatchExpressions: []*corev1.NodeSelectorRequirement{{Key: "gpu", Operator: "In", Values: []string{"true"}}}}}}}}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want string // node, or "" for unschedulable
		// why is the FailedScheduling message an unschedulable pod must report.
		why string
	}{
		{name: "nodeSelector picks the ssd node", pod: pod("needs-ssd", "100m", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"disk": "ssd"} }), want: "large"},
		{name: "toleration and required affinity reach the gpu node", pod: pod("gpu-job", "500m", func(s *corev1.PodSpec) {
			s.Tolerations, s.Affinity = gpuTol, requireGPU
		}), want: "gpu"},
		{name: "preferred affinity wins over spreading", pod: pod("likes-small", "100m", func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []*corev1.PreferredSchedulingTerm{{
				Weight: 100, Preference: &corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{{Key: "size", Operator: "In", Values: []string{"small"}}}}}}}}
		}), want: "small"},
		{name: "only the large node has 6 cpus", pod: pod("big", "6", nil), want: "large"},
		{name: "affinity to a tainted node without toleration", pod: pod("no-tol", "100m", func(s *corev1.PodSpec) { s.Affinity = requireGPU }),
			why: "0/3 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {dedicated: gpu}."},
		{name: "too big for every node", pod: pod("huge", "10", nil),
			why: "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}."},
	}
	for _, tc := range cases {
		if _, err := pods.Create(ctx, tc.pod); err != nil {
			t.Fatalf("create %s: %v", tc.pod.Metadata.Name, err)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.pod.Metadata.Name
			if tc.want != "" {
				var got string
				testutil.EventuallyWithin(t, time.Minute, name+" bound", func() bool {
					p, err := pods.Get(ctx, "default", name)
					got = p.GetSpec().GetNodeName()
					return err == nil && got != ""
				})
				if got != tc.want {
					t.Errorf("pod %s: got node %q, want %q", name, got, tc.want)
				}
				return
			}
			var cond *corev1.PodCondition
			testutil.EventuallyWithin(t, time.Minute, name+" PodScheduled=False", func() bool {
				p, err := pods.Get(ctx, "default", name)
				if err != nil {
					return false
				}
				for _, c := range p.GetStatus().GetConditions() {
					if c.GetType() == "PodScheduled" {
						cond = c
						return true
					}
				}
				return false
			})
			if cond.GetStatus() != "False" || cond.GetReason() != "Unschedulable" || cond.GetMessage() != tc.why {
				t.Errorf("pod %s condition: got %s/%s %q, want False/Unschedulable %q", name, cond.GetStatus(), cond.GetReason(), cond.GetMessage(), tc.why)
			}
			var msgs []string
			testutil.EventuallyWithin(t, time.Minute, name+" FailedScheduling event", func() bool {
				items, _, err := events.List(ctx, "default", client.ListOptions{FieldSelector: "involvedObject.name=" + name})
				if err != nil {
					return false
				}
				msgs = msgs[:0]
				for _, e := range items {
					if e.GetReason() == "FailedScheduling" && e.GetType() == "Warning" {
						msgs = append(msgs, e.GetMessage())
					}
				}
				return len(msgs) > 0
			})
			if msgs[0] != tc.why {
				t.Errorf("pod %s event: got %q, want %q", name, msgs[0], tc.why)
			}
			p, err := pods.Get(ctx, "default", name)
			if err != nil || p.GetSpec().GetNodeName() != "" {
				t.Errorf("pod %s: got node %q, %v; want still pending", name, p.GetSpec().GetNodeName(), err)
			}
		})
	}

	t.Run("pending pod bound once a fitting node appears", func(t *testing.T) {
		createNode(t, ctx, nodes, nodeSpec{name: "xl", cpu: "16", mem: "64Gi", labels: map[string]string{"size": "xl"}})
		var got string
		testutil.EventuallyWithin(t, time.Minute, "huge bound", func() bool {
			p, err := pods.Get(ctx, "default", "huge")
			got = p.GetSpec().GetNodeName()
			return err == nil && got != ""
		})
		if got != "xl" {
			t.Errorf("huge: got node %q, want xl", got)
		}
		p, err := pods.Get(ctx, "default", "no-tol")
		if err != nil || p.GetSpec().GetNodeName() != "" {
			t.Errorf("no-tol: got node %q, %v; want still pending", p.GetSpec().GetNodeName(), err)
		}
	})

	t.Run("a deleted pod frees room for a waiting one", func(t *testing.T) {
		// small has 1 cpu; likes-small holds 100m. A 950m pod pinned to
		// small waits until likes-small is deleted.
		if _, err := pods.Create(ctx, pod("pinned", "950m", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"size": "small"} })); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWithin(t, time.Minute, "pinned reported unschedulable", func() bool {
			p, err := pods.Get(ctx, "default", "pinned")
			return err == nil && len(p.GetStatus().GetConditions()) > 0
		})
		zero := int64(0)
		if err := pods.Delete(ctx, "default", "likes-small", client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWithin(t, time.Minute, "pinned bound to small", func() bool {
			p, err := pods.Get(ctx, "default", "pinned")
			return err == nil && p.GetSpec().GetNodeName() == "small"
		})
	})
}

// TestLeaderHandover: two replicas, one schedules; cancelling the active
// one hands over to the other, and no pod's nodeName ever changes once set
// (the binding subresource refuses a second bind).
func TestLeaderHandover(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	admin := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := client.Must[*corev1.Node](admin)
	pods := client.Must[*corev1.Pod](admin)
	for i := range 3 {
		createNode(t, ctx, nodes, nodeSpec{name: fmt.Sprintf("n%d", i), cpu: "32", mem: "64Gi"})
	}

	// Record every nodeName each pod ever has, from a watch.
	var mu sync.Mutex
	seen := map[string][]string{}
	inf := client.NewInformer(client.ListWatch(pods, "default", "", "", 0), client.InformerOptions[*corev1.Pod]{})
	record := func(p *corev1.Pod) {
		n := p.GetSpec().GetNodeName()
		if n == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		k := client.Key(p)
		if h := seen[k]; len(h) == 0 || h[len(h)-1] != n {
			seen[k] = append(h, n)
		}
	}
	inf.AddEventHandler(client.Handler[*corev1.Pod]{OnAdd: record, OnUpdate: func(_, p *corev1.Pod) { record(p) }})
	ictx, icancel := context.WithCancel(ctx)
	idone := make(chan struct{})
	go func() { defer close(idone); _ = inf.Run(ictx) }()
	defer func() { icancel(); <-idone }()

	le := func(id string) *scheduler.LeaderElection {
		return &scheduler.LeaderElection{Identity: id, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 300 * time.Millisecond}
	}
	a, cancelA, doneA := startScheduler(t, scheduler.Config{Conn: env.Dial(t, apiservertest.SchedulerToken), LeaderElection: le("a"), Logger: testLogger(t)})
	b, cancelB, doneB := startScheduler(t, scheduler.Config{Conn: env.Dial(t, apiservertest.SchedulerToken), LeaderElection: le("b"), Logger: testLogger(t)})
	testutil.EventuallyWithin(t, time.Minute, "a leader", func() bool { return a.IsLeader() || b.IsLeader() })
	leader, standby, cancelLeader, leaderDone := a, b, cancelA, doneA
	if b.IsLeader() {
		leader, standby, cancelLeader, leaderDone = b, a, cancelB, doneB
	}
	boundCount := func(prefix string) int {
		items, _, err := pods.List(ctx, "default", client.ListOptions{})
		if err != nil {
			return -1
		}
		n := 0
		for _, p := range items {
			if strings.HasPrefix(p.GetMetadata().GetName(), prefix) && p.GetSpec().GetNodeName() != "" {
				n++
			}
		}
		return n
	}
	const perWave = 30
	for i := range perWave {
		if _, err := pods.Create(ctx, pod(fmt.Sprintf("w1-%d", i), "100m", nil)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.EventuallyWithin(t, time.Minute, "first wave bound", func() bool { return boundCount("w1-") == perWave })
	testutil.EventuallyWithin(t, time.Minute, "old leader's bind results", func() bool { st := leader.Stats(); return st.Bound+st.BindFailures >= perWave })
	if got := standby.Stats().Bound; got != 0 {
		t.Errorf("standby %s bound %d pods while not leading, want 0", standby.Identity(), got)
	}

	// Kill the leader while a second wave is being created.
	cancelLeader()
	select {
	case <-leaderDone:
	case <-time.After(30 * time.Second):
		t.Fatal("old leader did not stop")
	}
	for i := range perWave {
		if _, err := pods.Create(ctx, pod(fmt.Sprintf("w2-%d", i), "100m", nil)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.EventuallyWithin(t, time.Minute, "second wave bound by the new leader", func() bool { return boundCount("w2-") == perWave })
	if !standby.IsLeader() {
		t.Errorf("standby %s is not leading after the leader stopped", standby.Identity())
	}
	// A bind shows in the API before its response reaches the scheduler:
	// wait for the counters to catch up.
	testutil.EventuallyWithin(t, time.Minute, "new leader's bind results", func() bool { st := standby.Stats(); return st.Bound+st.BindFailures >= perWave })
	if st := standby.Stats(); st.Bound != perWave || st.BindFailures != 0 {
		t.Errorf("new leader: bound %d, bind failures %d; want %d and 0", st.Bound, st.BindFailures, perWave)
	}
	if st := leader.Stats(); st.Bound != perWave || st.BindFailures != 0 {
		t.Errorf("old leader: bound %d, bind failures %d; want %d and 0", st.Bound, st.BindFailures, perWave)
	}
	testutil.EventuallyWithin(t, time.Minute, "watch caught up", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 2*perWave
	})
	mu.Lock()
	defer mu.Unlock()
	for k, h := range seen {
		if len(h) != 1 {
			t.Errorf("pod %s: nodeName went %v, want set once", k, h)
		}
	}
}

// connHandle hands plugin factories a connection.
type connHandle struct{ conn grpc.ClientConnInterface }

func (connHandle) Snapshot() framework.NodeLister         { return nil }
func (h connHandle) ClientConn() grpc.ClientConnInterface { return h.conn }
func (connHandle) RunFilterPlugins(context.Context, *framework.CycleState, *framework.PodInfo, *framework.NodeInfo) *framework.Status {
	return nil
}
func (connHandle) EventRecorder() *client.Recorder { return nil }

// TestDefaultBinder: binds carry the pod's uid, so a decision made for a
// pod never binds a re-created pod of the same name; a second bind is
// Conflict.
func TestDefaultBinder(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	admin := env.Dial(t, apiservertest.AdminToken)
	ctx := context.Background()
	pods := client.Must[*corev1.Pod](admin)
	createNode(t, ctx, client.Must[*corev1.Node](admin), nodeSpec{name: "n1", cpu: "4", mem: "8Gi"})
	schedConn := env.Dial(t, apiservertest.SchedulerToken)
	// The API service may answer before its RBAC cache has the bootstrap
	// roles; wait until the scheduler's identity is authorized.
	testutil.EventuallyWithin(t, time.Minute, "scheduler authorized", func() bool {
		_, _, err := client.Must[*corev1.Pod](schedConn).List(ctx, "default", client.ListOptions{})
		return err == nil
	})
	p, err := defaultbinder.New(nil, connHandle{schedConn})
	if err != nil {
		t.Fatal(err)
	}
	b := p.(framework.BindPlugin)

	old, err := pods.Create(ctx, pod("p", "100m", nil))
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if err := pods.Delete(ctx, "default", "p", client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	fresh, err := pods.Create(ctx, pod("p", "100m", nil))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		pod          *corev1.Pod
		wantConflict bool
	}{
		{name: "stale uid refused", pod: old, wantConflict: true},
		{name: "current uid bound", pod: fresh},
		{name: "second bind refused", pod: fresh, wantConflict: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := b.Bind(ctx, nil, framework.NewPodInfo(tc.pod), "n1")
			if got := apierrors.IsConflict(st.AsError()); got != tc.wantConflict || (!tc.wantConflict && !st.IsSuccess()) {
				t.Errorf("got %v, want conflict=%v", st.AsError(), tc.wantConflict)
			}
		})
	}
}

// TestPreemption: a node full of a low-priority pod; a high-priority pod
// that does not fit evicts it (gracefully: the pod is marked for deletion
// and a stand-in kubelet finishes it), is nominated to the node and bound
// there; the victim gets a Preempted event. A pod of equal priority evicts
// nothing.
func TestPreemption(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	admin := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := client.Must[*corev1.Node](admin)
	pods := client.Must[*corev1.Pod](admin)
	events := client.Must[*corev1.Event](admin)
	createNode(t, ctx, nodes, nodeSpec{name: "only", cpu: "2", mem: "8Gi"})
	startScheduler(t, scheduler.Config{Conn: env.Dial(t, apiservertest.SchedulerToken), Logger: testLogger(t),
		Queue: queue.Config{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}})

	// The stand-in kubelet: a pod marked for deletion is gone once its
	// containers would have stopped (here at once).
	go func() {
		for ctx.Err() == nil {
			l, _, err := pods.List(ctx, "default", client.ListOptions{})
			if err == nil {
				for _, p := range l {
					if p.GetMetadata().GetDeletionTimestamp() != nil {
						_ = pods.Delete(ctx, "default", p.GetMetadata().GetName(), client.DeleteOptions{GracePeriodSeconds: proto.Int64(0)})
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	// Record every nomination the high-priority pod gets.
	w, err := pods.Watch(ctx, "default", client.ListOptions{FieldSelector: "metadata.name=important"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	nominated := make(chan string, 10)
	go func() {
		for {
			ev, err := w.Next()
			if err != nil {
				return
			}
			if n := ev.Object.GetStatus().GetNominatedNodeName(); n != "" {
				select {
				case nominated <- n:
				default:
				}
			}
		}
	}()

	// A pod gets its priority from its PriorityClass (the Priority
	// admission plugin refuses one set in the spec); 0 is no class.
	pcs := client.Must[*schedulingv1.PriorityClass](admin)
	priority := func(n int32) func(*corev1.PodSpec) {
		if n == 0 {
			return func(*corev1.PodSpec) {}
		}
		name := fmt.Sprint("priority-", n)
		if _, err := pcs.Create(ctx, &schedulingv1.PriorityClass{Metadata: &metav1.ObjectMeta{Name: name}, Value: n}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		return func(s *corev1.PodSpec) { s.PriorityClassName = name }
	}
	bound := func(name string) string {
		p, err := pods.Get(ctx, "default", name)
		if err != nil {
			return ""
		}
		return p.GetSpec().GetNodeName()
	}
	low, err := pods.Create(ctx, pod("batch", "1500m", priority(0)))
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, time.Minute, "batch bound", func() bool { return bound("batch") == "only" })

	// Equal priority: unschedulable, and batch stays.
	if _, err := pods.Create(ctx, pod("peer", "1", priority(0))); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, time.Minute, "peer reported unschedulable", func() bool {
		p, err := pods.Get(ctx, "default", "peer")
		if err != nil {
			return false
		}
		for _, c := range p.GetStatus().GetConditions() {
			if c.GetType() == "PodScheduled" && c.GetStatus() == "False" {
				return true
			}
		}
		return false
	})
	if err := pods.Delete(ctx, "default", "peer", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if bound("batch") != "only" {
		t.Fatal("a pod of equal priority evicted batch")
	}

	if _, err := pods.Create(ctx, pod("important", "1", priority(1000))); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, time.Minute, "important bound to the only node", func() bool { return bound("important") == "only" })
	if _, err := pods.Get(ctx, "default", "batch"); !apierrors.IsNotFound(err) {
		t.Errorf("batch after preemption: got %v, want NotFound", err)
	}
	select {
	case n := <-nominated:
		if n != "only" {
			t.Errorf("got nominatedNodeName %q, want only", n)
		}
	default:
		t.Error("important was never nominated to a node")
	}
	testutil.EventuallyWithin(t, time.Minute, "a Preempted event on batch", func() bool {
		l, _, err := events.List(ctx, "default", client.ListOptions{FieldSelector: "involvedObject.name=batch,reason=Preempted"})
		if err != nil || len(l) != 1 {
			return false
		}
		want := "Preempted by pod " + uidOf(ctx, pods, "important") + " on node only"
		return l[0].GetMessage() == want && l[0].GetInvolvedObject().GetUid() == low.GetMetadata().GetUid()
	})
}

func uidOf(ctx context.Context, pods *client.Client[*corev1.Pod], name string) string {
	p, err := pods.Get(ctx, "default", name)
	if err != nil {
		return ""
	}
	return p.GetMetadata().GetUid()
}

// TestPreemptionOfExtendedResource follows Kubernetes' PreemptionExecutionPath
// conformance test on one node with 1000 example.com/fakecpu: pods of
// priority 1, 2 and 3 hold 200, 300 and 450; a pod of priority 4 asking 500
// evicts exactly the first two, which get the DisruptionTarget condition
// (they hold a finalizer, so they stay terminating); while they terminate
// and after, a pod of priority 2 that would fit in the room made does not
// take it; the preemptor is bound there once they are gone.
func TestPreemptionOfExtendedResource(t *testing.T) {
	const fake = "example.com/fakecpu"
	env := apiservertest.Start(t, apiservertest.Options{})
	admin := env.Dial(t, apiservertest.AdminToken)
	ctx := context.Background()
	nodes := client.Must[*corev1.Node](admin)
	pods := client.Must[*corev1.Pod](admin)
	pcs := client.Must[*schedulingv1.PriorityClass](admin)
	createNode(t, ctx, nodes, nodeSpec{name: "only", cpu: "4", mem: "8Gi", extra: map[string]string{fake: "1000"}})
	startScheduler(t, scheduler.Config{Conn: env.Dial(t, apiservertest.SchedulerToken), Logger: testLogger(t),
		Queue: queue.Config{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}})

	fakePod := func(name string, prio int32, amount string, finalizer bool) *corev1.Pod {
		class := fmt.Sprint("p", prio)
		if _, err := pcs.Create(ctx, &schedulingv1.PriorityClass{Metadata: &metav1.ObjectMeta{Name: class}, Value: prio}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		p := pod(name, "100m", func(s *corev1.PodSpec) {
			s.PriorityClassName = class
			s.Containers[0].Resources.Requests[fake] = amount
			s.Containers[0].Resources.Limits = map[string]string{fake: amount}
		})
		if finalizer {
			p.Metadata.Finalizers = []string{"example.com/hold"}
		}
		return p
	}
	get := func(name string) *corev1.Pod {
		p, err := pods.Get(ctx, "default", name)
		if err != nil {
			return nil
		}
		return p
	}
	for _, p := range []*corev1.Pod{fakePod("rs-pod1", 1, "200", true), fakePod("rs-pod2", 2, "300", true), fakePod("rs-pod3", 3, "450", false)} {
		if _, err := pods.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		name := p.GetMetadata().GetName()
		testutil.EventuallyWithin(t, time.Minute, name+" bound", func() bool { return get(name).GetSpec().GetNodeName() == "only" })
	}

	if _, err := pods.Create(ctx, fakePod("pod4", 4, "500", false)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rs-pod1", "rs-pod2"} {
		testutil.EventuallyWithin(t, time.Minute, name+" preempted with the DisruptionTarget condition", func() bool {
			p := get(name)
			if p.GetMetadata().GetDeletionTimestamp() == nil {
				return false
			}
			for _, c := range p.GetStatus().GetConditions() {
				if c.GetType() == "DisruptionTarget" {
					return c.GetStatus() == "True" && c.GetReason() == "PreemptionByScheduler" &&
						c.GetMessage() == "default-scheduler: preempting to accommodate a higher priority pod"
				}
			}
			return false
		})
	}
	testutil.EventuallyWithin(t, time.Minute, "pod4 nominated to only", func() bool { return get("pod4").GetStatus().GetNominatedNodeName() == "only" })

	// A replacement of priority 2 arrives while the victims terminate.
	if _, err := pods.Create(ctx, fakePod("late", 2, "300", false)); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, time.Minute, "late reported unschedulable", func() bool {
		for _, c := range get("late").GetStatus().GetConditions() {
			if c.GetType() == "PodScheduled" && c.GetStatus() == "False" {
				return strings.Contains(c.GetMessage(), "Insufficient "+fake)
			}
		}
		return false
	})
	// The victims go (the stand-in kubelet's part).
	for _, name := range []string{"rs-pod1", "rs-pod2"} {
		p := get(name)
		p.Metadata.Finalizers = nil
		if _, err := pods.Update(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := pods.Delete(ctx, "default", name, client.DeleteOptions{GracePeriodSeconds: proto.Int64(0)}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	testutil.EventuallyWithin(t, time.Minute, "pod4 bound to only", func() bool { return get("pod4").GetSpec().GetNodeName() == "only" })
	if n := get("late").GetSpec().GetNodeName(); n != "" {
		t.Errorf("late: got bound to %q, want unbound (the room was made for pod4)", n)
	}
	if get("rs-pod3").GetMetadata().GetDeletionTimestamp() != nil {
		t.Error("rs-pod3 was preempted; want only rs-pod1 and rs-pod2")
	}
}
