// This file holds the DaemonSet controller's tests against a real API
// service, the real scheduler (daemon pods are placed through it by their
// node affinity) and node-agent stand-ins that run the pods bound to their
// nodes and finish the deletion of pods being deleted.
package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
	"github.com/kplane/kplane/services/controllers/daemonset"
	"github.com/kplane/kplane/services/scheduler"
	"github.com/kplane/kplane/services/scheduler/queue"
)

type dsCluster struct {
	ctx   context.Context
	conn  grpc.ClientConnInterface
	pods  *client.Client[*corev1.Pod]
	nodes *client.Client[*corev1.Node]
	dss   *client.Client[*appsv1.DaemonSet]
	crs   *client.Client[*appsv1.ControllerRevision]
}

// startDSCluster runs the API service, the daemonset and garbage
// collector controllers, the scheduler and bound-pod node agent stand-ins
// (ready after readyAfter) until the test ends.
func startDSCluster(t *testing.T, readyAfter time.Duration) *dsCluster {
	env := apiservertest.Start(t, apiservertest.Options{})
	conn := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	m, err := controllers.New(controllers.Config{Conn: conn, Logger: testLogger(),
		Controllers: []string{controllers.DaemonSet, controllers.GarbageCollector}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(scheduler.Config{Conn: env.Dial(t, apiservertest.SchedulerToken),
		Queue: queue.Config{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { _ = m.Run(ctx); done <- struct{}{} }()
	go func() { _ = s.Run(ctx); done <- struct{}{} }()
	boundKubelet(ctx, conn, readyAfter)
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
	})
	c := &dsCluster{ctx: ctx, conn: conn, pods: client.Must[*corev1.Pod](conn), nodes: client.Must[*corev1.Node](conn),
		dss: client.Must[*appsv1.DaemonSet](conn), crs: client.Must[*appsv1.ControllerRevision](conn)}
	if _, err := client.Must[*corev1.Namespace](conn).Create(ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "ds"}}); err != nil {
		t.Fatal(err)
	}
	return c
}

// boundKubelet stands in for node agents: a pod bound to a node becomes
// Running and Ready readyAfter after it was first seen bound; a bound pod
// being deleted is removed (its containers stopped at once).
func boundKubelet(ctx context.Context, conn grpc.ClientConnInterface, readyAfter time.Duration) {
	pods := client.Must[*corev1.Pod](conn)
	inf := client.NewInformer(client.ListWatch(pods, "", "", "", 500), client.InformerOptions[*corev1.Pod]{})
	q := client.NewQueue("kubelet", 0, 0)
	inf.AddEventHandler(client.EnqueueHandler[*corev1.Pod](q))
	go func() { _ = inf.Run(ctx) }()
	seen := map[string]time.Time{}
	go client.RunWorkers(ctx, q, 1, func(ctx context.Context, key string) (client.Result, error) {
		p, ok := inf.Store().Get(key)
		if !ok || p.GetSpec().GetNodeName() == "" {
			return client.Result{}, nil
		}
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			err := pods.Delete(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(),
				client.DeleteOptions{GracePeriodSeconds: proto.Int64(0), UID: p.GetMetadata().GetUid()})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				return client.Result{}, nil
			}
			return client.Result{}, err
		}
		if ph := p.GetStatus().GetPhase(); ph == "Running" || ph == "Failed" || ph == "Succeeded" {
			return client.Result{}, nil
		}
		first, ok := seen[p.GetMetadata().GetUid()]
		if !ok {
			first = time.Now()
			seen[p.GetMetadata().GetUid()] = first
		}
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
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return client.Result{}, nil
		}
		return client.Result{}, err
	}, nil)
}

func (c *dsCluster) addNode(t *testing.T, name string, labels map[string]string, taints ...*corev1.Taint) {
	t.Helper()
	n, err := c.nodes.Create(c.ctx, &corev1.Node{Metadata: &metav1.ObjectMeta{Name: name, Labels: labels}, Spec: &corev1.NodeSpec{Taints: taints}})
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"}
	n.Status = &corev1.NodeStatus{Capacity: res, Allocatable: res, Conditions: []*corev1.NodeCondition{{Type: "Ready", Status: "True"}}}
	if _, err := c.nodes.UpdateStatus(c.ctx, n); err != nil {
		t.Fatal(err)
	}
}

func (c *dsCluster) editNode(t *testing.T, name string, f func(*corev1.Node)) {
	t.Helper()
	for range 10 {
		n, err := c.nodes.Get(c.ctx, "", name)
		if err != nil {
			t.Fatal(err)
		}
		f(n)
		if _, err = c.nodes.Update(c.ctx, n); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatalf("node %s: conflicts", name)
}

func newDaemonSet(name, image string) *appsv1.DaemonSet {
	lbl := map[string]string{"app": name}
	return &appsv1.DaemonSet{Metadata: &metav1.ObjectMeta{Namespace: "ds", Name: name}, Spec: &appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: lbl},
		Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: lbl},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: image}}}}}}
}

// placement is "node=image" for each live pod of the DaemonSet, sorted,
// with "?" for a pod not yet bound.
func (c *dsCluster) placement(t *testing.T, name string) string {
	t.Helper()
	l, _, err := c.pods.List(c.ctx, "ds", client.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l {
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		n := p.GetSpec().GetNodeName()
		if n == "" {
			n = "?"
		}
		out = append(out, n+"="+p.GetSpec().GetContainers()[0].GetImage())
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// rolledOut is `kubectl rollout status`'s verdict on the DaemonSet.
func (c *dsCluster) rolledOut(name string) (bool, string) {
	ds, err := c.dss.Get(c.ctx, "ds", name)
	if err != nil {
		return false, err.Error()
	}
	st := ds.GetStatus()
	state := fmt.Sprintf("generation %d, status %v", ds.GetMetadata().GetGeneration(), st)
	return st.GetObservedGeneration() >= ds.GetMetadata().GetGeneration() &&
		st.GetUpdatedNumberScheduled() >= st.GetDesiredNumberScheduled() && st.GetNumberAvailable() >= st.GetDesiredNumberScheduled(), state
}

func (c *dsCluster) waitPlacement(t *testing.T, name, want string) {
	t.Helper()
	testutil.EventuallyWithin(t, waitLimit, "placement "+want, func() (bool, string) {
		got := c.placement(t, name)
		return got == want, got
	})
}

func (c *dsCluster) setImage(t *testing.T, name, image string) {
	t.Helper()
	for range 10 {
		ds, err := c.dss.Get(c.ctx, "ds", name)
		if err != nil {
			t.Fatal(err)
		}
		ds.Spec.Template.Spec.Containers[0].Image = image
		if _, err = c.dss.Update(c.ctx, ds); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("conflicts")
}

// TestDaemonSetPlacement: a pod on each eligible node only (nodeSelector,
// a NoSchedule taint the pod does not tolerate; a cordoned node keeps and
// gets its daemon pod, which tolerates unschedulable), a failed pod
// replaced, following nodes
// that join, leave, are relabelled and tainted; pods carry Kubernetes'
// daemon tolerations and a matchFields node affinity; status counts.
func TestDaemonSetPlacement(t *testing.T) {
	c := startDSCluster(t, 0)
	c.addNode(t, "n1", map[string]string{"disk": "ssd"})
	c.addNode(t, "n2", map[string]string{"disk": "ssd"}, &corev1.Taint{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"})
	c.addNode(t, "n3", map[string]string{"disk": "hdd"})
	c.addNode(t, "n4", map[string]string{"disk": "ssd"})
	c.editNode(t, "n4", func(n *corev1.Node) { n.Spec.Unschedulable = true })

	ds := newDaemonSet("agent", "agent:1")
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	if _, err := c.dss.Create(c.ctx, ds); err != nil {
		t.Fatal(err)
	}
	c.waitPlacement(t, "agent", "n1=agent:1 n4=agent:1")
	testutil.EventuallyWithin(t, waitLimit, "status", func() (bool, string) {
		got, err := c.dss.Get(c.ctx, "ds", "agent")
		if err != nil {
			return false, err.Error()
		}
		st := got.GetStatus()
		want := &appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 2, UpdatedNumberScheduled: 2,
			NumberAvailable: 2, ObservedGeneration: 1}
		return proto.Equal(st, want), fmt.Sprint(st)
	})

	l, _, err := c.pods.List(c.ctx, "ds", client.ListOptions{LabelSelector: "app=agent"})
	if err != nil || len(l) == 0 {
		t.Fatalf("pods: %v %v", l, err)
	}
	p := l[0]
	if !strings.HasPrefix(p.GetMetadata().GetName(), "agent-") || p.GetMetadata().GetLabels()[daemonset.HashLabel] == "" ||
		p.GetMetadata().GetLabels()[daemonset.GenerationLabel] != "1" {
		t.Errorf("pod %s labels %v: want agent-*, a controller-revision-hash and pod-template-generation 1", p.GetMetadata().GetName(), p.GetMetadata().GetLabels())
	}
	terms := p.GetSpec().GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution().GetNodeSelectorTerms()
	if len(terms) != 1 || len(terms[0].GetMatchFields()) != 1 || terms[0].GetMatchFields()[0].GetKey() != "metadata.name" ||
		!slices.Equal(terms[0].GetMatchFields()[0].GetValues(), []string{p.GetSpec().GetNodeName()}) {
		t.Errorf("node affinity %v: want matchFields metadata.name In [%s]", terms, p.GetSpec().GetNodeName())
	}
	var tols []string
	for _, tl := range p.GetSpec().GetTolerations() {
		if tl.GetOperator() == "Exists" && strings.HasPrefix(tl.GetKey(), "node.kubernetes.io/") {
			tols = append(tols, tl.GetKey()+":"+tl.GetEffect())
		}
	}
	for _, want := range []string{"node.kubernetes.io/not-ready:NoExecute", "node.kubernetes.io/unreachable:NoExecute",
		"node.kubernetes.io/disk-pressure:NoSchedule", "node.kubernetes.io/memory-pressure:NoSchedule",
		"node.kubernetes.io/pid-pressure:NoSchedule", "node.kubernetes.io/unschedulable:NoSchedule"} {
		if !slices.Contains(tols, want) {
			t.Errorf("tolerations %v: no %s", tols, want)
		}
	}
	if slices.Contains(tols, "node.kubernetes.io/network-unavailable:NoSchedule") {
		t.Errorf("tolerations %v: network-unavailable is for host-network pods only", tols)
	}

	// A failed daemon pod is deleted and replaced.
	var failed string
	for _, p := range l {
		if p.GetSpec().GetNodeName() == "n1" {
			failed = p.GetMetadata().GetName()
			p.Status = &corev1.PodStatus{Phase: "Failed"}
			if _, err := c.pods.UpdateStatus(c.ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.EventuallyWithin(t, waitLimit, "failed pod replaced", func() (bool, string) {
		l, _, err := c.pods.List(c.ctx, "ds", client.ListOptions{LabelSelector: "app=agent", FieldSelector: "spec.nodeName=n1"})
		if err != nil {
			return false, err.Error()
		}
		var state []string
		for _, p := range l {
			state = append(state, p.GetMetadata().GetName()+":"+p.GetStatus().GetPhase())
		}
		return len(l) == 1 && l[0].GetMetadata().GetName() != failed && l[0].GetStatus().GetPhase() == "Running", strings.Join(state, " ")
	})

	// A node joins; one is relabelled into and one out of the selector;
	// one leaves.
	c.addNode(t, "n5", map[string]string{"disk": "ssd"})
	c.waitPlacement(t, "agent", "n1=agent:1 n4=agent:1 n5=agent:1")
	c.editNode(t, "n3", func(n *corev1.Node) { n.Metadata.Labels["disk"] = "ssd" })
	c.editNode(t, "n1", func(n *corev1.Node) { n.Metadata.Labels["disk"] = "hdd" })
	c.waitPlacement(t, "agent", "n3=agent:1 n4=agent:1 n5=agent:1")
	if err := c.nodes.Delete(c.ctx, "", "n5", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pod of a deleted node is Kubernetes' pod GC's to remove; here
	// the node-agent stand-in finishes its deletion once asked, and no
	// new pod is made for the gone node.
	testutil.EventuallyWithin(t, waitLimit, "desired 2", func() (bool, string) {
		got, err := c.dss.Get(c.ctx, "ds", "agent")
		return err == nil && got.GetStatus().GetDesiredNumberScheduled() == 2, fmt.Sprint(got.GetStatus())
	})
	// A NoExecute taint the pod does not tolerate removes it; a NoSchedule
	// one added later does not.
	c.editNode(t, "n3", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, &corev1.Taint{Key: "evict", Effect: "NoExecute"})
	})
	c.editNode(t, "n4", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, &corev1.Taint{Key: "quiet", Effect: "NoSchedule"})
	})
	testutil.EventuallyWithin(t, waitLimit, "n3's pod gone, n4's kept", func() (bool, string) {
		got := c.placement(t, "agent")
		return strings.Contains(got, "n4=agent:1") && !strings.Contains(got, "n3="), got
	})
	testutil.EventuallyWithin(t, waitLimit, "misscheduled counted", func() (bool, string) {
		got, err := c.dss.Get(c.ctx, "ds", "agent")
		st := got.GetStatus()
		return err == nil && st.GetDesiredNumberScheduled() == 0 && st.GetNumberMisscheduled() == 1, fmt.Sprint(st)
	})
}

// TestDaemonSetRollingUpdate: with maxUnavailable 1 no two nodes are
// without an available pod at once; with maxSurge 1 a new pod starts
// beside the old one and no node is ever without an available pod; the
// revisions are kept to revisionHistoryLimit.
func TestDaemonSetRollingUpdate(t *testing.T) {
	c := startDSCluster(t, 300*time.Millisecond)
	for _, n := range []string{"n1", "n2", "n3"} {
		c.addNode(t, n, nil)
	}
	for _, tc := range []struct {
		name     string
		strategy *appsv1.RollingUpdateDaemonSet
		// check judges every look at the pods while the rollout runs.
		check func(nodes map[string][]*corev1.Pod) string
	}{
		{name: "unavailable", strategy: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 1}}},
			check: func(nodes map[string][]*corev1.Pod) string {
				without := 0
				for _, ps := range nodes {
					if !slices.ContainsFunc(ps, readyPod) {
						without++
					}
					if len(ps) > 1 {
						return "two pods on a node without maxSurge"
					}
				}
				if without > 1 {
					return fmt.Sprintf("%d nodes without a ready pod, maxUnavailable 1", without)
				}
				return ""
			}},
		{name: "surge", strategy: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 0}},
			MaxSurge: &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 1}}},
			check: func(nodes map[string][]*corev1.Pod) string {
				for n, ps := range nodes {
					if !slices.ContainsFunc(ps, readyPod) {
						return "node " + n + " without a ready pod, maxUnavailable 0"
					}
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := newDaemonSet(tc.name, "web:1")
			ds.Spec.RevisionHistoryLimit = proto.Int32(1)
			ds.Spec.UpdateStrategy = &appsv1.DaemonSetUpdateStrategy{Type: "RollingUpdate", RollingUpdate: tc.strategy}
			if _, err := c.dss.Create(c.ctx, ds); err != nil {
				t.Fatal(err)
			}
			testutil.EventuallyWithin(t, waitLimit, "rolled out", func() (bool, string) { return c.rolledOut(tc.name) })
			sawTwo := false
			for _, image := range []string{"web:2", "web:3"} {
				c.setImage(t, tc.name, image)
				testutil.EventuallyWithin(t, waitLimit, "rolled out to "+image, func() (bool, string) {
					l, _, err := c.pods.List(c.ctx, "ds", client.ListOptions{LabelSelector: "app=" + tc.name})
					if err != nil {
						return false, err.Error()
					}
					nodes := map[string][]*corev1.Pod{"n1": nil, "n2": nil, "n3": nil}
					for _, p := range l {
						if p.GetMetadata().GetDeletionTimestamp() == nil && p.GetSpec().GetNodeName() != "" {
							nodes[p.GetSpec().GetNodeName()] = append(nodes[p.GetSpec().GetNodeName()], p)
						}
					}
					for _, ps := range nodes {
						sawTwo = sawTwo || len(ps) == 2
					}
					if bad := tc.check(nodes); bad != "" {
						t.Fatal(bad)
					}
					ok, state := c.rolledOut(tc.name)
					return ok && c.placement(t, tc.name) == fmt.Sprintf("n1=%s n2=%s n3=%s", image, image, image), state
				})
			}
			if tc.name == "surge" && !sawTwo {
				t.Error("never saw a new pod beside an old one while surging")
			}
			// Revisions: the current one and one old (revisionHistoryLimit 1).
			testutil.EventuallyWithin(t, waitLimit, "revisions pruned", func() (bool, string) {
				l, _, err := c.crs.List(c.ctx, "ds", client.ListOptions{LabelSelector: "app=" + tc.name})
				if err != nil {
					return false, err.Error()
				}
				var revs []string
				for _, r := range l {
					revs = append(revs, fmt.Sprintf("%s:%d", r.GetMetadata().GetName(), r.GetRevision()))
					if !strings.HasPrefix(r.GetMetadata().GetName(), tc.name+"-"+r.GetMetadata().GetLabels()[daemonset.HashLabel]) {
						return false, "revision " + r.GetMetadata().GetName() + " not named <ds>-<hash>"
					}
				}
				sort.Strings(revs)
				return len(l) == 2 && slices.ContainsFunc(l, func(r *appsv1.ControllerRevision) bool { return r.GetRevision() == 3 }) &&
					slices.ContainsFunc(l, func(r *appsv1.ControllerRevision) bool { return r.GetRevision() == 2 }), strings.Join(revs, " ")
			})
		})
	}
}

func readyPod(p *corev1.Pod) bool {
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c.GetStatus() == "True"
		}
	}
	return false
}

// TestDaemonSetOnDelete: a template change replaces no pod; a pod deleted
// by its user comes back with the new template; a pod relabelled out of
// the selector is released and replaced; deleting the DaemonSet deletes
// its pods and revisions.
func TestDaemonSetOnDelete(t *testing.T) {
	c := startDSCluster(t, 0)
	c.addNode(t, "n1", nil)
	c.addNode(t, "n2", nil)
	ds := newDaemonSet("od", "web:1")
	ds.Spec.UpdateStrategy = &appsv1.DaemonSetUpdateStrategy{Type: "OnDelete"}
	if _, err := c.dss.Create(c.ctx, ds); err != nil {
		t.Fatal(err)
	}
	c.waitPlacement(t, "od", "n1=web:1 n2=web:1")
	c.setImage(t, "od", "web:2")
	testutil.EventuallyWithin(t, waitLimit, "generation observed, nothing updated", func() (bool, string) {
		got, err := c.dss.Get(c.ctx, "ds", "od")
		st := got.GetStatus()
		return err == nil && st.GetObservedGeneration() == 2 && st.GetUpdatedNumberScheduled() == 0 && st.GetNumberAvailable() == 2, fmt.Sprint(st)
	})
	if got := c.placement(t, "od"); got != "n1=web:1 n2=web:1" {
		t.Fatalf("OnDelete replaced pods: %s", got)
	}
	l, _, err := c.pods.List(c.ctx, "ds", client.ListOptions{LabelSelector: "app=od"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l {
		if p.GetSpec().GetNodeName() == "n1" {
			if err := c.pods.Delete(c.ctx, "ds", p.GetMetadata().GetName(), client.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.waitPlacement(t, "od", "n1=web:2 n2=web:1")
	testutil.EventuallyWithin(t, waitLimit, "one updated", func() (bool, string) {
		got, err := c.dss.Get(c.ctx, "ds", "od")
		return err == nil && got.GetStatus().GetUpdatedNumberScheduled() == 1, fmt.Sprint(got.GetStatus())
	})

	// A pod relabelled out of the selector is released (no longer the
	// DaemonSet's) and its node gets a new one.
	l, _, err = c.pods.List(c.ctx, "ds", client.ListOptions{LabelSelector: "app=od"})
	if err != nil {
		t.Fatal(err)
	}
	var released string
	for _, p := range l {
		if p.GetSpec().GetNodeName() == "n2" && p.GetMetadata().GetDeletionTimestamp() == nil {
			released = p.GetMetadata().GetName()
			p.Metadata.Labels["app"] = "debug"
			if _, err := c.pods.Update(c.ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.waitPlacement(t, "od", "n1=web:2 n2=web:2")
	testutil.EventuallyWithin(t, waitLimit, "released pod without its owner", func() (bool, string) {
		p, err := c.pods.Get(c.ctx, "ds", released)
		return err == nil && len(p.GetMetadata().GetOwnerReferences()) == 0, fmt.Sprint(p.GetMetadata().GetOwnerReferences(), err)
	})

	if err := c.dss.Delete(c.ctx, "ds", "od", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "pods and revisions collected", func() (bool, string) {
		crs, _, err1 := c.crs.List(c.ctx, "ds", client.ListOptions{})
		got := c.placement(t, "od")
		return err1 == nil && len(crs) == 0 && got == "", fmt.Sprintf("%d revisions, pods %q", len(crs), got)
	})
}

// TestDaemonSetMinReadySeconds: a ready pod counts as available only
// minReadySeconds after it became ready; the controller comes back to
// count it then, without any other change.
func TestDaemonSetMinReadySeconds(t *testing.T) {
	c := startDSCluster(t, 0)
	c.addNode(t, "n1", nil)
	c.addNode(t, "n2", nil)
	wctx, cancel := context.WithTimeout(c.ctx, waitLimit)
	defer cancel()
	w, err := c.dss.Watch(wctx, "ds", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds := newDaemonSet("slow", "web:1")
	ds.Spec.MinReadySeconds = 2
	if _, err := c.dss.Create(c.ctx, ds); err != nil {
		t.Fatal(err)
	}
	sawReadyUnavailable := false
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		st := ev.Object.GetStatus()
		if st.GetNumberReady() == 2 && st.GetNumberAvailable() == 0 && st.GetNumberUnavailable() == 2 {
			sawReadyUnavailable = true
		}
		if st.GetNumberAvailable() == 2 && st.GetNumberUnavailable() == 0 {
			break
		}
	}
	if !sawReadyUnavailable {
		t.Error("never saw two ready pods not yet available")
	}
}
