// This file holds the ReplicaSet controller's tests: reconcile against the
// cache, expectations holding back a second sync, and pod creates in
// slow-start batches.

package replicaset

import (
	"context"
	"errors"
	"slices"
	"sort"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
	"github.com/kplane/kplane/services/controllers/internal/fakeapi"
)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func rs(replicas int32) *appsv1.ReplicaSet {
	lbl := map[string]string{"app": "a"}
	return &appsv1.ReplicaSet{
		Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "rs", Uid: "rs-uid", Generation: 2},
		Spec: &appsv1.ReplicaSetSpec{Replicas: proto.Int32(replicas), Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: lbl}, Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "i"}}}}},
	}
}

type podOpt func(*corev1.Pod)

func scheduled(p *corev1.Pod) { p.Spec.NodeName = "n1" }
func ready(p *corev1.Pod) {
	p.Status = &corev1.PodStatus{Phase: "Running", Conditions: []*corev1.PodCondition{{Type: "Ready", Status: "True", LastTransitionTime: timestamppb.New(base)}}}
}
func orphan(p *corev1.Pod) { p.Metadata.OwnerReferences = nil }

func pod(name string, ageSec int, opts ...podOpt) *corev1.Pod {
	t := true
	p := &corev1.Pod{
		Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: name, Uid: name + "-uid", Labels: map[string]string{"app": "a"},
			CreationTimestamp: timestamppb.New(base.Add(-time.Duration(ageSec) * time.Second)),
			OwnerReferences:   []*metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Uid: "rs-uid", Controller: &t}}},
		Spec: &corev1.PodSpec{},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func TestReconcile(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rs         *appsv1.ReplicaSet
		pods       []*corev1.Pod
		failCreate bool
		// want are the pod writes; wantStatus the status written (nil: none).
		want       []string
		wantStatus *appsv1.ReplicaSetStatus
		wantErr    bool
	}{
		{
			name: "creates the missing pods with the replicaset as controller",
			rs:   rs(3),
			want: []string{"create ns/rs-*", "create ns/rs-*", "create ns/rs-*"},
			// Status reflects the cache; the new pods show up through the informer.
			wantStatus: &appsv1.ReplicaSetStatus{ObservedGeneration: 2},
		},
		{
			name:       "deletes unscheduled, then not ready pods first",
			rs:         rs(1),
			pods:       []*corev1.Pod{pod("ready-old", 100, scheduled, ready), pod("unready", 50, scheduled), pod("unscheduled", 10)},
			want:       []string{"delete ns/unready", "delete ns/unscheduled"},
			wantStatus: &appsv1.ReplicaSetStatus{Replicas: 3, FullyLabeledReplicas: 3, ReadyReplicas: 1, AvailableReplicas: 1, ObservedGeneration: 2},
		},
		{
			name:       "adopts a matching orphan instead of creating",
			rs:         rs(1),
			pods:       []*corev1.Pod{pod("stray", 10, orphan)},
			want:       []string{"update ns/stray"},
			wantStatus: &appsv1.ReplicaSetStatus{Replicas: 1, FullyLabeledReplicas: 1, ObservedGeneration: 2},
		},
		{
			name:       "in sync: only status",
			rs:         rs(2),
			pods:       []*corev1.Pod{pod("a", 10, scheduled, ready), pod("b", 10, scheduled, ready)},
			wantStatus: &appsv1.ReplicaSetStatus{Replicas: 2, FullyLabeledReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, ObservedGeneration: 2},
		},
		{
			name:       "failed create stops slow start after the first batch",
			rs:         rs(8),
			failCreate: true,
			want:       nil,
			wantErr:    true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := &fakeapi.Client[*corev1.Pod]{}
			creates := 0
			if tc.failCreate {
				pods.Fail = func(verb, _ string) error {
					if verb == "create" {
						creates++
						return errors.New("quota exceeded")
					}
					return nil
				}
			}
			rss := &fakeapi.Client[*appsv1.ReplicaSet]{}
			podInf := fakeapi.Informer(tc.pods, client.InformerOptions[*corev1.Pod]{})
			rsInf := fakeapi.Informer([]*appsv1.ReplicaSet{tc.rs}, client.InformerOptions[*appsv1.ReplicaSet]{})
			c := New(Config{Pods: pods, ReplicaSets: rss, PodInformer: podInf, RSInformer: rsInf})
			t.Cleanup(c.queue.ShutDown) // New starts the queue; only Run would stop it
			c.now = func() time.Time { return base }
			fakeapi.Start(t, podInf, rsInf)
			_, err := c.Reconcile(context.Background(), "ns/rs")
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %v", err, tc.wantErr)
			}
			got := pods.Verbs()
			sort.Strings(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got pod writes %v, want %v", got, tc.want)
			}
			for _, a := range pods.Actions {
				if a.Verb != "create" && a.Verb != "update" {
					continue
				}
				ref := ctrl.ControllerRef(a.Obj.(*corev1.Pod))
				if ref == nil || ref.GetUid() != "rs-uid" || !ref.GetBlockOwnerDeletion() {
					t.Errorf("%s: got controller ref %v, want rs-uid with blockOwnerDeletion", a, ref)
				}
			}
			if tc.failCreate && creates != 1 {
				t.Errorf("got %d create attempts, want 1 (slow start)", creates)
			}
			if tc.wantStatus == nil {
				return
			}
			var st *appsv1.ReplicaSetStatus
			for _, a := range rss.Actions {
				if a.Verb == "updateStatus" {
					st = a.Obj.(*appsv1.ReplicaSet).GetStatus()
				}
			}
			if !proto.Equal(st, tc.wantStatus) {
				t.Errorf("got status %v, want %v", st, tc.wantStatus)
			}
		})
	}
}

// TestExpectationsHoldBackASecondSync: until the informer shows the pods a
// sync created, another sync creates nothing (no extra pods on a slow watch).
func TestExpectationsHoldBackASecondSync(t *testing.T) {
	pods := &fakeapi.Client[*corev1.Pod]{}
	podInf := fakeapi.Informer[*corev1.Pod](nil, client.InformerOptions[*corev1.Pod]{})
	rsInf := fakeapi.Informer([]*appsv1.ReplicaSet{rs(2)}, client.InformerOptions[*appsv1.ReplicaSet]{})
	c := New(Config{Pods: pods, ReplicaSets: &fakeapi.Client[*appsv1.ReplicaSet]{}, PodInformer: podInf, RSInformer: rsInf})
	t.Cleanup(c.queue.ShutDown) // New starts the queue; only Run would stop it
	fakeapi.Start(t, podInf, rsInf)
	for range 3 {
		if _, err := c.Reconcile(context.Background(), "ns/rs"); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(pods.Verbs()); got != 2 {
		t.Errorf("got %d creates over three syncs, want 2", got)
	}
}

func TestSlowStartBatches(t *testing.T) {
	for _, tc := range []struct {
		name      string
		count     int
		failAfter int // calls that succeed before every call fails (-1: none fail)
		wantDone  int
		wantCalls int
	}{
		{name: "all succeed", count: 10, failAfter: -1, wantDone: 10, wantCalls: 10},
		{name: "first fails", count: 10, failAfter: 0, wantDone: 0, wantCalls: 1},
		{name: "third batch fails", count: 20, failAfter: 3, wantDone: 3, wantCalls: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := make(chan struct{}, 100)
			var okLeft = make(chan struct{}, 100)
			for range max(tc.failAfter, 0) {
				okLeft <- struct{}{}
			}
			done, err := slowStart(context.Background(), tc.count, 1, func(context.Context) error {
				calls <- struct{}{}
				if tc.failAfter < 0 {
					return nil
				}
				select {
				case <-okLeft:
					return nil
				default:
					return errors.New("fail")
				}
			})
			if done != tc.wantDone || len(calls) != tc.wantCalls {
				t.Errorf("got %d done in %d calls (err %v), want %d in %d", done, len(calls), err, tc.wantDone, tc.wantCalls)
			}
		})
	}
}
