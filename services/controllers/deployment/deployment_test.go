// This file holds the Deployment controller's unit tests: surge and
// unavailability fenceposts, the pod-template hash (Kubernetes' own, checked
// against golden values), rolling updates, the progress deadline, and
// proportional scaling.

package deployment

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/apimachinery/pkg/util/rand"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/fakeapi"
)

func ios(s string) *metav1.IntOrString {
	return &metav1.IntOrString{Value: &metav1.IntOrString_StrVal{StrVal: s}}
}
func ioi(i int32) *metav1.IntOrString {
	return &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: i}}
}

func TestResolveFenceposts(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		surge, unavail         *metav1.IntOrString
		replicas               int32
		wantSurge, wantUnavail int32
	}{
		{name: "25% of 10: surge rounds up, unavailable down", surge: ios("25%"), unavail: ios("25%"), replicas: 10, wantSurge: 3, wantUnavail: 2},
		{name: "25% of 2 leaves unavailable 0", surge: ios("25%"), unavail: ios("25%"), replicas: 2, wantSurge: 1, wantUnavail: 0},
		{name: "ints as given", surge: ioi(2), unavail: ioi(1), replicas: 10, wantSurge: 2, wantUnavail: 1},
		{name: "both zero makes unavailable 1", surge: ioi(0), unavail: ios("0%"), replicas: 10, wantSurge: 0, wantUnavail: 1},
		{name: "100%", surge: ios("100%"), unavail: ios("100%"), replicas: 3, wantSurge: 3, wantUnavail: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, u, err := ResolveFenceposts(tc.surge, tc.unavail, tc.replicas)
			if err != nil {
				t.Fatal(err)
			}
			if s != tc.wantSurge || u != tc.wantUnavail {
				t.Errorf("got surge %d unavailable %d, want %d %d", s, u, tc.wantSurge, tc.wantUnavail)
			}
		})
	}
}

func template(image string) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: image}}}}
}

func TestTemplateHash(t *testing.T) {
	a, b := TemplateHash(template("x:1"), nil), TemplateHash(template("x:1"), nil)
	if a != b {
		t.Errorf("got hashes %q and %q for equal templates, want equal", a, b)
	}
	if c := TemplateHash(template("x:2"), nil); c == a {
		t.Errorf("got the same hash %q for different images", c)
	}
	if c := TemplateHash(template("x:1"), proto.Int32(1)); c == a {
		t.Errorf("collision count did not change the hash")
	}
	withHash := template("x:1")
	withHash.Metadata.Labels[HashLabel] = a
	if !EqualIgnoreHash(withHash, template("x:1")) {
		t.Errorf("EqualIgnoreHash: templates differing only by %s compare unequal", HashLabel)
	}
}

func deploy(replicas int32, image string) *appsv1.Deployment {
	return &appsv1.Deployment{
		Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "d", Uid: "d-uid", Generation: 1, Annotations: map[string]string{RevisionAnnotation: "1"}},
		Spec: &appsv1.DeploymentSpec{Replicas: proto.Int32(replicas), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
			Template: template(image), RevisionHistoryLimit: proto.Int32(10),
			Strategy: &appsv1.DeploymentStrategy{Type: "RollingUpdate", RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ioi(1), MaxUnavailable: ioi(1)}}},
	}
}

func replicaSet(d *appsv1.Deployment, image, rev string, replicas, available int32) *appsv1.ReplicaSet {
	t := true
	tmpl := template(image)
	h := TemplateHash(tmpl, nil)
	tmpl.Metadata.Labels[HashLabel] = h
	return &appsv1.ReplicaSet{
		Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "d-" + h, Uid: "uid-" + image, Annotations: map[string]string{RevisionAnnotation: rev},
			OwnerReferences: []*metav1.OwnerReference{{Kind: "Deployment", Name: "d", Uid: d.Metadata.Uid, Controller: &t}}},
		Spec:   &appsv1.ReplicaSetSpec{Replicas: proto.Int32(replicas), Template: tmpl},
		Status: &appsv1.ReplicaSetStatus{Replicas: replicas, ReadyReplicas: available, AvailableReplicas: available},
	}
}

func TestReconcileRollingUpdate(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *appsv1.Deployment
		rss  func(d *appsv1.Deployment) []*appsv1.ReplicaSet
		// want: replicaset writes as "verb name replicas".
		want []string
	}{
		{
			name: "new template: new replicaset at maxSurge, old down by maxUnavailable",
			d:    deploy(4, "x:2"),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{replicaSet(d, "x:1", "1", 4, 4)}
			},
			want: []string{"create new 1", "update old 3"},
		},
		{
			name: "surge used, new not available: old scaled down by maxUnavailable",
			d:    deploy(4, "x:2"),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{replicaSet(d, "x:1", "1", 4, 4), replicaSet(d, "x:2", "2", 1, 0)}
			},
			want: []string{"update old 3"},
		},
		{
			name: "nothing available to spare: wait",
			d:    deploy(4, "x:2"),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{replicaSet(d, "x:1", "1", 3, 3), replicaSet(d, "x:2", "2", 2, 0)}
			},
			want: nil,
		},
		{
			// The old ReplicaSet was scaled 3 -> 2 and one pod deleted, but
			// its status still counts 3 available (its controller crashed
			// before writing it): only 2 of them can be, so 4 are available
			// in all and one more may go, not two.
			name: "stale old status: count at most its replicas available",
			d:    deploy(4, "x:2"),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				old := replicaSet(d, "x:1", "1", 2, 3)
				old.Status.Replicas = 3
				return []*appsv1.ReplicaSet{old, replicaSet(d, "x:2", "2", 3, 2)}
			},
			want: []string{"update old 1"},
		},
		{
			name: "scale up a finished rollout within the surge",
			d:    deploy(6, "x:1"),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{replicaSet(d, "x:1", "1", 4, 4)}
			},
			want: []string{"update new 6"},
		},
		{
			name: "scale down a finished rollout",
			d:    deploy(2, "x:1"),
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{replicaSet(d, "x:1", "1", 4, 4)}
			},
			want: []string{"update new 2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := &fakeapi.Client[*appsv1.Deployment]{}
			rsc := &fakeapi.Client[*appsv1.ReplicaSet]{}
			dInf := fakeapi.Informer([]*appsv1.Deployment{tc.d}, client.InformerOptions[*appsv1.Deployment]{})
			rsInf := fakeapi.Informer(tc.rss(tc.d), client.InformerOptions[*appsv1.ReplicaSet]{})
			c := New(Config{Deployments: ds, ReplicaSets: rsc, DInformer: dInf, RSInformer: rsInf})
			t.Cleanup(c.queue.ShutDown) // New starts the queue; only Run would stop it
			fakeapi.Start(t, dInf, rsInf)
			if _, err := c.Reconcile(context.Background(), "ns/d"); err != nil {
				t.Fatal(err)
			}
			var got []string
			newName := "d-" + TemplateHash(tc.d.Spec.Template, nil)
			for _, a := range rsc.Actions {
				rs := a.Obj.(*appsv1.ReplicaSet)
				which := "old"
				if rs.GetMetadata().GetName() == newName {
					which = "new"
				}
				got = append(got, a.Verb+" "+which+" "+itoa(rs.GetSpec().GetReplicas()))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got replicaset writes %v, want %v", got, tc.want)
			}
		})
	}
}

func itoa(n int32) string { return string(rune('0' + n)) }

func TestProgressDeadline(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		lastUpdate time.Time
		wantReason string
		// wantRequeue is the wait asked for: a second past the deadline
		// while it is ahead.
		wantRequeue time.Duration
	}{
		{name: "stuck past the deadline", lastUpdate: base.Add(-11 * time.Minute), wantReason: "ProgressDeadlineExceeded"},
		{name: "stuck within the deadline", lastUpdate: base.Add(-time.Minute), wantReason: "ReplicaSetUpdated", wantRequeue: 9*time.Minute + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deploy(2, "x:1")
			d.Spec.ProgressDeadlineSeconds = proto.Int32(600)
			rs := replicaSet(d, "x:1", "1", 2, 0) // pods never become available
			d.Status = &appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, UnavailableReplicas: 2,
				Conditions: []*appsv1.DeploymentCondition{
					{Type: "Available", Status: "False", Reason: "MinimumReplicasUnavailable", Message: "Deployment does not have minimum availability.", LastTransitionTime: timestamppb.New(tc.lastUpdate), LastUpdateTime: timestamppb.New(tc.lastUpdate)},
					{Type: "Progressing", Status: "True", Reason: "ReplicaSetUpdated", Message: "x", LastTransitionTime: timestamppb.New(tc.lastUpdate), LastUpdateTime: timestamppb.New(tc.lastUpdate)},
				}}
			ds := &fakeapi.Client[*appsv1.Deployment]{}
			dInf := fakeapi.Informer([]*appsv1.Deployment{d}, client.InformerOptions[*appsv1.Deployment]{})
			rsInf := fakeapi.Informer([]*appsv1.ReplicaSet{rs}, client.InformerOptions[*appsv1.ReplicaSet]{})
			c := New(Config{Deployments: ds, ReplicaSets: &fakeapi.Client[*appsv1.ReplicaSet]{}, DInformer: dInf, RSInformer: rsInf})
			t.Cleanup(c.queue.ShutDown) // New starts the queue; only Run would stop it
			c.now = func() time.Time { return base }
			fakeapi.Start(t, dInf, rsInf)
			res, err := c.Reconcile(context.Background(), "ns/d")
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("asked to run again after %v, want %v", res.RequeueAfter, tc.wantRequeue)
			}
			reason := "ReplicaSetUpdated" // unchanged if no status write
			for _, a := range ds.Actions {
				if a.Verb == "updateStatus" {
					for _, cond := range a.Obj.(*appsv1.Deployment).GetStatus().GetConditions() {
						if cond.GetType() == "Progressing" {
							reason = cond.GetReason()
						}
					}
				}
			}
			if reason != tc.wantReason {
				t.Errorf("got Progressing reason %q, want %q", reason, tc.wantReason)
			}
		})
	}
}

// sized is an active ReplicaSet of d with replicas pods, created at minute
// age, carrying the max-replicas annotation maxAnn ("" for none).
func sized(name string, replicas int32, minute int, maxAnn string) *appsv1.ReplicaSet {
	a := map[string]string{}
	if maxAnn != "" {
		a[MaxReplicasAnnotation] = maxAnn
	}
	return &appsv1.ReplicaSet{
		Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: a,
			CreationTimestamp: timestamppb.New(time.Date(2026, 1, 1, 0, minute, 0, 0, time.UTC))},
		Spec: &appsv1.ReplicaSetSpec{Replicas: proto.Int32(replicas)},
	}
}

func TestProportionalSizes(t *testing.T) {
	withSurge := func(replicas, surge, unavail, statusReplicas int32) *appsv1.Deployment {
		d := deploy(replicas, "x:2")
		d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: ioi(surge), MaxUnavailable: ioi(unavail)}
		d.Status = &appsv1.DeploymentStatus{Replicas: statusReplicas}
		return d
	}
	for _, tc := range []struct {
		name string
		d    *appsv1.Deployment
		rss  []*appsv1.ReplicaSet
		want map[string]int32
	}{
		{
			// Kubernetes' documentation example: 10 replicas, maxSurge 3,
			// a rollout stuck at old 8 + new 5, scaled to 15: 3 more to
			// the old ReplicaSet, 2 to the new.
			name: "scale up 10 to 15 during a stuck rollout",
			d:    withSurge(15, 3, 2, 13),
			rss:  []*appsv1.ReplicaSet{sized("old", 8, 0, "13"), sized("new", 5, 1, "13")},
			want: map[string]int32{"old": 11, "new": 7},
		},
		{
			name: "and back down to 10",
			d:    withSurge(10, 3, 2, 18),
			rss:  []*appsv1.ReplicaSet{sized("old", 11, 0, "18"), sized("new", 7, 1, "18")},
			want: map[string]int32{"old": 8, "new": 5},
		},
		{
			name: "to zero: every ReplicaSet to zero",
			d:    withSurge(0, 3, 2, 13),
			rss:  []*appsv1.ReplicaSet{sized("old", 8, 0, "13"), sized("new", 5, 1, "13")},
			want: map[string]int32{"old": 0, "new": 0},
		},
		{
			name: "no annotation: status.replicas is the base",
			d:    withSurge(20, 0, 1, 10),
			rss:  []*appsv1.ReplicaSet{sized("old", 6, 0, ""), sized("new", 4, 1, "")},
			want: map[string]int32{"old": 12, "new": 8},
		},
		{
			name: "equal sizes growing: the newer gets the odd pod",
			d:    withSurge(7, 0, 1, 6),
			rss:  []*appsv1.ReplicaSet{sized("old", 3, 0, "6"), sized("new", 3, 1, "6")},
			want: map[string]int32{"old": 3, "new": 4},
		},
		{
			name: "equal sizes shrinking: the older loses the odd pod",
			d:    withSurge(5, 0, 1, 6),
			rss:  []*appsv1.ReplicaSet{sized("old", 3, 0, "6"), sized("new", 3, 1, "6")},
			want: map[string]int32{"old": 2, "new": 3},
		},
		{
			name: "three ReplicaSets: the largest first, then the newer",
			d:    withSurge(11, 1, 0, 10),
			rss:  []*appsv1.ReplicaSet{sized("a", 3, 0, "10"), sized("b", 3, 1, "10"), sized("c", 4, 2, "10")},
			want: map[string]int32{"a": 3, "b": 4, "c": 5},
		},
		{
			name: "what rounding leaves goes to the first in order",
			d:    withSurge(4, 0, 1, 3),
			rss:  []*appsv1.ReplicaSet{sized("a", 1, 0, "3"), sized("b", 1, 1, "3"), sized("c", 1, 2, "3")},
			want: map[string]int32{"a": 1, "b": 1, "c": 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ProportionalSizes(tc.d, tc.rss)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got sizes %v, want %v", got, tc.want)
			}
		})
	}
}

// TestReconcileScalesProportionally: a Deployment scaled in the middle of
// a rollout resizes both ReplicaSets in proportion (and records the new
// replicas in their annotations) instead of taking a rollout step.
func TestReconcileScalesProportionally(t *testing.T) {
	annotate := func(rs *appsv1.ReplicaSet, desired, maxR string, minute int) *appsv1.ReplicaSet {
		rs.Metadata.Annotations[DesiredReplicasAnnotation] = desired
		rs.Metadata.Annotations[MaxReplicasAnnotation] = maxR
		rs.Metadata.CreationTimestamp = timestamppb.New(time.Date(2026, 1, 1, 0, minute, 0, 0, time.UTC))
		return rs
	}
	for _, tc := range []struct {
		name     string
		replicas int32
		rss      func(d *appsv1.Deployment) []*appsv1.ReplicaSet
		want     []string // "verb old|new replicas desired max"
	}{
		{
			name: "scaled up 10 to 15 with old 8 and new 5 (none available)", replicas: 15,
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{annotate(replicaSet(d, "x:1", "1", 8, 8), "10", "13", 0), annotate(replicaSet(d, "x:2", "2", 5, 0), "10", "13", 1)}
			},
			want: []string{"update old 11 15 18", "update new 7 15 18"},
		},
		{
			name: "not a scaling event: a rollout step as before", replicas: 10,
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{annotate(replicaSet(d, "x:1", "1", 10, 10), "10", "13", 0)}
			},
			want: []string{"create new 3 10 13", "update old 8 10 13"},
		},
		{
			name: "one active ReplicaSet takes all", replicas: 4,
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{annotate(replicaSet(d, "x:1", "1", 0, 0), "10", "13", 0), annotate(replicaSet(d, "x:2", "2", 10, 10), "10", "13", 1)}
			},
			want: []string{"update new 4 4 7"},
		},
		{
			name: "saturated new ReplicaSet: old ones to zero", replicas: 10,
			rss: func(d *appsv1.Deployment) []*appsv1.ReplicaSet {
				return []*appsv1.ReplicaSet{annotate(replicaSet(d, "x:1", "1", 2, 2), "12", "15", 0), annotate(replicaSet(d, "x:2", "2", 10, 10), "10", "13", 1)}
			},
			want: []string{"update old 0 10 13"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deploy(tc.replicas, "x:2")
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: ioi(3), MaxUnavailable: ioi(2)}
			ds := &fakeapi.Client[*appsv1.Deployment]{}
			rsc := &fakeapi.Client[*appsv1.ReplicaSet]{}
			dInf := fakeapi.Informer([]*appsv1.Deployment{d}, client.InformerOptions[*appsv1.Deployment]{})
			rsInf := fakeapi.Informer(tc.rss(d), client.InformerOptions[*appsv1.ReplicaSet]{})
			c := New(Config{Deployments: ds, ReplicaSets: rsc, DInformer: dInf, RSInformer: rsInf})
			t.Cleanup(c.queue.ShutDown) // New starts the queue; only Run would stop it
			fakeapi.Start(t, dInf, rsInf)
			if _, err := c.Reconcile(context.Background(), "ns/d"); err != nil {
				t.Fatal(err)
			}
			var got []string
			newName := "d-" + TemplateHash(d.Spec.Template, nil)
			for _, a := range rsc.Actions {
				rs := a.Obj.(*appsv1.ReplicaSet)
				which := "old"
				if rs.GetMetadata().GetName() == newName {
					which = "new"
				}
				an := rs.GetMetadata().GetAnnotations()
				got = append(got, fmt.Sprintf("%s %s %d %s %s", a.Verb, which, rs.GetSpec().GetReplicas(), an[DesiredReplicasAnnotation], an[MaxReplicasAnnotation]))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got replicaset writes %v, want %v", got, tc.want)
			}
		})
	}
}

// kubernetesHash is Kubernetes' controller.ComputeHash on a k8s.io/api
// template, written out here as the reference.
func kubernetesHash(t *k8scorev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	_, _ = io.WriteString(h, dump.ForHash(*t))
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		_, _ = h.Write(b)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// TestTemplateHashIsKubernetes: our hash of a template read from
// Kubernetes JSON equals Kubernetes' hash of the same JSON read into
// k8s.io/api's types, with and without a collision count.
func TestTemplateHashIsKubernetes(t *testing.T) {
	for _, tc := range []struct{ name, json string }{
		{"minimal", `{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"nginx:1.27"}]}}`},
		{"defaulted, with resources, ports, env, probes and tolerations", `{
			"metadata":{"labels":{"app":"web","tier":"front"},"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-11-22T10:00:00Z"}},
			"spec":{"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","schedulerName":"default-scheduler",
				"nodeSelector":{"disk":"ssd"},
				"tolerations":[{"key":"dedicated","operator":"Equal","value":"gpu","effect":"NoSchedule"},{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],
				"containers":[{"name":"web","image":"nginx:1.27","imagePullPolicy":"IfNotPresent","args":["-g","daemon off;"],
					"ports":[{"name":"http","containerPort":80,"protocol":"TCP"}],
					"env":[{"name":"MODE","value":"prod"}],
					"resources":{"requests":{"cpu":"100m","memory":"128Mi"},"limits":{"memory":"256Mi"}},
					"readinessProbe":{"httpGet":{"path":"/","port":80},"periodSeconds":5,"timeoutSeconds":1,"successThreshold":1,"failureThreshold":3},
					"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kt k8scorev1.PodTemplateSpec
			if err := json.Unmarshal([]byte(tc.json), &kt); err != nil {
				t.Fatal(err)
			}
			var pt corev1.PodTemplateSpec
			if err := kubejson.Unmarshal([]byte(tc.json), &pt, kubejson.Options{}); err != nil {
				t.Fatal(err)
			}
			for _, cc := range []*int32{nil, proto.Int32(0), proto.Int32(3)} {
				if got, want := TemplateHash(&pt, cc), kubernetesHash(&kt, cc); got != want {
					t.Errorf("collisionCount %v: got hash %q, want Kubernetes' %q", cc, got, want)
				}
			}
		})
	}
}

// TestTemplateHashGolden pins the hash of a fixed template, so that a
// change of the algorithm (or of what enters it) shows as a failing test
// rather than as every Deployment rolling out again after an upgrade.
func TestTemplateHashGolden(t *testing.T) {
	if got, want := TemplateHash(template("x:1"), nil), "55dd4d4cd"; got != want {
		t.Errorf("got hash %q for the fixed template, want %q", got, want)
	}
}
