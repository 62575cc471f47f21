// This file holds more integration tests of the controllers: Endpoints
// following ready pods, namespace deletion, pods on an unreachable node
// replaced, and a Recreate Deployment's history, pause and events.

package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
	"github.com/kplane/kplane/services/controllers/nodelifecycle"
)

func TestEndpointsFollowReadyPods(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.Controllers = []string{controllers.Endpoints}
	})
	const ns = "svc"
	c.namespace(t, ns)
	svcs := client.Must[*corev1.Service](c.conn)
	eps := client.Must[*corev1.Endpoints](c.conn)
	_, err := svcs.Create(c.ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: &corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"},
		Ports:    []*corev1.ServicePort{{Name: "http", Port: 80, TargetPort: &metav1.IntOrString{Value: &metav1.IntOrString_StrVal{StrVal: "http"}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name, ip string, ready bool) {
		p, err := c.pods.Create(c.ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx", Ports: []*corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		st := "False"
		if ready {
			st = "True"
		}
		for attempt := 0; ; attempt++ {
			p.Status = &corev1.PodStatus{Phase: "Running", PodIp: ip, Conditions: []*corev1.PodCondition{{Type: "Ready", Status: st, LastTransitionTime: timestamppb.Now()}}}
			_, err := c.pods.UpdateStatus(c.ctx, p)
			if err == nil {
				break
			}
			if !apierrors.IsConflict(err) || attempt > 10 {
				t.Fatal(err)
			}
			if p, err = c.pods.Get(c.ctx, ns, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The fake kubelet marks pods Ready; these pods already have a phase so it leaves them alone.
	mk("a", "10.1.0.2", true)
	mk("b", "10.1.0.1", true)
	mk("c", "10.1.0.3", false)
	state := func() (bool, string) {
		ep, err := eps.Get(c.ctx, ns, "web")
		if err != nil {
			return false, err.Error()
		}
		s := ep.GetSubsets()
		if len(s) != 1 {
			return false, fmt.Sprint(s)
		}
		var ready, notReady []string
		for _, a := range s[0].GetAddresses() {
			ready = append(ready, a.GetIp())
		}
		for _, a := range s[0].GetNotReadyAddresses() {
			notReady = append(notReady, a.GetIp())
		}
		got := fmt.Sprint(ready, notReady, s[0].GetPorts()[0].GetPort())
		return got == "[10.1.0.1 10.1.0.2] [10.1.0.3] 8080", got
	}
	testutil.EventuallyWithin(t, waitLimit, "endpoints with 2 ready and 1 not-ready address on port 8080", state)
	if err := c.pods.Delete(c.ctx, ns, "a", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "deleted pod leaves the endpoints", func() (bool, string) {
		ep, err := eps.Get(c.ctx, ns, "web")
		if err != nil {
			return false, err.Error()
		}
		a := ep.GetSubsets()[0].GetAddresses()
		return len(a) == 1 && a[0].GetIp() == "10.1.0.1", fmt.Sprint(a)
	})
	if err := svcs.Delete(c.ctx, ns, "web", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "endpoints deleted with the service", func() (bool, string) {
		_, err := eps.Get(c.ctx, ns, "web")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func TestNamespaceDeletionEmptiesIt(t *testing.T) {
	c := startCluster(t)
	const ns = "doomed"
	c.namespace(t, ns)
	if _, err := c.ds.Create(c.ctx, newDeployment(ns, "web", 2, "nginx:1")); err != nil {
		t.Fatal(err)
	}
	cms := client.Must[*corev1.ConfigMap](c.conn)
	if _, err := cms.Create(c.ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "cfg"}}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "rolled out", func() (bool, string) { return c.rolledOut(t, ns, "web", 2) })
	if err := c.nss.Delete(c.ctx, "", ns, client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Kept, Terminating, until the controller has emptied and finalized it
	// (the pods' graceful deletion takes a while, so it is still there).
	got, err := c.nss.Get(c.ctx, "", ns)
	if err != nil {
		t.Fatalf("namespace gone at once: %v", err)
	}
	if got.GetStatus().GetPhase() != "Terminating" || !slices.Contains(got.GetSpec().GetFinalizers(), "kubernetes") {
		t.Fatalf("deleted namespace: phase %q, spec.finalizers %v; want Terminating, [kubernetes]", got.GetStatus().GetPhase(), got.GetSpec().GetFinalizers())
	}
	testutil.EventuallyWithin(t, waitLimit, "namespace emptied", func() (bool, string) {
		d, _, err1 := c.ds.List(c.ctx, ns, client.ListOptions{})
		r, _, err2 := c.rss.List(c.ctx, ns, client.ListOptions{})
		p, _, err3 := c.pods.List(c.ctx, ns, client.ListOptions{})
		m, _, err4 := cms.List(c.ctx, ns, client.ListOptions{})
		_, err5 := c.nss.Get(c.ctx, "", ns)
		return len(d)+len(r)+len(p)+len(m) == 0 && apierrors.IsNotFound(err5),
			fmt.Sprintf("%d deployments, %d replicasets, %d pods, %d configmaps, namespace: %v (%v %v %v %v)", len(d), len(r), len(p), len(m), err5, err1, err2, err3, err4)
	})
}

func TestUnreachableNodePodsReplaced(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.NodeMonitorGracePeriod = time.Second
		cfg.PodEvictionTimeout = time.Second
	})
	const ns = "nodes"
	c.namespace(t, ns)
	if _, err := c.nss.Create(c.ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: nodelifecycle.LeaseNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	nodes := client.Must[*corev1.Node](c.conn)
	leases := client.Must[*coordv1.Lease](c.conn)
	for _, n := range []string{"n1", "n2"} {
		if _, err := nodes.Create(c.ctx, &corev1.Node{Metadata: &metav1.ObjectMeta{Name: n}, Status: &corev1.NodeStatus{}}); err != nil {
			t.Fatal(err)
		}
		if _, err := leases.Create(c.ctx, &coordv1.Lease{Metadata: &metav1.ObjectMeta{Namespace: nodelifecycle.LeaseNamespace, Name: n},
			Spec: &coordv1.LeaseSpec{HolderIdentity: proto.String(n), LeaseDurationSeconds: proto.Int32(1), RenewTime: timestamppb.Now()}}); err != nil {
			t.Fatal(err)
		}
	}
	// Node agents stand-ins: renew leases (n1 only while alive); a
	// scheduler stand-in binds pending pods to n1 until it dies, then n2.
	var n1Alive atomic.Bool
	n1Alive.Store(true)
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-c.ctx.Done():
				return
			case <-tick.C:
			}
			for _, n := range []string{"n1", "n2"} {
				if n == "n1" && !n1Alive.Load() {
					continue
				}
				if l, err := leases.Get(c.ctx, nodelifecycle.LeaseNamespace, n); err == nil {
					l.Spec.RenewTime = timestamppb.Now()
					_, _ = leases.Update(c.ctx, l)
				}
			}
			l, _, err := c.pods.List(c.ctx, ns, client.ListOptions{})
			if err != nil {
				continue
			}
			for _, p := range l {
				if p.GetSpec().GetNodeName() == "" && p.GetMetadata().GetDeletionTimestamp() == nil {
					target := "n2"
					if n1Alive.Load() {
						target = "n1"
					}
					_ = c.pods.Bind(c.ctx, ns, p.GetMetadata().GetName(), target)
				}
			}
		}
	}()
	// The API service gives every pod without its own the default 300 s
	// toleration (DefaultTolerationSeconds admission): these pods tolerate
	// the unreachable taint for 1 s, as a Kubernetes test would set it.
	dep := newDeployment(ns, "web", 2, "nginx:1")
	dep.Spec.Template.Spec.Tolerations = []*corev1.Toleration{{Key: nodelifecycle.UnreachableKey, Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(1)}}
	if _, err := c.ds.Create(c.ctx, dep); err != nil {
		t.Fatal(err)
	}
	onNode := func(node string) int {
		n := 0
		for _, p := range c.podsOf(t, ns, "web") {
			if p.GetSpec().GetNodeName() == node {
				n++
			}
		}
		return n
	}
	testutil.EventuallyWithin(t, waitLimit, "2 pods on n1", func() (bool, string) { return onNode("n1") == 2, fmt.Sprint(onNode("n1")) })
	n1Alive.Store(false)
	testutil.EventuallyWithin(t, waitLimit, "n1 tainted unreachable with Ready Unknown", func() (bool, string) {
		n, err := nodes.Get(c.ctx, "", "n1")
		if err != nil {
			return false, err.Error()
		}
		tainted, unknown := false, false
		for _, tt := range n.GetSpec().GetTaints() {
			tainted = tainted || (tt.GetKey() == nodelifecycle.UnreachableKey && tt.GetEffect() == "NoExecute")
		}
		for _, cond := range n.GetStatus().GetConditions() {
			unknown = unknown || (cond.GetType() == "Ready" && cond.GetStatus() == "Unknown")
		}
		return tainted && unknown, fmt.Sprint(n.GetSpec().GetTaints(), n.GetStatus().GetConditions())
	})
	testutil.EventuallyWithin(t, waitLimit, "pods replaced on n2", func() (bool, string) {
		return onNode("n2") == 2 && onNode("n1") == 0, fmt.Sprintf("n1 %d, n2 %d", onNode("n1"), onNode("n2"))
	})
	n1Alive.Store(true)
	testutil.EventuallyWithin(t, waitLimit, "taint removed when the lease resumes", func() (bool, string) {
		n, err := nodes.Get(c.ctx, "", "n1")
		if err != nil {
			return false, err.Error()
		}
		return len(n.GetSpec().GetTaints()) == 0, fmt.Sprint(n.GetSpec().GetTaints())
	})
}

func TestDeploymentRecreateHistoryPausedEvents(t *testing.T) {
	c := startCluster(t)
	const ns = "strat"
	c.namespace(t, ns)
	setImage := func(t *testing.T, name, image string, mutate ...func(*appsv1.Deployment)) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			cur, err := c.ds.Get(c.ctx, ns, name)
			if err != nil {
				t.Fatal(err)
			}
			cur.Spec.Template.Spec.Containers[0].Image = image
			for _, f := range mutate {
				f(cur)
			}
			if _, err = c.ds.Update(c.ctx, cur); err == nil {
				return
			}
			if !apierrors.IsConflict(err) || attempt > 10 {
				t.Fatal(err)
			}
		}
	}

	t.Run("Recreate never runs old and new pods together", func(t *testing.T) {
		d := newDeployment(ns, "re", 3, "nginx:1")
		d.Spec.Strategy = &appsv1.DeploymentStrategy{Type: "Recreate"}
		if _, err := c.ds.Create(c.ctx, d); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWithin(t, waitLimit, "rolled out", func() (bool, string) { return c.rolledOut(t, ns, "re", 3) })
		wctx, wcancel := context.WithTimeout(c.ctx, waitLimit)
		defer wcancel()
		w, err := c.pods.Watch(wctx, ns, client.ListOptions{LabelSelector: "app=re"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		setImage(t, "re", "nginx:2")
		live := map[string]string{} // pod → image
		mixed := false
		finished := false
		for !finished {
			ev, err := w.Next()
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			k := client.Key(ev.Object)
			if ev.Type == client.Deleted {
				delete(live, k)
			} else {
				live[k] = ev.Object.GetSpec().GetContainers()[0].GetImage()
			}
			imgs := map[string]int{}
			for _, img := range live {
				imgs[img]++
			}
			if imgs["nginx:1"] > 0 && imgs["nginx:2"] > 0 {
				mixed = true
			}
			finished = imgs["nginx:2"] == 3 && imgs["nginx:1"] == 0
		}
		if mixed {
			t.Errorf("old and new pods existed at the same time under Recreate")
		}
		testutil.EventuallyWithin(t, waitLimit, "rolled out", func() (bool, string) { return c.rolledOut(t, ns, "re", 3) })
	})

	t.Run("revisionHistoryLimit keeps that many old replicasets", func(t *testing.T) {
		d := newDeployment(ns, "hist", 1, "nginx:0")
		d.Spec.RevisionHistoryLimit = proto.Int32(1)
		if _, err := c.ds.Create(c.ctx, d); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			testutil.EventuallyWithin(t, waitLimit, "rolled out", func() (bool, string) { return c.rolledOut(t, ns, "hist", 1) })
			setImage(t, "hist", fmt.Sprintf("nginx:%d", i))
		}
		testutil.EventuallyWithin(t, waitLimit, "two replicasets: current and one old", func() (bool, string) {
			ok, st := c.rolledOut(t, ns, "hist", 1)
			l, _, _ := c.rss.List(c.ctx, ns, client.ListOptions{LabelSelector: "app=hist"})
			return ok && len(l) == 2, fmt.Sprintf("%d replicasets; %s", len(l), st)
		})
		got, _ := c.ds.Get(c.ctx, ns, "hist")
		if rev := got.GetMetadata().GetAnnotations()["deployment.kubernetes.io/revision"]; rev != "4" {
			t.Errorf("got revision %q, want 4", rev)
		}
	})

	t.Run("paused deployment does not roll out until resumed", func(t *testing.T) {
		if _, err := c.ds.Create(c.ctx, newDeployment(ns, "pz", 2, "nginx:1")); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWithin(t, waitLimit, "rolled out", func() (bool, string) { return c.rolledOut(t, ns, "pz", 2) })
		setImage(t, "pz", "nginx:2", func(d *appsv1.Deployment) { d.Spec.Paused = true })
		testutil.EventuallyWithin(t, waitLimit, "Progressing Unknown DeploymentPaused", func() (bool, string) {
			d, _ := c.ds.Get(c.ctx, ns, "pz")
			for _, cond := range d.GetStatus().GetConditions() {
				if cond.GetType() == "Progressing" {
					return cond.GetReason() == "DeploymentPaused", cond.GetReason()
				}
			}
			return false, "no condition"
		})
		l, _, _ := c.rss.List(c.ctx, ns, client.ListOptions{LabelSelector: "app=pz"})
		if len(l) != 1 {
			t.Errorf("got %d replicasets while paused, want 1", len(l))
		}
		setImage(t, "pz", "nginx:2", func(d *appsv1.Deployment) { d.Spec.Paused = false })
		testutil.EventuallyWithin(t, waitLimit, "rolled out after resume", func() (bool, string) {
			ok, st := c.rolledOut(t, ns, "pz", 2)
			for _, p := range c.podsOf(t, ns, "pz") {
				ok = ok && p.GetSpec().GetContainers()[0].GetImage() == "nginx:2"
			}
			return ok, st
		})
	})

	t.Run("events ScalingReplicaSet and SuccessfulCreate are recorded", func(t *testing.T) {
		evs := client.Must[*corev1.Event](c.conn)
		testutil.EventuallyWithin(t, waitLimit, "events", func() (bool, string) {
			l, _, err := evs.List(c.ctx, ns, client.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			seen := map[string]bool{}
			for _, e := range l {
				seen[e.GetReason()] = true
			}
			return seen["ScalingReplicaSet"] && seen["SuccessfulCreate"] && seen["SuccessfulDelete"], fmt.Sprint(seen)
		})
	})
}
