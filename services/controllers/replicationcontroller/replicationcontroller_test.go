// This file holds the ReplicationController controller's reconcile tests
// over an in-memory fake API: the shared ReplicaSet logic acting on RCs.
package replicationcontroller

import (
	"context"
	"errors"
	"slices"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
	"github.com/kplane/kplane/services/controllers/internal/fakeapi"
)

func rc(replicas int32) *corev1.ReplicationController {
	lbl := map[string]string{"app": "a"}
	return &corev1.ReplicationController{
		Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "rc", Uid: "rc-uid", Generation: 3},
		Spec: &corev1.ReplicationControllerSpec{Replicas: proto.Int32(replicas), Selector: lbl,
			Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: lbl}, Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "i"}}}}},
	}
}

func pod(name string, lbl map[string]string, owned bool) *corev1.Pod {
	p := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: name, Uid: name + "-uid", Labels: lbl}, Spec: &corev1.PodSpec{}}
	if owned {
		t := true
		p.Metadata.OwnerReferences = []*metav1.OwnerReference{{ApiVersion: "v1", Kind: "ReplicationController", Name: "rc", Uid: "rc-uid", Controller: &t}}
	}
	return p
}

// TestReconcile runs the shared ReplicaSet logic over an RC: pod writes,
// ownerReferences naming the RC, and the status written to the RC.
func TestReconcile(t *testing.T) {
	match := map[string]string{"app": "a"}
	for _, tc := range []struct {
		name       string
		rc         *corev1.ReplicationController
		pods       []*corev1.Pod
		fail       string // pod verb that fails
		want       []string
		wantStatus *corev1.ReplicationControllerStatus
	}{
		{
			name:       "creates pods controlled by the RC",
			rc:         rc(2),
			want:       []string{"create ns/rc-*", "create ns/rc-*"},
			wantStatus: &corev1.ReplicationControllerStatus{ObservedGeneration: 3},
		},
		{
			name:       "adopts a matching orphan, releases a relabelled pod",
			rc:         rc(1),
			pods:       []*corev1.Pod{pod("stray", match, false), pod("moved", map[string]string{"app": "b"}, true)},
			want:       []string{"update ns/moved", "update ns/stray"},
			wantStatus: &corev1.ReplicationControllerStatus{Replicas: 1, FullyLabeledReplicas: 1, ObservedGeneration: 3},
		},
		{
			name: "a failed create sets ReplicaFailure FailedCreate",
			rc:   rc(1),
			fail: "create",
			want: nil,
			wantStatus: &corev1.ReplicationControllerStatus{ObservedGeneration: 3, Conditions: []*corev1.ReplicationControllerCondition{
				{Type: "ReplicaFailure", Status: "True", Reason: "FailedCreate"}}},
		},
		{
			name: "a failed delete sets ReplicaFailure FailedDelete",
			rc:   rc(0),
			pods: []*corev1.Pod{pod("a", match, true)},
			fail: "delete",
			want: nil,
			wantStatus: &corev1.ReplicationControllerStatus{Replicas: 1, FullyLabeledReplicas: 1, ObservedGeneration: 3, Conditions: []*corev1.ReplicationControllerCondition{
				{Type: "ReplicaFailure", Status: "True", Reason: "FailedDelete"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := &fakeapi.Client[*corev1.Pod]{}
			if tc.fail != "" {
				pods.Fail = func(verb, _ string) error {
					if verb == tc.fail {
						return errors.New("forbidden: exceeded quota")
					}
					return nil
				}
			}
			rcs := &fakeapi.Client[*corev1.ReplicationController]{}
			podInf := fakeapi.Informer(tc.pods, client.InformerOptions[*corev1.Pod]{})
			rcInf := fakeapi.Informer([]*corev1.ReplicationController{tc.rc}, client.InformerOptions[*corev1.ReplicationController]{})
			c := New(Config{Pods: pods, ReplicationControllers: rcs, PodInformer: podInf, RCInformer: rcInf})
			fakeapi.Start(t, podInf, rcInf)
			_, err := c.Reconcile(context.Background(), "ns/rc")
			if (err != nil) != (tc.fail != "") {
				t.Fatalf("got error %v, want an error: %v", err, tc.fail != "")
			}
			got := pods.Verbs()
			sort.Strings(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got pod writes %v, want %v", got, tc.want)
			}
			for _, a := range pods.Actions {
				p := a.Obj.(*corev1.Pod)
				ref := ctrl.ControllerRef(p)
				switch {
				case a.Verb == "update" && p.GetMetadata().GetName() == "moved":
					if len(p.GetMetadata().GetOwnerReferences()) != 0 {
						t.Errorf("released pod keeps owners %v", p.GetMetadata().GetOwnerReferences())
					}
				case a.Verb == "create" || a.Verb == "update":
					if ref == nil || ref.GetUid() != "rc-uid" || ref.GetKind() != "ReplicationController" || ref.GetApiVersion() != "v1" || !ref.GetBlockOwnerDeletion() {
						t.Errorf("%s: got controller ref %v, want the RC (v1 ReplicationController) with blockOwnerDeletion", a, ref)
					}
				}
			}
			var st *corev1.ReplicationControllerStatus
			for _, a := range rcs.Actions {
				if a.Verb == "updateStatus" {
					st = proto.Clone(a.Obj.(*corev1.ReplicationController).GetStatus()).(*corev1.ReplicationControllerStatus)
				}
			}
			for _, cond := range st.GetConditions() {
				if cond.GetLastTransitionTime() == nil || cond.GetMessage() == "" {
					t.Errorf("condition %v: want a transition time and the error as message", cond)
				}
				cond.LastTransitionTime, cond.Message = nil, ""
			}
			if !proto.Equal(st, tc.wantStatus) {
				t.Errorf("got status %v, want %v", st, tc.wantStatus)
			}
		})
	}
}

// TestConversionRoundTrip: an RC's status survives the trip through the
// ReplicaSet the controller reasons about, so an unchanged status is not
// written again.
func TestConversionRoundTrip(t *testing.T) {
	r := rc(2)
	r.Status = &corev1.ReplicationControllerStatus{Replicas: 2, FullyLabeledReplicas: 2, ReadyReplicas: 1, AvailableReplicas: 1, ObservedGeneration: 3,
		Conditions: []*corev1.ReplicationControllerCondition{{Type: "ReplicaFailure", Status: "True", Reason: "FailedCreate", Message: "m"}}}
	rs := ToReplicaSet(r)
	if got := fromReplicaSetStatus(rs.GetStatus()); !proto.Equal(got, r.GetStatus()) {
		t.Errorf("status round trip: got %v, want %v", got, r.GetStatus())
	}
	if rs.GetSpec().GetSelector().GetMatchLabels()["app"] != "a" || rs.GetSpec().GetReplicas() != 2 || rs.GetMetadata().GetUid() != "rc-uid" {
		t.Errorf("converted: %v", rs)
	}
	rs.Spec.Template.Metadata.Labels["x"] = "y"
	if _, ok := r.GetSpec().GetTemplate().GetMetadata().GetLabels()["x"]; ok {
		t.Error("the converted ReplicaSet shares the RC's template")
	}
}
