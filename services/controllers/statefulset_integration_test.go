// This file holds the StatefulSet controller's tests against a real API
// service with the garbage collector: ordered creation and reverse-ordered
// removal, Parallel, rolling updates with a partition, and the claims made
// from volumeClaimTemplates kept or deleted as the retention policy says.
package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/internal/testutil"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

type stsCluster struct {
	ctx    context.Context
	pods   *client.Client[*corev1.Pod]
	sets   *client.Client[*appsv1.StatefulSet]
	claims *client.Client[*corev1.PersistentVolumeClaim]
	// deleted lists pod names in the order their deletion was seen.
	mu      sync.Mutex
	deleted []string
}

// startSTSCluster runs the API service with the statefulset and garbage
// collector controllers; with autoReady a stand-in node agent makes every
// pod Running and Ready, otherwise the test does (ready).
func startSTSCluster(t *testing.T, autoReady bool) *stsCluster {
	env := apiservertest.Start(t, apiservertest.Options{})
	conn := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	m, err := controllers.New(controllers.Config{Conn: conn, Logger: testLogger(),
		Controllers: []string{controllers.StatefulSet, controllers.GarbageCollector}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	if autoReady {
		fakeKubelet(ctx, t, conn)
	}
	c := &stsCluster{ctx: ctx, pods: client.Must[*corev1.Pod](conn), sets: client.Must[*appsv1.StatefulSet](conn),
		claims: client.Must[*corev1.PersistentVolumeClaim](conn)}
	inf := client.NewInformer(client.ListWatch(c.pods, "", "", "", 500), client.InformerOptions[*corev1.Pod]{})
	inf.AddEventHandler(client.Handler[*corev1.Pod]{
		OnUpdate: func(o, p *corev1.Pod) {
			if o.GetMetadata().GetDeletionTimestamp() == nil && p.GetMetadata().GetDeletionTimestamp() != nil {
				c.noteDeleted(p.GetMetadata().GetName())
			}
		},
		OnDelete: func(p *corev1.Pod) { c.noteDeleted(p.GetMetadata().GetName()) },
	})
	infDone := make(chan struct{})
	go func() { _ = inf.Run(ctx); close(infDone) }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-infDone
	})
	if _, err := client.Must[*corev1.Namespace](conn).Create(ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "sts"}}); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *stsCluster) noteDeleted(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.deleted, name) {
		c.deleted = append(c.deleted, name)
	}
}

func (c *stsCluster) deletions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.deleted)
}

func newStatefulSet(name string, replicas int32, policy string, retention *appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		Metadata: &metav1.ObjectMeta{Name: name, Namespace: "sts"},
		Spec: &appsv1.StatefulSetSpec{
			Replicas: proto.Int32(replicas), ServiceName: name, PodManagementPolicy: policy,
			Selector:                             &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			PersistentVolumeClaimRetentionPolicy: retention,
			Template: &corev1.PodTemplateSpec{
				Metadata: &metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:     &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1"}}},
			},
			VolumeClaimTemplates: []*corev1.PersistentVolumeClaim{{
				Metadata: &metav1.ObjectMeta{Name: "data", Labels: map[string]string{"tier": "db"}},
				Spec: &corev1.PersistentVolumeClaimSpec{AccessModes: []string{"ReadWriteOnce"},
					Resources: &corev1.VolumeResourceRequirements{Requests: map[string]string{"storage": "1Gi"}}},
			}},
		},
	}
}

// podNames lists the names of the pods of app, sorted.
func (c *stsCluster) podNames(t *testing.T, app string) []string {
	t.Helper()
	ps, _, err := c.pods.List(c.ctx, "sts", client.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.GetMetadata().GetName())
	}
	slices.Sort(out)
	return out
}

// claimNames lists the names of the claims of app not being deleted, sorted.
func (c *stsCluster) claimNames(t *testing.T, app string) []string {
	t.Helper()
	cs, _, err := c.claims.List(c.ctx, "sts", client.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range cs {
		if p.GetMetadata().GetDeletionTimestamp() == nil {
			out = append(out, p.GetMetadata().GetName())
		}
	}
	slices.Sort(out)
	return out
}

// ready makes a pod Running and Ready, as its node agent would.
func (c *stsCluster) ready(t *testing.T, name string) {
	t.Helper()
	p, err := c.pods.Get(c.ctx, "sts", name)
	if err != nil {
		t.Fatal(err)
	}
	now := timestamppb.Now()
	p.Status = &corev1.PodStatus{Phase: "Running", PodIp: "10.0.0.1", StartTime: now, Conditions: []*corev1.PodCondition{
		{Type: "Ready", Status: "True", LastTransitionTime: now}}}
	if _, err := c.pods.UpdateStatus(c.ctx, p); err != nil {
		t.Fatal(err)
	}
}

// settled reports whether the controller has observed set's generation
// and its status shows replicas pods.
func (c *stsCluster) settled(t *testing.T, name string, replicas, ready int32) (bool, string) {
	s, err := c.sets.Get(c.ctx, "sts", name)
	if err != nil {
		t.Fatal(err)
	}
	st := s.GetStatus()
	return st.GetObservedGeneration() == s.GetMetadata().GetGeneration() && st.GetReplicas() == replicas && st.GetReadyReplicas() == ready,
		fmt.Sprintf("generation %d, status %v", s.GetMetadata().GetGeneration(), st)
}

func TestStatefulSetOrderedReadyAndScaleDown(t *testing.T) {
	c := startSTSCluster(t, false)
	set := newStatefulSet("web", 3, "", &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenScaled: "Delete"})
	set.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 1}
	if _, err := c.sets.Create(c.ctx, set); err != nil {
		t.Fatal(err)
	}
	// One pod at a time, in order, each once the one before is Ready.
	for i, name := range []string{"web-1", "web-2", "web-3"} {
		testutil.EventuallyWithin(t, waitLimit, name+" created alone", func() (bool, string) {
			got := c.podNames(t, "web")
			return slices.Equal(got, []string{"web-1", "web-2", "web-3"}[:i+1]), fmt.Sprint(got)
		})
		testutil.EventuallyWithin(t, waitLimit, "status with "+name, func() (bool, string) { return c.settled(t, "web", int32(i+1), int32(i)) })
		if got := c.podNames(t, "web"); len(got) != i+1 {
			t.Fatalf("pods before %s is ready: %v", name, got)
		}
		c.ready(t, name)
	}
	testutil.EventuallyWithin(t, waitLimit, "all ready", func() (bool, string) { return c.settled(t, "web", 3, 3) })

	p, err := c.pods.Get(c.ctx, "sts", "web-2")
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.sets.Get(c.ctx, "sts", "web")
	if err != nil {
		t.Fatal(err)
	}
	l := p.GetMetadata().GetLabels()
	if l["statefulset.kubernetes.io/pod-name"] != "web-2" || l["apps.kubernetes.io/pod-index"] != "2" || l["controller-revision-hash"] != s.GetStatus().GetUpdateRevision() {
		t.Errorf("labels %v, update revision %s", l, s.GetStatus().GetUpdateRevision())
	}
	if p.GetSpec().GetHostname() != "web-2" || p.GetSpec().GetSubdomain() != "web" {
		t.Errorf("hostname %q subdomain %q, want web-2 and web", p.GetSpec().GetHostname(), p.GetSpec().GetSubdomain())
	}
	if v := p.GetSpec().GetVolumes(); len(v) != 1 || v[0].GetName() != "data" || v[0].GetPersistentVolumeClaim().GetClaimName() != "data-web-2" {
		t.Errorf("volumes %v", v)
	}
	if !strings.HasPrefix(s.GetStatus().GetCurrentRevision(), "web-") || s.GetStatus().GetCurrentRevision() != s.GetStatus().GetUpdateRevision() {
		t.Errorf("revisions: current %q update %q", s.GetStatus().GetCurrentRevision(), s.GetStatus().GetUpdateRevision())
	}
	if got, want := c.claimNames(t, "web"), []string{"data-web-1", "data-web-2", "data-web-3"}; !slices.Equal(got, want) {
		t.Errorf("claims %v, want %v", got, want)
	}
	pvc, err := c.claims.Get(c.ctx, "sts", "data-web-1")
	if err != nil {
		t.Fatal(err)
	}
	if pvc.GetMetadata().GetLabels()["tier"] != "db" || len(pvc.GetMetadata().GetOwnerReferences()) != 0 {
		t.Errorf("claim labels %v, owners %v (whenDeleted Retain: none)", pvc.GetMetadata().GetLabels(), pvc.GetMetadata().GetOwnerReferences())
	}

	// Scale down: highest ordinal first; whenScaled Delete takes their claims.
	sc, err := c.sets.GetScale(c.ctx, "sts", "web")
	if err != nil {
		t.Fatal(err)
	}
	sc.Spec.Replicas = 1
	if _, err := c.sets.UpdateScale(c.ctx, "sts", "web", sc); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "scaled down to web-1", func() (bool, string) {
		got := c.podNames(t, "web")
		return slices.Equal(got, []string{"web-1"}), fmt.Sprint(got)
	})
	// The deletions are recorded from a watch, which may trail the list
	// above: wait for both before checking their order.
	testutil.EventuallyWithin(t, waitLimit, "two deletions seen", func() (bool, string) {
		got := c.deletions()
		return len(got) >= 2, fmt.Sprint(got)
	})
	if got, want := c.deletions(), []string{"web-3", "web-2"}; !slices.Equal(got, want) {
		t.Errorf("deletion order %v, want %v", got, want)
	}
	testutil.EventuallyWithin(t, waitLimit, "claims of removed pods collected", func() (bool, string) {
		got := c.claimNames(t, "web")
		return slices.Equal(got, []string{"data-web-1"}), fmt.Sprint(got)
	})
}

func TestStatefulSetParallelRollingUpdateWithPartition(t *testing.T) {
	c := startSTSCluster(t, true)
	set := newStatefulSet("db", 3, "Parallel", &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: "Delete"})
	if _, err := c.sets.Create(c.ctx, set); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "three ready", func() (bool, string) { return c.settled(t, "db", 3, 3) })
	first, err := c.sets.Get(c.ctx, "sts", "db")
	if err != nil {
		t.Fatal(err)
	}
	oldRev := first.GetStatus().GetUpdateRevision()
	pvc, err := c.claims.Get(c.ctx, "sts", "data-db-0")
	if err != nil {
		t.Fatal(err)
	}
	if refs := pvc.GetMetadata().GetOwnerReferences(); len(refs) != 1 || refs[0].GetKind() != "StatefulSet" || refs[0].GetUid() != first.GetMetadata().GetUid() {
		t.Errorf("claim owners %v, want the StatefulSet (whenDeleted Delete)", refs)
	}

	// A new image with partition 2: only ordinals 2 and up are replaced.
	update := func(f func(*appsv1.StatefulSet)) {
		t.Helper()
		for range 10 {
			s, err := c.sets.Get(c.ctx, "sts", "db")
			if err != nil {
				t.Fatal(err)
			}
			f(s)
			if _, err = c.sets.Update(c.ctx, s); err == nil {
				return
			}
		}
		t.Fatal("update kept conflicting")
	}
	update(func(s *appsv1.StatefulSet) {
		s.Spec.Template.Spec.Containers[0].Image = "nginx:2"
		s.Spec.UpdateStrategy.RollingUpdate.Partition = proto.Int32(2)
	})
	revisions := func() map[string]string {
		ps, _, err := c.pods.List(c.ctx, "sts", client.ListOptions{LabelSelector: "app=db"})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, p := range ps {
			if p.GetMetadata().GetDeletionTimestamp() == nil {
				m[p.GetMetadata().GetName()] = p.GetMetadata().GetLabels()["controller-revision-hash"]
			}
		}
		return m
	}
	var newRev string
	testutil.EventuallyWithin(t, waitLimit, "partitioned roll out", func() (bool, string) {
		s, err := c.sets.Get(c.ctx, "sts", "db")
		if err != nil {
			t.Fatal(err)
		}
		newRev = s.GetStatus().GetUpdateRevision()
		st := s.GetStatus()
		return newRev != oldRev && st.GetUpdatedReplicas() == 1 && st.GetReadyReplicas() == 3 && st.GetCurrentRevision() == oldRev &&
			st.GetObservedGeneration() == s.GetMetadata().GetGeneration(), fmt.Sprint(st)
	})
	if got := revisions(); got["db-0"] != oldRev || got["db-1"] != oldRev || got["db-2"] != newRev {
		t.Errorf("revisions %v, want db-2 at %s and the others at %s", got, newRev, oldRev)
	}

	// Partition 0: the rest follow, highest first, and the update
	// revision becomes current.
	update(func(s *appsv1.StatefulSet) { s.Spec.UpdateStrategy.RollingUpdate.Partition = proto.Int32(0) })
	testutil.EventuallyWithin(t, waitLimit, "roll out complete", func() (bool, string) {
		s, err := c.sets.Get(c.ctx, "sts", "db")
		if err != nil {
			t.Fatal(err)
		}
		st := s.GetStatus()
		return st.GetCurrentRevision() == newRev && st.GetUpdatedReplicas() == 3 && st.GetReadyReplicas() == 3, fmt.Sprint(st)
	})
	if got, want := c.deletions(), []string{"db-2", "db-1", "db-0"}; !slices.Equal(got, want) {
		t.Errorf("update order %v, want %v", got, want)
	}

	// whenDeleted Delete: the claims go with the set.
	if err := c.sets.Delete(c.ctx, "sts", "db", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "claims collected with the set", func() (bool, string) {
		got := c.claimNames(t, "db")
		return len(got) == 0, fmt.Sprint(got)
	})
}

func TestStatefulSetOnDelete(t *testing.T) {
	c := startSTSCluster(t, true)
	set := newStatefulSet("odb", 2, "", nil)
	set.Spec.UpdateStrategy = &appsv1.StatefulSetUpdateStrategy{Type: "OnDelete"}
	if _, err := c.sets.Create(c.ctx, set); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "two ready", func() (bool, string) { return c.settled(t, "odb", 2, 2) })
	s, err := c.sets.Get(c.ctx, "sts", "odb")
	if err != nil {
		t.Fatal(err)
	}
	oldRev := s.GetStatus().GetCurrentRevision()
	s.Spec.Template.Spec.Containers[0].Image = "nginx:2"
	if _, err := c.sets.Update(c.ctx, s); err != nil {
		t.Fatal(err)
	}
	// The new revision is recorded but no pod is replaced...
	testutil.EventuallyWithin(t, waitLimit, "update revision observed", func() (bool, string) {
		s, err := c.sets.Get(c.ctx, "sts", "odb")
		if err != nil {
			t.Fatal(err)
		}
		st := s.GetStatus()
		return st.GetObservedGeneration() == s.GetMetadata().GetGeneration() && st.GetUpdateRevision() != oldRev &&
			st.GetCurrentRevision() == oldRev && st.GetUpdatedReplicas() == 0 && st.GetCurrentReplicas() == 2, fmt.Sprint(st)
	})
	if got := c.deletions(); len(got) != 0 {
		t.Errorf("pods deleted by an OnDelete set: %v", got)
	}
	// ...until one is deleted: it comes back at the new revision.
	if err := c.pods.Delete(c.ctx, "sts", "odb-1", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "odb-1 recreated from the new template", func() (bool, string) {
		p, err := c.pods.Get(c.ctx, "sts", "odb-1")
		if err != nil {
			return false, err.Error()
		}
		img := p.GetSpec().GetContainers()[0].GetImage()
		return img == "nginx:2" && p.GetMetadata().GetDeletionTimestamp() == nil, img
	})
	p, err := c.pods.Get(c.ctx, "sts", "odb-0")
	if err != nil {
		t.Fatal(err)
	}
	if img := p.GetSpec().GetContainers()[0].GetImage(); img != "nginx:1" {
		t.Errorf("odb-0 image %s, want nginx:1 (not deleted, not replaced)", img)
	}
}
