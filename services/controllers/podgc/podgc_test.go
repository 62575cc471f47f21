// This file holds the pod garbage collector's tests on a real in-process API
// service, its passes run by hand under a fake clock: a pod of a deleted
// node goes after the quarantine (marked Failed with DisruptionTarget
// first), terminated pods beyond the threshold go oldest first, an
// unscheduled terminating pod goes at once, a terminating pod on an
// out-of-service node goes, a status written meanwhile is kept.
package podgc_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/podgc"
)

type env struct {
	ctx     context.Context
	pods    *client.Client[*corev1.Pod]
	nodes   *client.Client[*corev1.Node]
	podInf  *client.Informer[*corev1.Pod]
	nodeInf *client.Informer[*corev1.Node]
	clock   *clocktesting.FakeClock
	gc      *podgc.Controller
}

// start runs an API service and the informers, and returns a controller
// whose passes the test runs itself (Run is not started).
func start(t *testing.T, threshold int) *env {
	t.Helper()
	conn := apiservertest.Start(t, apiservertest.Options{}).Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	e := &env{ctx: ctx, pods: client.Must[*corev1.Pod](conn), nodes: client.Must[*corev1.Node](conn),
		clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	e.podInf = client.NewInformer(client.ListWatch(e.pods, "", "", "", 500), client.InformerOptions[*corev1.Pod]{})
	e.nodeInf = client.NewInformer(client.ListWatch(e.nodes, "", "", "", 500), client.InformerOptions[*corev1.Node]{})
	done := make(chan struct{}, 2)
	go func() { _ = e.podInf.Run(ctx); done <- struct{}{} }()
	go func() { _ = e.nodeInf.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	if !client.WaitForCacheSync(ctx, e.podInf, e.nodeInf) {
		t.Fatal("caches did not sync")
	}
	e.gc = e.newGC(e.pods, threshold)
	return e
}

func (e *env) newGC(pods podgc.PodClient, threshold int) *podgc.Controller {
	return podgc.New(podgc.Config{Pods: pods, Nodes: e.nodes, PodInformer: e.podInf, NodeInformer: e.nodeInf,
		TerminatedPodThreshold: threshold, Clock: e.clock})
}

func (e *env) node(t *testing.T, name string, ready bool, taints ...*corev1.Taint) {
	t.Helper()
	n, err := e.nodes.Create(e.ctx, &corev1.Node{Metadata: &metav1.ObjectMeta{Name: name}, Spec: &corev1.NodeSpec{Taints: taints}})
	if err != nil {
		t.Fatal(err)
	}
	status := "False"
	if ready {
		status = "True"
	}
	n.Status = &corev1.NodeStatus{Conditions: []*corev1.NodeCondition{{Type: "Ready", Status: status}}}
	if _, err := e.nodes.UpdateStatus(e.ctx, n); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "node "+name+" cached", func() (bool, string) {
		_, ok := e.nodeInf.Store().Get(name)
		return ok, ""
	})
}

// pod creates a pod on node (none: "") with phase, and finalizers if
// given; it waits until the cache has it.
func (e *env) pod(t *testing.T, name, node, phase string, finalizers ...string) *corev1.Pod {
	t.Helper()
	p, err := e.pods.Create(e.ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: name, Finalizers: finalizers},
		Spec: &corev1.PodSpec{NodeName: node, Containers: []*corev1.Container{{Name: "c", Image: "busybox"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if phase != "" {
		p.Status = &corev1.PodStatus{Phase: phase}
		if p, err = e.pods.UpdateStatus(e.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	e.cached(t, p)
	return p
}

// cached waits until the pod cache has p's resourceVersion or later.
func (e *env) cached(t *testing.T, p *corev1.Pod) {
	t.Helper()
	key := p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName()
	testutil.Eventually(t, key+" cached", func() (bool, string) {
		c, ok := e.podInf.Store().Get(key)
		if !ok {
			return false, "absent"
		}
		have, _ := strconv.ParseInt(c.GetMetadata().GetResourceVersion(), 10, 64)
		want, _ := strconv.ParseInt(p.GetMetadata().GetResourceVersion(), 10, 64)
		return have >= want, fmt.Sprint(c.GetMetadata())
	})
}

// pass runs one garbage collection pass.
func (e *env) pass(t *testing.T) {
	t.Helper()
	if _, err := e.gc.Reconcile(e.ctx, podgc.Key); err != nil {
		t.Fatalf("pass: %v", err)
	}
}

func (e *env) exists(t *testing.T, name string) (*corev1.Pod, bool) {
	t.Helper()
	p, err := e.pods.Get(e.ctx, "default", name)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return p, true
}

func TestPodOfDeletedNode(t *testing.T) {
	e := start(t, podgc.DefaultTerminatedPodThreshold)
	e.node(t, "kept", true)
	e.pod(t, "on-kept", "kept", "Running")
	// A pod whose node never existed, and one whose node is deleted; the
	// second carries a finalizer so that what was written before the
	// deletion can be read afterwards.
	e.pod(t, "on-ghost", "ghost", "Running")
	e.node(t, "gone", true)
	e.pod(t, "on-gone", "gone", "Running", "example.com/hold")
	if err := e.nodes.Delete(e.ctx, "", "gone", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "node gone from the cache", func() (bool, string) {
		_, ok := e.nodeInf.Store().Get("gone")
		return !ok, ""
	})

	// First seen missing now: quarantined, nothing deleted.
	e.pass(t)
	e.clock.Step(podgc.DefaultQuarantine - time.Second)
	e.pass(t)
	for _, name := range []string{"on-kept", "on-ghost", "on-gone"} {
		if p, ok := e.exists(t, name); !ok || p.GetMetadata().GetDeletionTimestamp() != nil {
			t.Fatalf("%s within the quarantine: got %v, want it untouched", name, p.GetMetadata())
		}
	}

	// The quarantine over: both orphans go.
	e.clock.Step(time.Second)
	e.pass(t)
	if _, ok := e.exists(t, "on-ghost"); ok {
		t.Errorf("on-ghost after the quarantine: still there")
	}
	p, ok := e.exists(t, "on-gone")
	if !ok || p.GetMetadata().GetDeletionTimestamp() == nil {
		t.Fatalf("on-gone after the quarantine: got %v, want it deleted (held by its finalizer)", p.GetMetadata())
	}
	if got := p.GetStatus().GetPhase(); got != "Failed" {
		t.Errorf("on-gone phase: got %q, want Failed", got)
	}
	i := slices.IndexFunc(p.GetStatus().GetConditions(), func(c *corev1.PodCondition) bool { return c.GetType() == "DisruptionTarget" })
	if i < 0 {
		t.Fatalf("on-gone conditions: got %v, want DisruptionTarget", p.GetStatus().GetConditions())
	}
	want := &corev1.PodCondition{Type: "DisruptionTarget", Status: "True", Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists"}
	got := proto.Clone(p.GetStatus().GetConditions()[i]).(*corev1.PodCondition)
	got.LastTransitionTime = nil
	if !proto.Equal(got, want) {
		t.Errorf("DisruptionTarget: got %v, want %v", got, want)
	}
	if _, ok := e.exists(t, "on-kept"); !ok {
		t.Errorf("on-kept: deleted, want kept")
	}
}

func TestNodeBackDuringQuarantine(t *testing.T) {
	e := start(t, podgc.DefaultTerminatedPodThreshold)
	e.pod(t, "early", "late-node", "Running")
	e.pass(t)
	// The node registers; the live read at the end of the quarantine
	// finds it (the cache may or may not have it yet).
	if _, err := e.nodes.Create(e.ctx, &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "late-node"}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(podgc.DefaultQuarantine)
	e.pass(t)
	if p, ok := e.exists(t, "early"); !ok || p.GetStatus().GetPhase() != "Running" {
		t.Errorf("pod of a node that registered late: got %v, want it kept Running", p)
	}
}

func TestTerminatedPodThreshold(t *testing.T) {
	e := start(t, 2)
	e.node(t, "n1", true)
	// Created in this order; creationTimestamp has whole seconds, so the
	// tie is broken by name, as in Kubernetes: a < b < c < d.
	e.pod(t, "a-done", "n1", "Succeeded")
	e.pod(t, "b-failed", "n1", "Failed")
	e.pod(t, "c-running", "n1", "Running")
	e.pod(t, "d-done", "n1", "Succeeded")
	e.pod(t, "e-done", "n1", "Succeeded")
	// Evicted pods go first, however young.
	z := e.pod(t, "z-evicted", "n1", "")
	z.Status = &corev1.PodStatus{Phase: "Failed", Reason: "Evicted"}
	z, err := e.pods.UpdateStatus(e.ctx, z)
	if err != nil {
		t.Fatal(err)
	}
	e.cached(t, z)
	e.pass(t)
	var left []string
	for _, name := range []string{"a-done", "b-failed", "c-running", "d-done", "e-done", "z-evicted"} {
		if _, ok := e.exists(t, name); ok {
			left = append(left, name)
		}
	}
	if want := []string{"c-running", "d-done", "e-done"}; !slices.Equal(left, want) {
		t.Errorf("after a pass with threshold 2 over 5 terminated pods: got %v, want %v", left, want)
	}
}

func TestThresholdZeroKeepsTerminated(t *testing.T) {
	e := start(t, 0)
	e.node(t, "n1", true)
	e.pod(t, "done", "n1", "Succeeded")
	e.pass(t)
	if _, ok := e.exists(t, "done"); !ok {
		t.Errorf("threshold 0: terminated pod deleted, want kept")
	}
}

func TestUnscheduledTerminatingPod(t *testing.T) {
	e := start(t, podgc.DefaultTerminatedPodThreshold)
	// A finalizer keeps the unscheduled pod terminating after its
	// deletion (without one the API service removes it at once).
	e.pod(t, "pending", "", "Pending", "example.com/hold")
	e.pod(t, "waiting", "", "Pending")
	if err := e.pods.Delete(e.ctx, "default", "pending", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "pending terminating in the cache", func() (bool, string) {
		c, ok := e.podInf.Store().Get("default/pending")
		return ok && c.GetMetadata().GetDeletionTimestamp() != nil, fmt.Sprint(c.GetMetadata())
	})
	e.pass(t)
	got, ok := e.exists(t, "pending")
	if !ok || got.GetStatus().GetPhase() != "Failed" {
		t.Fatalf("unscheduled terminating pod after a pass: got %v, want it marked Failed", got)
	}
	if got.GetMetadata().GetDeletionGracePeriodSeconds() != 0 {
		t.Errorf("deletionGracePeriodSeconds: got %d, want 0 (force deleted)", got.GetMetadata().GetDeletionGracePeriodSeconds())
	}
	// Its finalizer removed, it goes.
	got.Metadata.Finalizers = nil
	if _, err := e.pods.Update(e.ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.exists(t, "pending"); ok {
		t.Errorf("pending: still there without its finalizer")
	}
	if w, ok := e.exists(t, "waiting"); !ok || w.GetStatus().GetPhase() != "Pending" {
		t.Errorf("unscheduled pod not being deleted: got %v, want it kept Pending", w)
	}
}

// racingWriter writes a pod's status (adding a condition) just before the
// controller's first status write, which so carries a stale
// resourceVersion.
type racingWriter struct {
	*client.Client[*corev1.Pod]
	raced bool
}

func (r *racingWriter) UpdateStatus(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	if !r.raced {
		r.raced = true
		cur, err := r.Get(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName())
		if err != nil {
			return nil, err
		}
		cur.Status.Conditions = append(cur.Status.Conditions, &corev1.PodCondition{Type: "example.com/Seen", Status: "True"})
		if _, err := r.Client.UpdateStatus(ctx, cur); err != nil {
			return nil, err
		}
	}
	return r.Client.UpdateStatus(ctx, p)
}

func TestStatusWrittenMeanwhile(t *testing.T) {
	e := start(t, podgc.DefaultTerminatedPodThreshold)
	racer := &racingWriter{Client: e.pods}
	gc := e.newGC(racer, podgc.DefaultTerminatedPodThreshold)
	e.pod(t, "raced", "", "Pending", "example.com/hold")
	if err := e.pods.Delete(e.ctx, "default", "raced", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "raced terminating in the cache", func() (bool, string) {
		c, ok := e.podInf.Store().Get("default/raced")
		return ok && c.GetMetadata().GetDeletionTimestamp() != nil, fmt.Sprint(c.GetMetadata())
	})
	if _, err := gc.Reconcile(e.ctx, podgc.Key); err != nil {
		t.Fatalf("pass with a status written meanwhile: %v", err)
	}
	got, _ := e.exists(t, "raced")
	if !racer.raced || got.GetStatus().GetPhase() != "Failed" {
		t.Fatalf("after the pass: raced %v, status %v; want Failed", racer.raced, got.GetStatus())
	}
	if !slices.ContainsFunc(got.GetStatus().GetConditions(), func(c *corev1.PodCondition) bool { return c.GetType() == "example.com/Seen" }) {
		t.Errorf("conditions: got %v, want the one written meanwhile kept", got.GetStatus().GetConditions())
	}
}

func TestTerminatingPodOnOutOfServiceNode(t *testing.T) {
	e := start(t, podgc.DefaultTerminatedPodThreshold)
	oos := &corev1.Taint{Key: podgc.OutOfServiceTaint, Value: "nodeshutdown", Effect: "NoExecute"}
	e.node(t, "down", false, oos)
	e.node(t, "down-untainted", false)
	for _, tc := range []struct{ pod, node string }{{"on-down", "down"}, {"on-down-untainted", "down-untainted"}, {"alive-on-down", "down"}} {
		e.pod(t, tc.pod, tc.node, "Running")
	}
	for _, name := range []string{"on-down", "on-down-untainted"} {
		if err := e.pods.Delete(e.ctx, "default", name, client.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, name+" terminating in the cache", func() (bool, string) {
			c, ok := e.podInf.Store().Get("default/" + name)
			return ok && c.GetMetadata().GetDeletionTimestamp() != nil, fmt.Sprint(c.GetMetadata())
		})
	}
	e.pass(t)
	if _, ok := e.exists(t, "on-down"); ok {
		t.Errorf("terminating pod on an out-of-service NotReady node: still there, want force deleted")
	}
	if p, ok := e.exists(t, "on-down-untainted"); !ok || p.GetMetadata().GetDeletionTimestamp() == nil {
		t.Errorf("terminating pod on a NotReady node without the taint: got %v, want it left terminating", p.GetMetadata())
	}
	if p, ok := e.exists(t, "alive-on-down"); !ok || p.GetMetadata().GetDeletionTimestamp() != nil {
		t.Errorf("pod not being deleted on an out-of-service node: got %v, want it untouched", p.GetMetadata())
	}
}
