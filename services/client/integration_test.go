// This file holds the client's tests against a real API service: the typed
// client, an informer and leader election, and an informer that is cut off
// and must re-list.

package client_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

// TestAgainstAPIServer runs the typed client, an informer and leader
// election against a real API service on a real store.
func TestAgainstAPIServer(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	conn := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	t.Run("typed client", func(t *testing.T) {
		cms := client.Must[*corev1.ConfigMap](conn)
		created, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "c1"}, Data: map[string]string{"a": "1"}})
		if err != nil {
			t.Fatal(err)
		}
		fresh := proto.Clone(created).(*corev1.ConfigMap)
		fresh.Data["a"] = "2"
		if _, err := cms.Update(ctx, fresh); err != nil {
			t.Fatal(err)
		}
		if _, err := cms.Update(ctx, created); !apierrors.IsConflict(err) {
			t.Errorf("stale update: got %v, want Conflict", err)
		}
		if _, err := cms.Get(ctx, "default", "nope"); !apierrors.IsNotFound(err) {
			t.Errorf("get missing: got %v, want NotFound", err)
		}
		nodes := client.Must[*corev1.Node](conn)
		if nodes.Namespaced() {
			t.Error("nodes reported as namespaced")
		}
		if _, err := nodes.Create(ctx, &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "n9"}}); err != nil {
			t.Fatal(err)
		}
		if err := cms.Delete(ctx, "default", "c1", client.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("subresources: binding, status, scale", func(t *testing.T) {
		pods := client.Must[*corev1.Pod](conn)
		if _, err := pods.Create(ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "p1"},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1.27"}}}}); err != nil {
			t.Fatal(err)
		}
		if err := pods.Bind(ctx, "default", "p1", "n9"); err != nil {
			t.Fatal(err)
		}
		if err := pods.Bind(ctx, "default", "p1", "n9"); !apierrors.IsConflict(err) {
			t.Errorf("second bind: got %v, want Conflict", err)
		}
		p, err := pods.Get(ctx, "default", "p1")
		if err != nil || p.GetSpec().GetNodeName() != "n9" {
			t.Fatalf("after bind: got nodeName %q, %v; want n9", p.GetSpec().GetNodeName(), err)
		}
		p.Status = &corev1.PodStatus{Phase: "Running"}
		if st, err := pods.UpdateStatus(ctx, p); err != nil || st.GetStatus().GetPhase() != "Running" {
			t.Errorf("status update: got %v, %v", st.GetStatus(), err)
		}
		if _, err := client.Must[*corev1.ConfigMap](conn).GetScale(ctx, "default", "x"); apierrors.ReasonOf(err) != apierrors.ReasonMethodNotAllowed {
			t.Errorf("configmaps/scale: got %v, want MethodNotAllowed", err)
		}
		deps := client.Must[*appsv1.Deployment](conn)
		labels := map[string]string{"app": "web"}
		if _, err := deps.Create(ctx, &appsv1.Deployment{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: &appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: labels},
					Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1.27"}}}}}}); err != nil {
			t.Fatal(err)
		}
		sc, err := deps.GetScale(ctx, "default", "web")
		if err != nil {
			t.Fatal(err)
		}
		sc.Spec.Replicas = 3
		if _, err := deps.UpdateScale(ctx, "default", "web", sc); err != nil {
			t.Fatal(err)
		}
		d, err := deps.Get(ctx, "default", "web")
		if err != nil || d.GetSpec().GetReplicas() != 3 {
			t.Errorf("after scale: got replicas %d, %v; want 3", d.GetSpec().GetReplicas(), err)
		}
	})

	t.Run("event recorder aggregates repeats", func(t *testing.T) {
		events := client.Must[*corev1.Event](conn)
		rec := client.NewRecorder(client.RecorderConfig{Sink: events, Component: "test-controller", Host: "h1"})
		rctx, rcancel := context.WithCancel(ctx)
		rdone := make(chan struct{})
		go func() { defer close(rdone); rec.Run(rctx) }()
		defer func() { rcancel(); <-rdone }()
		pod := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "evpod", Uid: "u-1"}}
		for range 3 {
			rec.Eventf(pod, client.EventWarning, "BackOff", "Back-off restarting failed container %s", "c")
		}
		rec.Eventf(pod, client.EventNormal, "Pulled", "Container image %q already present", "nginx:1.27")
		var got []*corev1.Event
		testutil.Eventually(t, "two events, one counted three times", func() bool {
			items, _, err := events.List(ctx, "default", client.ListOptions{FieldSelector: "involvedObject.name=evpod"})
			if err != nil || len(items) != 2 {
				return false
			}
			got = items
			for _, e := range items {
				if e.GetReason() == "BackOff" && e.GetCount() == 3 {
					return true
				}
			}
			return false
		})
		for _, e := range got {
			io := e.GetInvolvedObject()
			if io.GetKind() != "Pod" || io.GetApiVersion() != "v1" || io.GetUid() != "u-1" || e.GetSource().GetComponent() != "test-controller" {
				t.Errorf("event %s: involvedObject %v source %v", e.GetMetadata().GetName(), io, e.GetSource())
			}
		}
	})

	t.Run("informer", func(t *testing.T) {
		cms := client.Must[*corev1.ConfigMap](conn)
		for i := range 5 {
			if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("pre-%d", i), Labels: map[string]string{"app": "x"}}}); err != nil {
				t.Fatal(err)
			}
		}
		inf := client.NewInformer(client.ListWatch(cms, "default", "app=x", "", 2), client.InformerOptions[*corev1.ConfigMap]{})
		var mu sync.Mutex
		var adds, updates, deletes []string
		inf.AddEventHandler(client.Handler[*corev1.ConfigMap]{
			OnAdd:    func(o *corev1.ConfigMap) { mu.Lock(); adds = append(adds, client.Name(o)); mu.Unlock() },
			OnUpdate: func(_, o *corev1.ConfigMap) { mu.Lock(); updates = append(updates, client.Name(o)); mu.Unlock() },
			OnDelete: func(o *corev1.ConfigMap) { mu.Lock(); deletes = append(deletes, client.Name(o)); mu.Unlock() },
		})
		ictx, icancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- inf.Run(ictx) }()
		defer func() {
			icancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("informer Run: %v", err)
			}
		}()
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		if !client.WaitForCacheSync(sctx, inf) {
			t.Fatal("informer did not sync")
		}
		if n := inf.Store().Len(); n != 5 {
			t.Fatalf("after sync: got %d objects, want 5 (paged list of the app=x ones)", n)
		}
		// Changes after the list arrive through the watch.
		if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "new", Labels: map[string]string{"app": "x"}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "unlabelled"}}); err != nil {
			t.Fatal(err)
		}
		cur, err := cms.Get(ctx, "default", "pre-0")
		if err != nil {
			t.Fatal(err)
		}
		cur.Data = map[string]string{"changed": "yes"}
		if _, err := cms.Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
		if err := cms.Delete(ctx, "default", "pre-1", client.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the informer to see every change", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(adds) == 6 && len(updates) == 1 && len(deletes) == 1
		})
		mu.Lock()
		sort.Strings(adds)
		gotAdds, gotUpd, gotDel := fmt.Sprint(adds), fmt.Sprint(updates), fmt.Sprint(deletes)
		mu.Unlock()
		if gotAdds != "[new pre-0 pre-1 pre-2 pre-3 pre-4]" || gotUpd != "[pre-0]" || gotDel != "[pre-1]" {
			t.Errorf("got adds %s updates %s deletes %s", gotAdds, gotUpd, gotDel)
		}
		if o, ok := inf.Store().GetByName("default", "pre-0"); !ok || o.GetData()["changed"] != "yes" {
			t.Errorf("cache has pre-0 = %v, want the updated object", o)
		}
		if _, ok := inf.Store().GetByName("default", "unlabelled"); ok {
			t.Error("the label selector let an unlabelled object into the cache")
		}
	})

	t.Run("leader election", func(t *testing.T) {
		type term struct {
			who        string
			start, end time.Time
		}
		var mu sync.Mutex
		var terms []term
		type cand struct {
			le     *client.LeaderElector
			cancel context.CancelFunc
			done   chan struct{}
		}
		var cands []*cand
		for _, id := range []string{"a", "b"} {
			le, err := client.NewLeaderElector(client.LeaderElectionConfig{
				Leases: client.Must[*coordv1.Lease](conn), Namespace: "kube-system", Name: "e2e-lock", Identity: id,
				LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
				Callbacks: client.LeaderCallbacks{OnStartedLeading: func(ctx context.Context) {
					start := time.Now()
					<-ctx.Done()
					mu.Lock()
					terms = append(terms, term{who: id, start: start, end: time.Now()})
					mu.Unlock()
				}},
			})
			if err != nil {
				t.Fatal(err)
			}
			cctx, ccancel := context.WithCancel(ctx)
			c := &cand{le: le, cancel: ccancel, done: make(chan struct{})}
			go func() { defer close(c.done); le.Run(cctx) }()
			cands = append(cands, c)
		}
		stopAll := func() {
			for _, c := range cands {
				c.cancel()
				<-c.done
			}
		}
		defer stopAll()
		var leader, other *cand
		testutil.Eventually(t, "a leader", func() bool {
			for i, c := range cands {
				if c.le.IsLeader() {
					leader, other = c, cands[1-i]
					return true
				}
			}
			return false
		})
		// Kill the leader (no release): the other takes over once the lease lapses.
		leader.cancel()
		<-leader.done
		testutil.Eventually(t, "the other candidate to take over", other.le.IsLeader)
		stopAll()
		mu.Lock()
		defer mu.Unlock()
		if len(terms) != 2 {
			t.Fatalf("got %d terms, want 2: %+v", len(terms), terms)
		}
		sort.Slice(terms, func(i, j int) bool { return terms[i].start.Before(terms[j].start) })
		if terms[0].end.After(terms[1].start) {
			t.Errorf("terms overlap: %+v", terms)
		}
		lease, err := client.Must[*coordv1.Lease](conn).Get(ctx, "kube-system", "e2e-lock")
		if err != nil {
			t.Fatal(err)
		}
		if got := lease.GetSpec().GetLeaseTransitions(); got != 1 {
			t.Errorf("got leaseTransitions %d, want 1", got)
		}
	})
}

// TestInformerSurvivesBeingCutOff blocks an informer's handler while many
// writes happen, so the API service cuts its watch off (it fell behind) and
// the events it missed leave the small watch window: the informer must
// resume, get 410 Expired, re-list, and end up with exactly the server's state.
func TestInformerSurvivesBeingCutOff(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{Configure: func(c *apiserver.Config) {
		c.WatchWindow, c.WatchBuffer = 20, 5
	}})
	conn := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cms := client.Must[*corev1.ConfigMap](conn)
	inf := client.NewInformer(client.ListWatch(cms, "default", "", "", 0), client.InformerOptions[*corev1.ConfigMap]{
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	gate := make(chan struct{})
	var blocking atomic.Bool
	inf.AddEventHandler(client.Handler[*corev1.ConfigMap]{OnAdd: func(*corev1.ConfigMap) {
		if blocking.Load() {
			<-gate
		}
	}})
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if !client.WaitForCacheSync(sctx, inf) {
		t.Fatal("informer did not sync")
	}
	blocking.Store(true)
	payload := strings.Repeat("x", 2048)
	const n = 150
	for i := range n {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm-%03d", i)},
			Data: map[string]string{"payload": payload}}); err != nil {
			t.Fatal(err)
		}
	}
	// Some deletes too, which only a re-list can reveal once they have left
	// the window.
	for i := range 10 {
		if err := cms.Delete(ctx, "default", fmt.Sprintf("cm-%03d", i), client.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	blocking.Store(false)
	close(gate)
	want, _, err := cms.List(ctx, "default", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantRV := map[string]string{}
	for _, o := range want {
		wantRV[client.Key(o)] = client.ResourceVersion(o)
	}
	testutil.Eventually(t, "the informer's cache to equal the server's state", func() bool {
		got := inf.Store().List()
		if len(got) != len(wantRV) {
			return false
		}
		for _, o := range got {
			if wantRV[client.Key(o)] != client.ResourceVersion(o) {
				return false
			}
		}
		return true
	})
	// 160 events of ~2 KiB cannot all sit in gRPC's flow-control window and
	// a 5-event buffer, and the window keeps 20: the watch was cut off and
	// its resume point expired, so the informer must have re-listed.
	if inf.Relists() < 1 {
		t.Errorf("got %d re-lists, want at least 1 (the resume point fell out of the window)", inf.Relists())
	}
	t.Logf("cache converged on %d objects after %d re-list(s)", len(wantRV), inf.Relists())
}
