// This file holds the disruption controller's reconcile tests over fixed
// informer caches and a fixed clock: disruptedPods entries counted until
// they are two minutes old and dropped after, maxUnavailable and
// percentages scaled (rounding up) against the controllers' scale, and no
// write when the status is already what it would be.
package disruption

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/fakeapi"
)

// noScales serves no scale subresource.
type noScales struct{}

func (noScales) GetScale(_ context.Context, _, _, _, name string) (*autoscalingv1.Scale, error) {
	return nil, apierrors.NewNotFound("", "scale", name)
}

func readyPod(name string) *corev1.Pod {
	return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": "web"},
		OwnerReferences: []*metav1.OwnerReference{{ApiVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", Uid: "rs-uid", Controller: proto.Bool(true)}}},
		Status: &corev1.PodStatus{Phase: "Running", Conditions: []*corev1.PodCondition{{Type: "Ready", Status: "True"}}}}
}

func TestReconcileStatus(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	pods := []*corev1.Pod{readyPod("a"), readyPod("b"), readyPod("c"), readyPod("d")}
	rs := &appsv1.ReplicaSet{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "rs", Uid: "rs-uid"}, Spec: &appsv1.ReplicaSetSpec{Replicas: proto.Int32(5)}}
	at := func(ago time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-ago)) }
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	intv := func(v int32) *metav1.IntOrString {
		return &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: v}}
	}
	pct := func(v string) *metav1.IntOrString {
		return &metav1.IntOrString{Value: &metav1.IntOrString_StrVal{StrVal: v}}
	}
	for _, tc := range []struct {
		name      string
		spec      *policyv1.PodDisruptionBudgetSpec
		disrupted map[string]*timestamppb.Timestamp
		want      *policyv1.PodDisruptionBudgetStatus
	}{
		{name: "minAvailable int: the pods there are", spec: &policyv1.PodDisruptionBudgetSpec{MinAvailable: intv(3), Selector: sel},
			want: &policyv1.PodDisruptionBudgetStatus{ExpectedPods: 4, CurrentHealthy: 4, DesiredHealthy: 3, DisruptionsAllowed: 1}},
		{name: "maxUnavailable percent of the scale, rounded up", spec: &policyv1.PodDisruptionBudgetSpec{MaxUnavailable: pct("30%"), Selector: sel},
			want: &policyv1.PodDisruptionBudgetStatus{ExpectedPods: 5, CurrentHealthy: 4, DesiredHealthy: 3, DisruptionsAllowed: 1}},
		{name: "minAvailable percent of the scale, rounded up", spec: &policyv1.PodDisruptionBudgetSpec{MinAvailable: pct("70%"), Selector: sel},
			want: &policyv1.PodDisruptionBudgetStatus{ExpectedPods: 5, CurrentHealthy: 4, DesiredHealthy: 4, DisruptionsAllowed: 0}},
		{name: "fresh and just-expiring entries kept, older dropped", spec: &policyv1.PodDisruptionBudgetSpec{MaxUnavailable: intv(2), Selector: sel},
			disrupted: map[string]*timestamppb.Timestamp{"a": at(time.Second), "b": at(DeletionTimeout), "c": at(DeletionTimeout + time.Second), "gone": at(time.Second)},
			want: &policyv1.PodDisruptionBudgetStatus{ExpectedPods: 5, CurrentHealthy: 3, DesiredHealthy: 3, DisruptionsAllowed: 0,
				DisruptedPods: map[string]*timestamppb.Timestamp{"a": at(time.Second), "b": at(DeletionTimeout)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pdb := &policyv1.PodDisruptionBudget{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 1}, Spec: tc.spec,
				Status: &policyv1.PodDisruptionBudgetStatus{DisruptedPods: tc.disrupted}}
			reconcile := func(pdb *policyv1.PodDisruptionBudget) []fakeapi.Action {
				t.Helper()
				pdbInf := fakeapi.Informer([]*policyv1.PodDisruptionBudget{pdb}, client.InformerOptions[*policyv1.PodDisruptionBudget]{})
				podInf := fakeapi.Informer(pods, client.InformerOptions[*corev1.Pod]{})
				rsInf := fakeapi.Informer([]*appsv1.ReplicaSet{rs}, client.InformerOptions[*appsv1.ReplicaSet]{})
				dInf := fakeapi.Informer([]*appsv1.Deployment{}, client.InformerOptions[*appsv1.Deployment]{})
				w := &fakeapi.Client[*policyv1.PodDisruptionBudget]{}
				c := New(Config{PDBs: w, Scales: noScales{}, PDBInformer: pdbInf, PodInformer: podInf, RSInformer: rsInf, DInformer: dInf,
					Now: func() time.Time { return now }})
				t.Cleanup(c.queue.ShutDown) // New starts the queue; only Run would stop it
				t.Cleanup(c.stale.ShutDown)
				fakeapi.Start(t, pdbInf, podInf, rsInf, dInf)
				if _, err := c.Reconcile(t.Context(), "ns/web"); err != nil {
					t.Fatal(err)
				}
				return w.Actions
			}
			actions := reconcile(pdb)
			if len(actions) != 1 {
				t.Fatalf("writes: got %v, want one status update", actions)
			}
			got := actions[0].Obj.(*policyv1.PodDisruptionBudget).GetStatus()
			tc.want.ObservedGeneration = 1
			conds := got.Conditions
			got = proto.Clone(got).(*policyv1.PodDisruptionBudgetStatus)
			got.Conditions = nil
			if !proto.Equal(got, tc.want) {
				t.Errorf("status: got %v, want %v", got, tc.want)
			}
			wantCond := "InsufficientPods"
			if tc.want.DisruptionsAllowed > 0 {
				wantCond = "SufficientPods"
			}
			if len(conds) != 1 || conds[0].GetType() != "DisruptionAllowed" || conds[0].GetReason() != wantCond || conds[0].GetObservedGeneration() != 1 {
				t.Errorf("conditions: got %v, want DisruptionAllowed %s", conds, wantCond)
			}

			// The status written is current: reconciling it again writes nothing.
			again := reconcile(actions[0].Obj.(*policyv1.PodDisruptionBudget))
			if len(again) != 0 {
				t.Errorf("writes of a current status: %v", again)
			}
		})
	}
}
