// This file holds the API service's tests of autoscaling/v2
// HorizontalPodAutoscaler: Kubernetes' defaults (minReplicas, the 80% CPU
// metric, a behavior's rules), the empty status a new autoscaler gets, the
// status subresource and its validation, and the tolerance dropped while
// HPAConfigurableTolerance is off. Refusals are compared with
// kube-apiserver's recorded answers by gateway's TestRefusalsLikeKubernetes.
package apiserver

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
)

func TestHorizontalPodAutoscalerDefaults(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	hpas := autoscalingv2.NewHorizontalPodAutoscalerServiceClient(e.conn)
	ref := &autoscalingv2.CrossVersionObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	for i, tc := range []struct {
		name string
		spec *autoscalingv2.HorizontalPodAutoscalerSpec
		want *autoscalingv2.HorizontalPodAutoscalerSpec
	}{
		{name: "bare",
			spec: &autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref, MaxReplicas: 5},
			want: &autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref, MaxReplicas: 5, MinReplicas: proto.Int32(1),
				Metrics: []*autoscalingv2.MetricSpec{{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "cpu",
					Target: &autoscalingv2.MetricTarget{Type: "Utilization", AverageUtilization: proto.Int32(80)}}}}}},
		{name: "behavior and quantities",
			spec: &autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref, MaxReplicas: 5, MinReplicas: proto.Int32(2),
				Metrics: []*autoscalingv2.MetricSpec{{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "memory",
					Target: &autoscalingv2.MetricTarget{Type: "AverageValue", AverageValue: proto.String("0.5Gi")}}}},
				Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{
					StabilizationWindowSeconds: proto.Int32(60), Tolerance: proto.String("0.05")}}},
			want: &autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref, MaxReplicas: 5, MinReplicas: proto.Int32(2),
				Metrics: []*autoscalingv2.MetricSpec{{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "memory",
					Target: &autoscalingv2.MetricTarget{Type: "AverageValue", AverageValue: proto.String("512Mi")}}}},
				Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
					ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: proto.Int32(0), SelectPolicy: proto.String("Max"),
						Policies: []*autoscalingv2.HPAScalingPolicy{{Type: "Pods", Value: 4, PeriodSeconds: 15}, {Type: "Percent", Value: 100, PeriodSeconds: 15}}},
					ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: proto.Int32(60), SelectPolicy: proto.String("Max"),
						Policies: []*autoscalingv2.HPAScalingPolicy{{Type: "Percent", Value: 100, PeriodSeconds: 15}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr, err := hpas.CreateHorizontalPodAutoscaler(ctx, &autoscalingv2.CreateHorizontalPodAutoscalerRequest{Namespace: "default",
				HorizontalPodAutoscaler: &autoscalingv2.HorizontalPodAutoscaler{Metadata: om("default", fmt.Sprintf("h%d", i)),
					Spec: tc.spec, Status: &autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: 7}}})
			if err != nil {
				t.Fatal(err)
			}
			got := cr.GetHorizontalPodAutoscaler()
			if d := cmp.Diff(tc.want, got.GetSpec(), protocmp.Transform()); d != "" {
				t.Errorf("spec (-want +got):\n%s", d)
			}
			// A status sent on create is dropped, as Kubernetes' strategy does.
			if got.GetStatus() == nil || got.GetStatus().GetCurrentReplicas() != 0 {
				t.Errorf("status: got %v, want an empty one", got.GetStatus())
			}
		})
	}
}

func TestHorizontalPodAutoscalerStatus(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	hpas := autoscalingv2.NewHorizontalPodAutoscalerServiceClient(e.conn)
	cr, err := hpas.CreateHorizontalPodAutoscaler(ctx, &autoscalingv2.CreateHorizontalPodAutoscalerRequest{Namespace: "default",
		HorizontalPodAutoscaler: &autoscalingv2.HorizontalPodAutoscaler{Metadata: om("default", "web"),
			Spec: &autoscalingv2.HorizontalPodAutoscalerSpec{MaxReplicas: 3,
				ScaleTargetRef: &autoscalingv2.CrossVersionObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Name: "web"}}}})
	if err != nil {
		t.Fatal(err)
	}
	st := proto.Clone(cr.GetHorizontalPodAutoscaler()).(*autoscalingv2.HorizontalPodAutoscaler)
	st.Status = &autoscalingv2.HorizontalPodAutoscalerStatus{DesiredReplicas: -1}
	_, err = hpas.UpdateHorizontalPodAutoscalerStatus(ctx, &autoscalingv2.UpdateHorizontalPodAutoscalerStatusRequest{Namespace: "default", Name: "web", HorizontalPodAutoscaler: st})
	if se := wantReason(t, err, apierrors.ReasonInvalid); se.Message != `HorizontalPodAutoscaler.autoscaling "web" is invalid: status.desiredReplicas: Invalid value: -1: must be greater than or equal to 0` {
		t.Errorf("got %q", se.Message)
	}
	// The status subresource writes the status only.
	st.Status = &autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: 2, DesiredReplicas: 3}
	st.Spec.MaxReplicas = 9
	sr, err := hpas.UpdateHorizontalPodAutoscalerStatus(ctx, &autoscalingv2.UpdateHorizontalPodAutoscalerStatusRequest{Namespace: "default", Name: "web", HorizontalPodAutoscaler: st})
	if err != nil {
		t.Fatal(err)
	}
	if got := sr.GetHorizontalPodAutoscaler(); got.GetStatus().GetDesiredReplicas() != 3 || got.GetSpec().GetMaxReplicas() != 3 {
		t.Errorf("status update: got %v, want desiredReplicas 3 and maxReplicas still 3", got)
	}
	// An update keeps the status and bumps the generation.
	up := proto.Clone(sr.GetHorizontalPodAutoscaler()).(*autoscalingv2.HorizontalPodAutoscaler)
	up.Spec.MaxReplicas = 4
	up.Status = nil
	ur, err := hpas.UpdateHorizontalPodAutoscaler(ctx, &autoscalingv2.UpdateHorizontalPodAutoscalerRequest{Namespace: "default", Name: "web", HorizontalPodAutoscaler: up})
	if err != nil {
		t.Fatal(err)
	}
	if got := ur.GetHorizontalPodAutoscaler(); got.GetMetadata().GetGeneration() != 2 || got.GetStatus().GetDesiredReplicas() != 3 {
		t.Errorf("update: got generation %d status %v, want 2 and the status kept", got.GetMetadata().GetGeneration(), got.GetStatus())
	}
}
