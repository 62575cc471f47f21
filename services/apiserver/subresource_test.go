// This file holds the tests of subresources and list options: binding,
// status and graceful deletion, finalizers and preconditions, scale,
// selectors and pagination, and the uid precondition.

package apiserver

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func TestPodBinding(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	p := mustCreatePod(t, e, testPod("default", "p"))
	// spec.nodeName cannot be set by an update.
	u := proto.Clone(p).(*corev1.Pod)
	u.Spec.NodeName = "n1"
	_, err := e.pods.UpdatePod(ctx, &corev1.UpdatePodRequest{Namespace: "default", Name: "p", Pod: u})
	wantReason(t, err, apierrors.ReasonInvalid)

	r, err := e.pods.BindPod(ctx, &corev1.BindPodRequest{Namespace: "default", Name: "p", Binding: &corev1.Binding{Metadata: om("default", "p"), Target: &corev1.ObjectReference{Kind: "Node", Name: "n1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetStatus().GetStatus() != "Success" {
		t.Errorf("bind status: got %v", r.GetStatus())
	}
	g, err := e.pods.GetPod(ctx, &corev1.GetPodRequest{Namespace: "default", Name: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if g.GetPod().GetSpec().GetNodeName() != "n1" {
		t.Errorf("nodeName: got %q, want n1", g.GetPod().GetSpec().GetNodeName())
	}
	var scheduled bool
	for _, c := range g.GetPod().GetStatus().GetConditions() {
		scheduled = scheduled || (c.GetType() == "PodScheduled" && c.GetStatus() == "True")
	}
	if !scheduled {
		t.Errorf("no PodScheduled=True condition: %v", g.GetPod().GetStatus())
	}
	_, err = e.pods.BindPod(ctx, &corev1.BindPodRequest{Namespace: "default", Name: "p", Binding: &corev1.Binding{Target: &corev1.ObjectReference{Name: "n2"}}})
	se := wantReason(t, err, apierrors.ReasonConflict)
	if want := `pod p is already assigned to node "n1"`; !strings.Contains(se.Message, want) {
		t.Errorf("message: got %q, want it to contain %q", se.Message, want)
	}
	_, err = e.pods.BindPod(ctx, &corev1.BindPodRequest{Namespace: "default", Name: "missing", Binding: &corev1.Binding{Target: &corev1.ObjectReference{Name: "n2"}}})
	wantReason(t, err, apierrors.ReasonNotFound)
	_, err = e.pods.BindPod(ctx, &corev1.BindPodRequest{Namespace: "default", Name: "p", Binding: &corev1.Binding{}})
	wantReason(t, err, apierrors.ReasonInvalid)
}

func TestPodStatusAndGracefulDeletion(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	p := mustCreatePod(t, e, testPod("default", "g"))
	if _, err := e.pods.BindPod(ctx, &corev1.BindPodRequest{Namespace: "default", Name: "g", Binding: &corev1.Binding{Target: &corev1.ObjectReference{Name: "n1"}}}); err != nil {
		t.Fatal(err)
	}
	// Status through the subresource; spec changes there are ignored.
	s := proto.Clone(p).(*corev1.Pod)
	s.Metadata.ResourceVersion = ""
	s.Status.Phase = "Running"
	s.Status.PodIp = "10.0.0.9"
	s.Spec.Containers[0].Image = "ignored:1"
	sr, err := e.pods.UpdatePodStatus(ctx, &corev1.UpdatePodStatusRequest{Namespace: "default", Name: "g", Pod: s})
	if err != nil {
		t.Fatal(err)
	}
	if got := sr.GetPod(); got.GetStatus().GetPhase() != "Running" || got.GetSpec().GetContainers()[0].GetImage() != "nginx:1.27" || got.GetSpec().GetNodeName() != "n1" {
		t.Errorf("status update: got %v", got)
	}
	if got, want := sr.GetPod().GetMetadata().GetGeneration(), int64(1); got != want {
		t.Errorf("generation after status update: got %d, want %d", got, want)
	}
	// A status update with a stale resourceVersion conflicts.
	s.Metadata.ResourceVersion = p.GetMetadata().GetResourceVersion()
	_, err = e.pods.UpdatePodStatus(ctx, &corev1.UpdatePodStatusRequest{Namespace: "default", Name: "g", Pod: s})
	wantReason(t, err, apierrors.ReasonConflict)
	// A main update does not change status.
	cur := sr.GetPod()
	cur.Status.Phase = "Failed"
	ur, err := e.pods.UpdatePod(ctx, &corev1.UpdatePodRequest{Namespace: "default", Name: "g", Pod: cur})
	if err != nil {
		t.Fatal(err)
	}
	if ur.GetPod().GetStatus().GetPhase() != "Running" {
		t.Errorf("main update changed status: %v", ur.GetPod().GetStatus())
	}

	// Delete a running, bound pod: it stays, marked, for its grace period.
	d, err := e.pods.DeletePod(ctx, &corev1.DeletePodRequest{Namespace: "default", Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	m := d.GetPod().GetMetadata()
	if m.GetDeletionTimestamp() == nil || m.GetDeletionGracePeriodSeconds() != 30 {
		t.Fatalf("graceful delete: got %v", m)
	}
	if _, err := e.pods.GetPod(ctx, &corev1.GetPodRequest{Namespace: "default", Name: "g"}); err != nil {
		t.Fatalf("pod gone before its grace period: %v", err)
	}
	// The node agent confirms with grace 0: now it is gone.
	if _, err := e.pods.DeletePod(ctx, &corev1.DeletePodRequest{Namespace: "default", Name: "g", GracePeriodSeconds: proto.Int64(0)}); err != nil {
		t.Fatal(err)
	}
	_, err = e.pods.GetPod(ctx, &corev1.GetPodRequest{Namespace: "default", Name: "g"})
	wantReason(t, err, apierrors.ReasonNotFound)
}

func TestFinalizersAndPreconditions(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	c, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "f", Finalizers: []string{"example.com/keep"}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.cms.DeleteConfigMap(ctx, &corev1.DeleteConfigMapRequest{Namespace: "default", Name: "f", Preconditions: &metav1.Preconditions{Uid: proto.String("wrong")}})
	wantReason(t, err, apierrors.ReasonConflict)
	_, err = e.cms.DeleteConfigMap(ctx, &corev1.DeleteConfigMapRequest{Namespace: "default", Name: "f", Preconditions: &metav1.Preconditions{ResourceVersion: proto.String("1")}})
	wantReason(t, err, apierrors.ReasonConflict)
	d, err := e.cms.DeleteConfigMap(ctx, &corev1.DeleteConfigMapRequest{Namespace: "default", Name: "f", Preconditions: &metav1.Preconditions{Uid: proto.String(c.GetConfigMap().GetMetadata().GetUid())}})
	if err != nil {
		t.Fatal(err)
	}
	if d.GetConfigMap().GetMetadata().GetDeletionTimestamp() == nil {
		t.Fatalf("finalized object not marked for deletion: %v", d.GetConfigMap().GetMetadata())
	}
	obj := d.GetConfigMap()
	obj.Metadata.Finalizers = nil
	if _, err := e.cms.UpdateConfigMap(ctx, &corev1.UpdateConfigMapRequest{Namespace: "default", Name: "f", ConfigMap: obj}); err != nil {
		t.Fatal(err)
	}
	_, err = e.cms.GetConfigMap(ctx, &corev1.GetConfigMapRequest{Namespace: "default", Name: "f"})
	wantReason(t, err, apierrors.ReasonNotFound)
}

func testDeployment(name string) *appsv1.Deployment {
	return &appsv1.Deployment{Metadata: om("default", name), Spec: &appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}}},
	}}
}

func TestScaleAndDeploymentStatus(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	cr, err := e.deps.CreateDeployment(ctx, &appsv1.CreateDeploymentRequest{Namespace: "default", Deployment: testDeployment("web")})
	if err != nil {
		t.Fatal(err)
	}
	d := cr.GetDeployment()
	if d.GetSpec().GetReplicas() != 1 || d.GetSpec().GetStrategy().GetRollingUpdate().GetMaxSurge().GetStrVal() != "25%" {
		t.Errorf("deployment defaults: got %v", d.GetSpec())
	}
	sc, err := e.deps.GetDeploymentScale(ctx, &appsv1.GetDeploymentScaleRequest{Namespace: "default", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.GetScale(); got.GetSpec().GetReplicas() != 1 || got.GetStatus().GetSelector() != "app=web" {
		t.Errorf("scale: got %v", got)
	}
	us, err := e.deps.UpdateDeploymentScale(ctx, &appsv1.UpdateDeploymentScaleRequest{Namespace: "default", Name: "web", Scale: &autoscalingv1.Scale{Spec: &autoscalingv1.ScaleSpec{Replicas: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	if us.GetScale().GetSpec().GetReplicas() != 5 {
		t.Errorf("scale update: got %v", us.GetScale())
	}
	g, err := e.deps.GetDeployment(ctx, &appsv1.GetDeploymentRequest{Namespace: "default", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if g.GetDeployment().GetSpec().GetReplicas() != 5 || g.GetDeployment().GetMetadata().GetGeneration() != 2 {
		t.Errorf("after scale: replicas %d generation %d, want 5 and 2", g.GetDeployment().GetSpec().GetReplicas(), g.GetDeployment().GetMetadata().GetGeneration())
	}
	_, err = e.deps.UpdateDeploymentScale(ctx, &appsv1.UpdateDeploymentScaleRequest{Namespace: "default", Name: "web", Scale: &autoscalingv1.Scale{Metadata: &metav1.ObjectMeta{ResourceVersion: d.GetMetadata().GetResourceVersion()}, Spec: &autoscalingv1.ScaleSpec{Replicas: 2}}})
	wantReason(t, err, apierrors.ReasonConflict)
	_, err = e.deps.UpdateDeploymentScale(ctx, &appsv1.UpdateDeploymentScaleRequest{Namespace: "default", Name: "web", Scale: &autoscalingv1.Scale{Spec: &autoscalingv1.ScaleSpec{Replicas: -1}}})
	wantReason(t, err, apierrors.ReasonInvalid)

	st := g.GetDeployment()
	st.Status = &appsv1.DeploymentStatus{Replicas: 5, ReadyReplicas: 3, ObservedGeneration: 2}
	sr, err := e.deps.UpdateDeploymentStatus(ctx, &appsv1.UpdateDeploymentStatusRequest{Namespace: "default", Name: "web", Deployment: st})
	if err != nil {
		t.Fatal(err)
	}
	if sr.GetDeployment().GetStatus().GetReadyReplicas() != 3 {
		t.Errorf("deployment status: got %v", sr.GetDeployment().GetStatus())
	}
	// The selector is immutable.
	upd := sr.GetDeployment()
	upd.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}
	upd.Spec.Template.Metadata.Labels = map[string]string{"app": "other"}
	_, err = e.deps.UpdateDeployment(ctx, &appsv1.UpdateDeploymentRequest{Namespace: "default", Name: "web", Deployment: upd})
	se := wantReason(t, err, apierrors.ReasonInvalid)
	if len(se.Causes) != 1 || se.Causes[0].Field != "spec.selector" {
		t.Errorf("causes: got %v, want one on spec.selector", se.Causes)
	}

	// ReplicaSet scale too.
	rs := &appsv1.ReplicaSet{Metadata: om("default", "rs"), Spec: &appsv1.ReplicaSetSpec{Selector: testDeployment("rs").Spec.Selector, Template: testDeployment("rs").Spec.Template}}
	if _, err := e.rss.CreateReplicaSet(ctx, &appsv1.CreateReplicaSetRequest{Namespace: "default", ReplicaSet: rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rss.UpdateReplicaSetScale(ctx, &appsv1.UpdateReplicaSetScaleRequest{Namespace: "default", Name: "rs", Scale: &autoscalingv1.Scale{Spec: &autoscalingv1.ScaleSpec{Replicas: 3}}}); err != nil {
		t.Fatal(err)
	}
	rsg, err := e.rss.GetReplicaSetScale(ctx, &appsv1.GetReplicaSetScaleRequest{Namespace: "default", Name: "rs"})
	if err != nil {
		t.Fatal(err)
	}
	if rsg.GetScale().GetSpec().GetReplicas() != 3 {
		t.Errorf("replicaset scale: got %v", rsg.GetScale())
	}
}

func TestListSelectorsAndPagination(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	for i := range 25 {
		tier := []string{"web", "db", "cache"}[i%3]
		labels := map[string]string{"tier": tier}
		if i%5 == 0 {
			labels["canary"] = "true"
		}
		if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm(fmt.Sprintf("cm-%02d", i), labels)}); err != nil {
			t.Fatal(err)
		}
	}
	// resourceVersion "0" may be served from the watch cache, which (as in
	// Kubernetes) may trail the writes just made: wait until it has them all.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default", ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.GetList().GetItems()) == 25 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch cache has %d of 25 configmaps after 30s", len(l.GetList().GetItems()))
		}
	}
	tests := []struct {
		name     string
		selector string
		want     int
	}{
		{name: "equals", selector: "tier=web", want: 9},
		{name: "double equals", selector: "tier==db", want: 8},
		{name: "not equals", selector: "tier!=web", want: 16},
		{name: "in", selector: "tier in (web,db)", want: 17},
		{name: "notin", selector: "tier notin (web,db)", want: 8},
		{name: "exists", selector: "canary", want: 5},
		{name: "does not exist", selector: "!canary", want: 20},
		{name: "and", selector: "tier=web,canary", want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, rv := range []string{"", "0"} {
				l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default", LabelSelector: tt.selector, ResourceVersion: rv})
				if err != nil {
					t.Fatal(err)
				}
				if got := len(l.GetList().GetItems()); got != tt.want {
					t.Errorf("rv %q: got %d items, want %d", rv, got, tt.want)
				}
				if l.GetList().GetMetadata().GetResourceVersion() == "" {
					t.Errorf("rv %q: list has no resourceVersion", rv)
				}
			}
		})
	}
	_, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{LabelSelector: "tier in (web"})
	wantReason(t, err, apierrors.ReasonBadRequest)

	// Pages of 4 with a selector, all at the first page's revision even
	// though the collection changes in between.
	var names []string
	cont, firstRV := "", ""
	for pages := 0; pages < 20; pages++ {
		l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default", LabelSelector: "tier!=cache", Limit: 4, Continue: cont})
		if err != nil {
			t.Fatal(err)
		}
		if firstRV == "" {
			firstRV = l.GetList().GetMetadata().GetResourceVersion()
			if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("cm-99-late", map[string]string{"tier": "web"})}); err != nil {
				t.Fatal(err)
			}
		} else if got := l.GetList().GetMetadata().GetResourceVersion(); got != firstRV {
			t.Errorf("page at revision %s, want %s", got, firstRV)
		}
		if len(l.GetList().GetItems()) > 4 {
			t.Fatalf("page of %d items, limit 4", len(l.GetList().GetItems()))
		}
		for _, it := range l.GetList().GetItems() {
			names = append(names, it.GetMetadata().GetName())
		}
		cont = l.GetList().GetMetadata().GetContinue()
		if cont == "" {
			break
		}
	}
	if len(names) != 17 {
		t.Errorf("paginated list: got %d items %v, want 17", len(names), names)
	}
	_, err = e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default", Continue: "garbage"})
	wantReason(t, err, apierrors.ReasonBadRequest)
}

// TestListTooLargeResourceVersion: a not-older-than list at a revision the
// store has not reached answers as kube-apiserver does, after giving the
// store a moment: 504 Timeout, retry after 1 s, cause
// ResourceVersionTooLarge; never older data.
func TestListTooLargeResourceVersion(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	created, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("a", nil)})
	if err != nil {
		t.Fatal(err)
	}
	rv, _ := strconv.ParseInt(created.GetConfigMap().GetMetadata().GetResourceVersion(), 10, 64)
	future := strconv.FormatInt(rv+1_000_000, 10)
	for _, match := range []string{"", "NotOlderThan"} {
		_, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default", ResourceVersion: future, ResourceVersionMatch: match})
		se := apierrors.FromError(err)
		if se == nil || se.Reason != apierrors.ReasonTimeout || se.Code != 504 || se.RetryAfterSeconds != 1 {
			t.Fatalf("match %q: got %v (%+v), want 504 Timeout retrying after 1 s", match, err, se)
		}
		if len(se.Causes) != 1 || se.Causes[0].Type != apierrors.CauseResourceVersionTooLarge ||
			!strings.HasPrefix(se.Message, "Timeout: Too large resource version: "+future+", current: ") {
			t.Errorf("match %q: got %q causes %+v", match, se.Message, se.Causes)
		}
	}
	// The revision it was created at is served.
	l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default", ResourceVersion: created.GetConfigMap().GetMetadata().GetResourceVersion(), ResourceVersionMatch: "NotOlderThan"})
	if err != nil || len(l.GetList().GetItems()) != 1 {
		t.Fatalf("list at the create's revision: %v, %d items", err, len(l.GetList().GetItems()))
	}
}

// TestUIDIsAPrecondition: an update or status update naming another uid is
// refused with kube-apiserver's Conflict and changes nothing; one without a
// uid keeps the stored one.
func TestUIDIsAPrecondition(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	created, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("u", nil)})
	if err != nil {
		t.Fatal(err)
	}
	orig := created.GetConfigMap()
	uid := orig.GetMetadata().GetUid()

	other := proto.Clone(orig).(*corev1.ConfigMap)
	other.Metadata.Uid = "00000000-0000-4000-8000-000000000001"
	other.Metadata.ResourceVersion = ""
	other.Data = map[string]string{"changed": "yes"}
	_, err = e.cms.UpdateConfigMap(ctx, &corev1.UpdateConfigMapRequest{Namespace: "default", Name: "u", ConfigMap: other})
	wantReason(t, err, apierrors.ReasonConflict)
	want := `Operation cannot be fulfilled on configmaps "u": StorageError: invalid object, Code: 4, Key: /registry/configmaps/default/u, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: 00000000-0000-4000-8000-000000000001, UID in object meta: ` + uid
	if se := apierrors.FromError(err); se.Message != want {
		t.Errorf("got  %s\nwant %s", se.Message, want)
	}

	p := mustCreatePod(t, e, testPod("default", "u"))
	ps := proto.Clone(p).(*corev1.Pod)
	ps.Metadata.Uid, ps.Metadata.ResourceVersion = "00000000-0000-4000-8000-000000000002", ""
	ps.Status.Phase = "Running"
	_, err = e.pods.UpdatePodStatus(ctx, &corev1.UpdatePodStatusRequest{Namespace: "default", Name: "u", Pod: ps})
	wantReason(t, err, apierrors.ReasonConflict)

	got, err := e.cms.GetConfigMap(ctx, &corev1.GetConfigMapRequest{Namespace: "default", Name: "u"})
	if err != nil || got.GetConfigMap().GetData()["changed"] != "" {
		t.Fatalf("after the refused update: %v %v", got, err)
	}
	none := proto.Clone(orig).(*corev1.ConfigMap)
	none.Metadata.Uid, none.Metadata.ResourceVersion = "", ""
	none.Data = map[string]string{"changed": "yes"}
	u, err := e.cms.UpdateConfigMap(ctx, &corev1.UpdateConfigMapRequest{Namespace: "default", Name: "u", ConfigMap: none})
	if err != nil || u.GetConfigMap().GetMetadata().GetUid() != uid {
		t.Fatalf("update without a uid: %v, uid %q want %q", err, u.GetConfigMap().GetMetadata().GetUid(), uid)
	}
}
