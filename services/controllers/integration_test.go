// This file holds the controllers' integration tests against a real API
// service, with a stand-in kubelet that makes pods ready: a Deployment's
// lifecycle, delete propagation, a leader crash mid-rollout, and
// proportional scaling during a rollout.

package controllers_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
	"github.com/kplane/kplane/services/controllers/deployment"
)

const waitLimit = 60 * time.Second

func testLogger() *slog.Logger {
	if os.Getenv("KPLANE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// fakeKubelet marks every pod it sees Running and Ready through pods/status,
// standing in for node agents, until ctx ends.
func fakeKubelet(ctx context.Context, t *testing.T, conn grpc.ClientConnInterface) {
	slowKubelet(ctx, t, conn, 0)
}

// slowKubelet is fakeKubelet with each pod made Ready readyAfter after its
// creation, as a container that takes that long to start. Pods whose first
// image contains "unresolvable" never become Ready (as with ErrImagePull).
func slowKubelet(ctx context.Context, t *testing.T, conn grpc.ClientConnInterface, readyAfter time.Duration) {
	pods := client.Must[*corev1.Pod](conn)
	inf := client.NewInformer(client.ListWatch(pods, "", "", "", 500), client.InformerOptions[*corev1.Pod]{})
	q := client.NewQueue("kubelet", 0, 0)
	inf.AddEventHandler(client.EnqueueHandler[*corev1.Pod](q))
	go func() { _ = inf.Run(ctx) }()
	var mu sync.Mutex
	seen := map[string]time.Time{} // pod uid: when first seen
	go client.RunWorkers(ctx, q, 4, func(ctx context.Context, key string) (client.Result, error) {
		p, ok := inf.Store().Get(key)
		if !ok || p.GetMetadata().GetDeletionTimestamp() != nil || p.GetStatus().GetPhase() == "Running" {
			return client.Result{}, nil
		}
		if strings.Contains(p.GetSpec().GetContainers()[0].GetImage(), "unresolvable") {
			return client.Result{}, nil
		}
		// Ready readyAfter after the kubelet first saw the pod: its
		// creationTimestamp has whole seconds (as in Kubernetes), so timing
		// from it made most pods ready at once and a rollout could finish
		// between two looks of a test waiting to see it under way.
		mu.Lock()
		first, ok := seen[p.GetMetadata().GetUid()]
		if !ok {
			first = time.Now()
			seen[p.GetMetadata().GetUid()] = first
		}
		mu.Unlock()
		if wait := time.Until(first.Add(readyAfter)); wait > 0 {
			return client.Result{RequeueAfter: wait}, nil
		}
		u := proto.Clone(p).(*corev1.Pod)
		now := timestamppb.Now()
		u.Status = &corev1.PodStatus{Phase: "Running", PodIp: "10.0.0.1", StartTime: now, Conditions: []*corev1.PodCondition{
			{Type: "PodScheduled", Status: "True", LastTransitionTime: now},
			{Type: "Ready", Status: "True", LastTransitionTime: now},
		}}
		_, err := pods.UpdateStatus(ctx, u)
		if apierrors.IsNotFound(err) {
			return client.Result{}, nil
		}
		return client.Result{}, err
	}, nil)
}

type cluster struct {
	conn  *grpc.ClientConn
	pods  *client.Client[*corev1.Pod]
	rss   *client.Client[*appsv1.ReplicaSet]
	ds    *client.Client[*appsv1.Deployment]
	nss   *client.Client[*corev1.Namespace]
	ctx   context.Context
	stop  context.CancelFunc
	errCh chan error
}

func startCluster(t *testing.T, tweak ...func(*controllers.Config)) *cluster {
	env := apiservertest.Start(t, apiservertest.Options{})
	conn := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	c := &cluster{conn: conn, pods: client.Must[*corev1.Pod](conn), rss: client.Must[*appsv1.ReplicaSet](conn),
		ds: client.Must[*appsv1.Deployment](conn), nss: client.Must[*corev1.Namespace](conn), ctx: ctx, stop: cancel, errCh: make(chan error, 1)}
	cfg := controllers.Config{Conn: conn, Logger: testLogger()}
	for _, f := range tweak {
		f(&cfg)
	}
	m, err := controllers.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() { c.errCh <- m.Run(ctx) }()
	fakeKubelet(ctx, t, conn)
	t.Cleanup(func() {
		cancel()
		<-c.errCh
	})
	return c
}

// gcSentinel creates in ns a pod named name whose owner does not exist and
// waits until the garbage collector has deleted it: a sign that it has
// processed what happened before.
func (c *cluster) gcSentinel(t *testing.T, ns, name string) {
	t.Helper()
	owner := &metav1.OwnerReference{ApiVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-owner", Uid: "no-such-" + name}
	p := &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"gc-sentinel": name},
		OwnerReferences: []*metav1.OwnerReference{owner}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "sentinel"}}}}
	if _, err := c.pods.Create(c.ctx, p); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "the collector to delete the sentinel "+name, func() (bool, string) {
		_, err := c.pods.Get(c.ctx, ns, name)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func (c *cluster) namespace(t *testing.T, name string) {
	t.Helper()
	if _, err := c.nss.Create(c.ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

func newDeployment(ns, name string, replicas int32, image string) *appsv1.Deployment {
	lbl := map[string]string{"app": name}
	return &appsv1.Deployment{
		Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: &appsv1.DeploymentSpec{
			Replicas: proto.Int32(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: &corev1.PodTemplateSpec{
				Metadata: &metav1.ObjectMeta{Labels: lbl},
				Spec:     &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: image}}},
			},
			Strategy: &appsv1.DeploymentStrategy{Type: "RollingUpdate", RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge:       &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 1}},
				MaxUnavailable: &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 1}},
			}},
		},
	}
}

// podsOf lists the live pods with label app=name.
func (c *cluster) podsOf(t *testing.T, ns, app string) []*corev1.Pod {
	t.Helper()
	l, _, err := c.pods.List(c.ctx, ns, client.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Errorf("list pods: %v", err) // not Fatal: also called off the test goroutine
		return nil
	}
	var out []*corev1.Pod
	for _, p := range l {
		if p.GetMetadata().GetDeletionTimestamp() == nil {
			out = append(out, p)
		}
	}
	return out
}

// rolledOut reports whether d has converged as `kubectl rollout status` sees it.
func (c *cluster) rolledOut(t *testing.T, ns, name string, replicas int32) (bool, string) {
	d, err := c.ds.Get(c.ctx, ns, name)
	if err != nil {
		return false, err.Error()
	}
	st := d.GetStatus()
	state := fmt.Sprintf("gen %d observed %d status %v", d.GetMetadata().GetGeneration(), st.GetObservedGeneration(), st)
	if st.GetObservedGeneration() < d.GetMetadata().GetGeneration() {
		return false, state
	}
	ok := st.GetReplicas() == replicas && st.GetUpdatedReplicas() == replicas && st.GetAvailableReplicas() == replicas && st.GetReadyReplicas() == replicas
	ok = ok && len(c.podsOf(t, ns, name)) == int(replicas)
	for _, cond := range st.GetConditions() {
		if cond.GetType() == "Progressing" && cond.GetReason() != "NewReplicaSetAvailable" {
			ok = false
		}
	}
	return ok, state
}

func TestDeploymentLifecycle(t *testing.T) {
	c := startCluster(t)
	const ns = "apps"
	c.namespace(t, ns)
	d, err := c.ds.Create(c.ctx, newDeployment(ns, "web", 3, "nginx:1"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ownerReference chain Deployment to ReplicaSet to Pod", func(t *testing.T) {
		testutil.EventuallyWithin(t, waitLimit, "3 replicas rolled out", func() (bool, string) { return c.rolledOut(t, ns, "web", 3) })
		rsl, _, err := c.rss.List(c.ctx, ns, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rsl) != 1 {
			t.Fatalf("got %d replicasets, want 1", len(rsl))
		}
		rs := rsl[0]
		hash := rs.GetMetadata().GetLabels()[deployment.HashLabel]
		if want := "web-" + hash; hash == "" || rs.GetMetadata().GetName() != want {
			t.Errorf("got replicaset %q (hash label %q), want web-<hash>", rs.GetMetadata().GetName(), hash)
		}
		ref := rs.GetMetadata().GetOwnerReferences()
		if len(ref) != 1 || ref[0].GetUid() != d.GetMetadata().GetUid() || !ref[0].GetController() || !ref[0].GetBlockOwnerDeletion() || ref[0].GetKind() != "Deployment" {
			t.Errorf("got replicaset owners %v, want the deployment as controller", ref)
		}
		for _, p := range c.podsOf(t, ns, "web") {
			ref := p.GetMetadata().GetOwnerReferences()
			if len(ref) != 1 || ref[0].GetUid() != rs.GetMetadata().GetUid() || !ref[0].GetController() || ref[0].GetKind() != "ReplicaSet" {
				t.Errorf("pod %s: got owners %v, want the replicaset as controller", p.GetMetadata().GetName(), ref)
			}
			if p.GetMetadata().GetLabels()[deployment.HashLabel] != hash {
				t.Errorf("pod %s: got hash label %q, want %q", p.GetMetadata().GetName(), p.GetMetadata().GetLabels()[deployment.HashLabel], hash)
			}
		}
		got, _ := c.ds.Get(c.ctx, ns, "web")
		if rev := got.GetMetadata().GetAnnotations()[deployment.RevisionAnnotation]; rev != "1" {
			t.Errorf("got revision %q, want 1", rev)
		}
	})

	scale := func(t *testing.T, n int32) {
		t.Helper()
		s, err := c.ds.GetScale(c.ctx, ns, "web")
		if err != nil {
			t.Fatal(err)
		}
		s.Spec = &autoscalingv1.ScaleSpec{Replicas: n}
		if _, err := c.ds.UpdateScale(c.ctx, ns, "web", s); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWithin(t, waitLimit, fmt.Sprintf("%d replicas", n), func() (bool, string) { return c.rolledOut(t, ns, "web", n) })
	}
	t.Run("scale to 10 and back to 2 through the scale subresource", func(t *testing.T) {
		scale(t, 10)
		scale(t, 2)
		rsl, _, _ := c.rss.List(c.ctx, ns, client.ListOptions{})
		if len(rsl) != 1 {
			t.Errorf("got %d replicasets after scaling, want 1", len(rsl))
		}
	})

	t.Run("image change never has more than maxUnavailable pods unavailable", func(t *testing.T) {
		const replicas, maxUnavailable = 4, 1
		scale(t, replicas)
		w, err := c.pods.Watch(c.ctx, ns, client.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		// Initial state arrives as ADDED events; count from there.
		ready := map[string]bool{}
		cur, err := c.ds.Get(c.ctx, ns, "web")
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Template.Spec.Containers[0].Image = "nginx:2"
		if _, err := c.ds.Update(c.ctx, cur); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			// Not eventually: FailNow must not be called off the test goroutine.
			defer close(done)
			defer w.Close()
			deadline := time.Now().Add(waitLimit)
			for {
				ok, st := c.rolledOut(t, ns, "web", replicas)
				for _, p := range c.podsOf(t, ns, "web") {
					ok = ok && p.GetSpec().GetContainers()[0].GetImage() == "nginx:2"
				}
				if ok {
					return
				}
				if time.Now().After(deadline) {
					t.Errorf("timed out waiting for the rollout to nginx:2; last state: %s", st)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		minReady, events := replicas, 0
		for {
			ev, err := w.Next()
			if err != nil {
				break
			}
			events++
			k := client.Key(ev.Object)
			r := false
			for _, cond := range ev.Object.GetStatus().GetConditions() {
				r = r || (cond.GetType() == "Ready" && cond.GetStatus() == "True")
			}
			if ev.Type == client.Deleted || ev.Object.GetMetadata().GetDeletionTimestamp() != nil {
				r = false
			}
			if r {
				ready[k] = true
			} else {
				delete(ready, k)
			}
			// Past the initial ADDED burst, every instant must keep
			// replicas-maxUnavailable ready pods.
			if events > replicas && len(ready) < minReady {
				minReady = len(ready)
			}
		}
		<-done
		if minReady < replicas-maxUnavailable {
			t.Errorf("got as few as %d ready pods during the rollout, want at least %d", minReady, replicas-maxUnavailable)
		}
		if events <= replicas {
			t.Errorf("got %d pod events, want the rollout's", events)
		}
		got, _ := c.ds.Get(c.ctx, ns, "web")
		if rev := got.GetMetadata().GetAnnotations()[deployment.RevisionAnnotation]; rev != "2" {
			t.Errorf("got revision %q, want 2", rev)
		}
		rsl, _, _ := c.rss.List(c.ctx, ns, client.ListOptions{})
		if len(rsl) != 2 {
			t.Errorf("got %d replicasets, want 2 (the old one kept at 0 for history)", len(rsl))
		}
	})
}

func TestDeletePropagation(t *testing.T) {
	c := startCluster(t)
	const ns = "gc"
	c.namespace(t, ns)
	for _, tc := range []struct {
		name, policy string
	}{
		{name: "background", policy: "Background"},
		{name: "foreground", policy: "Foreground"},
		{name: "orphan", policy: "Orphan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.ds.Create(c.ctx, newDeployment(ns, tc.name, 2, "nginx:1")); err != nil {
				t.Fatal(err)
			}
			testutil.EventuallyWithin(t, waitLimit, "rolled out", func() (bool, string) { return c.rolledOut(t, ns, tc.name, 2) })
			if err := c.ds.Delete(c.ctx, ns, tc.name, client.DeleteOptions{PropagationPolicy: tc.policy}); err != nil {
				t.Fatal(err)
			}
			if tc.policy == "Foreground" {
				// The deployment stays, finalizer set, until its dependents go.
				if d, err := c.ds.Get(c.ctx, ns, tc.name); err == nil && d.GetMetadata().GetDeletionTimestamp() == nil {
					t.Errorf("foreground-deleted deployment has no deletionTimestamp")
				}
			}
			testutil.EventuallyWithin(t, waitLimit, "deployment gone", func() (bool, string) {
				_, err := c.ds.Get(c.ctx, ns, tc.name)
				return apierrors.IsNotFound(err), fmt.Sprint(err)
			})
			rsOf := func() []*appsv1.ReplicaSet {
				l, _, err := c.rss.List(c.ctx, ns, client.ListOptions{LabelSelector: "app=" + tc.name})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			if tc.policy == "Orphan" {
				// The collector has handled the deployment's deletion once
				// it has collected a dependent whose owner is gone, made
				// after that deletion: only then is "nothing collected"
				// an observation.
				c.gcSentinel(t, ns, "after-"+tc.name)
				l := rsOf()
				if len(l) != 1 {
					t.Fatalf("got %d replicasets after orphan delete, want 1", len(l))
				}
				if refs := l[0].GetMetadata().GetOwnerReferences(); len(refs) != 0 {
					t.Errorf("got orphaned replicaset owners %v, want none", refs)
				}
				if n := len(c.podsOf(t, ns, tc.name)); n != 2 {
					t.Errorf("got %d pods after orphan delete, want 2", n)
				}
				return
			}
			if tc.policy == "Foreground" {
				// With foreground deletion the owner goes last.
				if l := rsOf(); len(l) != 0 {
					t.Errorf("got %d replicasets when the foreground-deleted deployment was gone, want 0", len(l))
				}
			}
			testutil.EventuallyWithin(t, waitLimit, "replicasets and pods collected", func() (bool, string) {
				l := rsOf()
				p := c.podsOf(t, ns, tc.name)
				return len(l) == 0 && len(p) == 0, fmt.Sprintf("%d replicasets, %d pods", len(l), len(p))
			})
		})
	}
}

// TestLeaderCrashMidRollout runs two controller managers under one Lease.
// In the middle of a rolling update the leader crashes: its connection to
// the API service is cut before it is stopped, so it neither releases the
// Lease nor writes anything more. The standby must take the Lease once it
// lapses and finish the rollout, with at every observed instant at least
// replicas-maxUnavailable pods ready and at most replicas+maxSurge pods
// alive, and in the end exactly the desired pods and two ReplicaSets.
func TestLeaderCrashMidRollout(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	conn := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &cluster{conn: conn, pods: client.Must[*corev1.Pod](conn), rss: client.Must[*appsv1.ReplicaSet](conn),
		ds: client.Must[*appsv1.Deployment](conn), nss: client.Must[*corev1.Namespace](conn), ctx: ctx}
	slowKubelet(ctx, t, conn, 400*time.Millisecond)
	if _, err := c.nss.Create(ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "kube-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	le := &controllers.LeaderElection{Namespace: "kube-system", Name: "kube-controller-manager", LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
	type replica struct {
		m    *controllers.Manager
		conn *grpc.ClientConn
		stop context.CancelFunc
		done chan struct{}
	}
	start := func(id string) *replica {
		rconn := env.Dial(t, apiservertest.AdminToken) // its own connection, so that it can be cut
		m, err := controllers.New(controllers.Config{Conn: rconn, Identity: id, Logger: testLogger(),
			Controllers: []string{controllers.Deployment, controllers.ReplicaSet, controllers.GarbageCollector}, LeaderElection: le})
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		r := &replica{m: m, conn: rconn, stop: rcancel, done: make(chan struct{})}
		go func() {
			defer close(r.done)
			_ = m.Run(rctx)
		}()
		return r
	}
	a := start("a")
	testutil.EventuallyWithin(t, waitLimit, "a leads", func() (bool, string) { return a.m.IsLeader(), "" })
	b := start("b")
	defer func() {
		b.stop()
		<-b.done
	}()
	const ns, replicas, maxSurge, maxUnavailable = "ha", 6, 1, 1
	c.namespace(t, ns)
	if _, err := c.ds.Create(ctx, newDeployment(ns, "web", replicas, "nginx:1")); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "rolled out by a", func() (bool, string) { return c.rolledOut(t, ns, "web", replicas) })
	if b.m.IsLeader() {
		t.Fatal("both replicas lead")
	}

	// Watch the pods from here on: every instant must keep the bounds.
	w, err := c.pods.Watch(ctx, ns, client.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	// And the ReplicaSets: maxSurge bounds the sum of their spec.replicas,
	// as in Kubernetes. It does not bound the pods alive at every instant:
	// when an old ReplicaSet is scaled down and the new one up, the
	// ReplicaSet controller's delete and create race, so one more pod than
	// replicas+maxSurge can be alive for a moment (in Kubernetes too).
	rw, err := c.rss.Watch(ctx, ns, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu                 sync.Mutex
		minReady, maxAlive = replicas, 0
		maxSpec            int32
		events             int
	)
	rsWatched := make(chan struct{})
	go func() {
		defer close(rsWatched)
		spec := map[string]int32{}
		for {
			ev, err := rw.Next()
			if err != nil {
				return
			}
			if ev.Type == client.Deleted {
				delete(spec, client.Key(ev.Object))
			} else {
				spec[client.Key(ev.Object)] = ev.Object.GetSpec().GetReplicas()
			}
			var sum int32
			for _, n := range spec {
				sum += n
			}
			mu.Lock()
			maxSpec = max(maxSpec, sum)
			mu.Unlock()
		}
	}()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		ready, alive := map[string]bool{}, map[string]bool{}
		for {
			ev, err := w.Next()
			if err != nil {
				return
			}
			k := client.Key(ev.Object)
			r := false
			for _, cond := range ev.Object.GetStatus().GetConditions() {
				r = r || (cond.GetType() == "Ready" && cond.GetStatus() == "True")
			}
			gone := ev.Type == client.Deleted || ev.Object.GetMetadata().GetDeletionTimestamp() != nil
			if gone {
				r = false
				delete(alive, k)
			} else {
				alive[k] = true
			}
			if r {
				ready[k] = true
			} else {
				delete(ready, k)
			}
			mu.Lock()
			events++
			if events > replicas { // past the initial ADDED burst
				minReady = min(minReady, len(ready))
				maxAlive = max(maxAlive, len(alive))
			}
			mu.Unlock()
		}
	}()

	cur, err := c.ds.Get(ctx, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Template.Spec.Containers[0].Image = "nginx:2"
	if _, err := c.ds.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	// Mid-rollout: the new ReplicaSet has pods and the old one still has.
	testutil.EventuallyWithin(t, waitLimit, "the rollout under way", func() (bool, string) {
		l, _, err := c.rss.List(ctx, ns, client.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var newR, oldR int32
		for _, rs := range l {
			if rs.GetSpec().GetTemplate().GetSpec().GetContainers()[0].GetImage() == "nginx:2" {
				newR = rs.GetStatus().GetReadyReplicas()
			} else {
				oldR = rs.GetSpec().GetReplicas()
			}
		}
		return newR >= 1 && oldR >= 2 && oldR < replicas, fmt.Sprintf("new ready %d, old replicas %d", newR, oldR)
	})
	crashed := time.Now()
	a.conn.Close() // a crashes: no more writes, no release of the Lease
	a.stop()
	<-a.done
	testutil.EventuallyWithin(t, waitLimit, "b leads", func() (bool, string) { return b.m.IsLeader(), "" })
	// a renewed at most RetryPeriod before the crash, so the Lease lapses
	// within LeaseDuration of it and b, trying every RetryPeriod, takes it
	// just after; two more seconds allow for a loaded CI machine (at load
	// average 30 it took 2.2 s with a 2 s lease).
	took := time.Since(crashed)
	t.Logf("b took over %v after the crash (lease duration %v)", took.Round(time.Millisecond), le.LeaseDuration)
	if limit := le.LeaseDuration + le.RetryPeriod + 2*time.Second; took > limit {
		t.Errorf("b took over %v after the crash, want within the lease duration (%v, plus %v slack)", took, le.LeaseDuration, limit-le.LeaseDuration)
	}
	testutil.EventuallyWithin(t, waitLimit, "rollout finished by b", func() (bool, string) {
		ok, st := c.rolledOut(t, ns, "web", replicas)
		if !ok {
			return false, st
		}
		for _, p := range c.podsOf(t, ns, "web") {
			if p.GetSpec().GetContainers()[0].GetImage() != "nginx:2" {
				return false, "old pods remain"
			}
		}
		return true, st
	})
	w.Close()
	rw.Close()
	<-watched
	<-rsWatched
	mu.Lock()
	defer mu.Unlock()
	if minReady < replicas-maxUnavailable {
		t.Errorf("got as few as %d ready pods during the rollout, want at least %d (maxUnavailable %d)", minReady, replicas-maxUnavailable, maxUnavailable)
	}
	if maxSpec > replicas+maxSurge {
		t.Errorf("the ReplicaSets' replicas summed to %d during the rollout, want at most %d (maxSurge %d)", maxSpec, replicas+maxSurge, maxSurge)
	}
	if maxAlive > replicas+maxSurge+1 {
		t.Errorf("got as many as %d pods alive during the rollout, want at most %d (maxSurge %d, plus one in a delete/create race)", maxAlive, replicas+maxSurge+1, maxSurge)
	}
	t.Logf("at most %d pods alive, ReplicaSets' replicas summing to at most %d", maxAlive, maxSpec)
	if n := len(c.podsOf(t, ns, "web")); n != replicas {
		t.Errorf("got %d pods after the rollout, want %d", n, replicas)
	}
	rsl, _, err := c.rss.List(ctx, ns, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []string
	for _, rs := range rsl {
		sizes = append(sizes, fmt.Sprintf("%s=%d", rs.GetSpec().GetTemplate().GetSpec().GetContainers()[0].GetImage(), rs.GetSpec().GetReplicas()))
	}
	slices.Sort(sizes)
	if want := []string{"nginx:1=0", fmt.Sprintf("nginx:2=%d", replicas)}; !slices.Equal(sizes, want) {
		t.Errorf("got replicasets %v, want %v", sizes, want)
	}
}

// TestProportionalScalingDuringRollout is Kubernetes' documented example: a
// 10-replica Deployment (maxSurge 3, maxUnavailable 2) rolled to an image
// that never starts stops at 8 old + 5 new pods; scaled to 15 it adds 3
// to the old ReplicaSet and 2 to the new one, and scaled back to 10 it
// returns to 8 + 5.
func TestProportionalScalingDuringRollout(t *testing.T) {
	c := startCluster(t)
	const ns = "prop"
	c.namespace(t, ns)
	d := newDeployment(ns, "web", 10, "nginx:1")
	d.Spec.Strategy.RollingUpdate.MaxSurge = &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 3}}
	d.Spec.Strategy.RollingUpdate.MaxUnavailable = &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 2}}
	if _, err := c.ds.Create(c.ctx, d); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "10 replicas", func() (bool, string) { return c.rolledOut(t, ns, "web", 10) })
	cur, err := c.ds.Get(c.ctx, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Template.Spec.Containers[0].Image = "nginx:unresolvable"
	if _, err := c.ds.Update(c.ctx, cur); err != nil {
		t.Fatal(err)
	}
	sizes := func(want string) {
		t.Helper()
		testutil.EventuallyWithin(t, waitLimit, "replicasets "+want, func() (bool, string) {
			l, _, err := c.rss.List(c.ctx, ns, client.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, rs := range l {
				got = append(got, fmt.Sprintf("%s=%d/%d", rs.GetSpec().GetTemplate().GetSpec().GetContainers()[0].GetImage(),
					rs.GetSpec().GetReplicas(), rs.GetStatus().GetReplicas()))
			}
			slices.Sort(got)
			return strings.Join(got, " ") == want, strings.Join(got, " ")
		})
	}
	sizes("nginx:1=8/8 nginx:unresolvable=5/5")
	scale := func(n int32) {
		t.Helper()
		// The controller writes the Deployment too: retry on Conflict.
		for attempt := 0; ; attempt++ {
			s, err := c.ds.GetScale(c.ctx, ns, "web")
			if err != nil {
				t.Fatal(err)
			}
			s.Spec = &autoscalingv1.ScaleSpec{Replicas: n}
			_, err = c.ds.UpdateScale(c.ctx, ns, "web", s)
			if err == nil {
				return
			}
			if !apierrors.IsConflict(err) || attempt == 20 {
				t.Fatal(err)
			}
		}
	}
	scale(15)
	sizes("nginx:1=11/11 nginx:unresolvable=7/7")
	scale(10)
	sizes("nginx:1=8/8 nginx:unresolvable=5/5")
	if n := len(c.podsOf(t, ns, "web")); n != 13 {
		t.Errorf("got %d live pods, want 13 (8 old + 5 new)", n)
	}
}
