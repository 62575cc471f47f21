// This file holds the tests of autoscaling/v1 HorizontalPodAutoscaler as a
// view of the stored autoscaling/v2 one: an autoscaler written through
// either version is read through the other, v2's fields travel through v1
// in the annotations kube-apiserver writes (and survive a v1 update that
// sends them back), v1's defaults and validation are Kubernetes'.

package apiserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
)

func TestHPAV1WrittenReadAtV2(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	v1 := autoscalingv1.NewHorizontalPodAutoscalerServiceClient(e.conn)
	v2 := autoscalingv2.NewHorizontalPodAutoscalerServiceClient(e.conn)
	ref := &autoscalingv1.CrossVersionObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	ref2 := &autoscalingv2.CrossVersionObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	cpu := func(u int32) []*autoscalingv2.MetricSpec {
		return []*autoscalingv2.MetricSpec{{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "cpu",
			Target: &autoscalingv2.MetricTarget{Type: "Utilization", AverageUtilization: proto.Int32(u)}}}}
	}
	for i, tc := range []struct {
		name   string
		spec   *autoscalingv1.HorizontalPodAutoscalerSpec
		want   *autoscalingv2.HorizontalPodAutoscalerSpec
		wantV1 *autoscalingv1.HorizontalPodAutoscalerSpec
	}{{
		name:   "kubectl autoscale",
		spec:   &autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref, MaxReplicas: 5, TargetCpuUtilizationPercentage: proto.Int32(50)},
		want:   &autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref2, MinReplicas: proto.Int32(1), MaxReplicas: 5, Metrics: cpu(50)},
		wantV1: &autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref, MinReplicas: proto.Int32(1), MaxReplicas: 5, TargetCpuUtilizationPercentage: proto.Int32(50)},
	}, {
		name:   "no CPU target: Kubernetes' 80%",
		spec:   &autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref, MinReplicas: proto.Int32(2), MaxReplicas: 4},
		want:   &autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref2, MinReplicas: proto.Int32(2), MaxReplicas: 4, Metrics: cpu(80)},
		wantV1: &autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref, MinReplicas: proto.Int32(2), MaxReplicas: 4, TargetCpuUtilizationPercentage: proto.Int32(80)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("h%d", i)
			cr, err := v1.CreateHorizontalPodAutoscaler(ctx, &autoscalingv1.CreateHorizontalPodAutoscalerRequest{Namespace: "default",
				HorizontalPodAutoscaler: &autoscalingv1.HorizontalPodAutoscaler{Metadata: om("default", name), Spec: tc.spec}})
			if err != nil {
				t.Fatal(err)
			}
			got := cr.GetHorizontalPodAutoscaler()
			if got.GetApiVersion() != "autoscaling/v1" || got.GetKind() != "HorizontalPodAutoscaler" {
				t.Errorf("created: got %s %s, want autoscaling/v1 HorizontalPodAutoscaler", got.GetApiVersion(), got.GetKind())
			}
			if d := cmp.Diff(tc.wantV1, got.GetSpec(), protocmp.Transform()); d != "" {
				t.Errorf("v1 spec (-want +got):\n%s", d)
			}
			if a := got.GetMetadata().GetAnnotations(); len(a) != 0 {
				t.Errorf("v1 annotations: got %v, want none (v1 holds every field)", a)
			}
			gr, err := v2.GetHorizontalPodAutoscaler(ctx, &autoscalingv2.GetHorizontalPodAutoscalerRequest{Namespace: "default", Name: name})
			if err != nil {
				t.Fatal(err)
			}
			h := gr.GetHorizontalPodAutoscaler()
			if h.GetApiVersion() != "autoscaling/v2" {
				t.Errorf("v2 apiVersion: got %q", h.GetApiVersion())
			}
			if d := cmp.Diff(tc.want, h.GetSpec(), protocmp.Transform()); d != "" {
				t.Errorf("v2 spec (-want +got):\n%s", d)
			}
			if got, want := h.GetMetadata().GetResourceVersion(), got.GetMetadata().GetResourceVersion(); got != want {
				t.Errorf("resourceVersion: got %q at v2, %q at v1", got, want)
			}
		})
	}
}

// The annotations' values as kube-apiserver v1.33.13 writes them.
const (
	wantMetricsAnnotation  = `[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"512Mi"}}]`
	wantBehaviorAnnotation = `{"ScaleUp":{"StabilizationWindowSeconds":0,"SelectPolicy":"Max","Policies":[{"Type":"Pods","Value":4,"PeriodSeconds":15},{"Type":"Percent","Value":100,"PeriodSeconds":15}],"Tolerance":null},` +
		`"ScaleDown":{"StabilizationWindowSeconds":60,"SelectPolicy":"Max","Policies":[{"Type":"Percent","Value":100,"PeriodSeconds":15}],"Tolerance":null}}`
	wantCurrentAnnotation    = `[{"type":"Resource","resource":{"name":"cpu","currentAverageUtilization":40,"currentAverageValue":"100m"}},{"type":"Resource","resource":{"name":"memory","currentAverageValue":"300Mi"}}]`
	wantConditionsAnnotation = `[{"type":"AbleToScale","status":"True","lastTransitionTime":"2024-01-02T03:04:05Z","reason":"ReadyForNewScale","message":"recommended size matches current size"}]`
)

func TestHPAV2ReadAtV1(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	v1 := autoscalingv1.NewHorizontalPodAutoscalerServiceClient(e.conn)
	v2 := autoscalingv2.NewHorizontalPodAutoscalerServiceClient(e.conn)
	cr, err := v2.CreateHorizontalPodAutoscaler(ctx, &autoscalingv2.CreateHorizontalPodAutoscalerRequest{Namespace: "default",
		HorizontalPodAutoscaler: &autoscalingv2.HorizontalPodAutoscaler{Metadata: om("default", "web"),
			Spec: &autoscalingv2.HorizontalPodAutoscalerSpec{MaxReplicas: 5,
				ScaleTargetRef: &autoscalingv2.CrossVersionObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Name: "web"},
				Metrics: []*autoscalingv2.MetricSpec{
					{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "cpu", Target: &autoscalingv2.MetricTarget{Type: "Utilization", AverageUtilization: proto.Int32(60)}}},
					{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "memory", Target: &autoscalingv2.MetricTarget{Type: "AverageValue", AverageValue: proto.String("0.5Gi")}}},
				},
				Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: proto.Int32(60)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	st := proto.Clone(cr.GetHorizontalPodAutoscaler()).(*autoscalingv2.HorizontalPodAutoscaler)
	st.Status = &autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: 2, DesiredReplicas: 2,
		CurrentMetrics: []*autoscalingv2.MetricStatus{
			{Type: "Resource", Resource: &autoscalingv2.ResourceMetricStatus{Name: "cpu", Current: &autoscalingv2.MetricValueStatus{AverageUtilization: proto.Int32(40), AverageValue: proto.String("100m")}}},
			{Type: "Resource", Resource: &autoscalingv2.ResourceMetricStatus{Name: "memory", Current: &autoscalingv2.MetricValueStatus{AverageValue: proto.String("300Mi")}}},
		},
		Conditions: []*autoscalingv2.HorizontalPodAutoscalerCondition{{Type: "AbleToScale", Status: "True",
			LastTransitionTime: timestamppb.New(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)), Reason: "ReadyForNewScale", Message: "recommended size matches current size"}}}
	if _, err := v2.UpdateHorizontalPodAutoscalerStatus(ctx, &autoscalingv2.UpdateHorizontalPodAutoscalerStatusRequest{Namespace: "default", Name: "web", HorizontalPodAutoscaler: st}); err != nil {
		t.Fatal(err)
	}

	gr, err := v1.GetHorizontalPodAutoscaler(ctx, &autoscalingv1.GetHorizontalPodAutoscalerRequest{Namespace: "default", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	h := gr.GetHorizontalPodAutoscaler()
	if got := h.GetSpec().GetTargetCpuUtilizationPercentage(); got != 60 {
		t.Errorf("targetCPUUtilizationPercentage: got %d, want 60", got)
	}
	if got := h.GetStatus().GetCurrentCpuUtilizationPercentage(); got != 40 || h.GetStatus().GetCurrentReplicas() != 2 {
		t.Errorf("status: got %v, want currentCPUUtilizationPercentage 40 and 2 replicas", h.GetStatus())
	}
	want := map[string]string{
		"autoscaling.alpha.kubernetes.io/metrics":         wantMetricsAnnotation,
		"autoscaling.alpha.kubernetes.io/behavior":        wantBehaviorAnnotation,
		"autoscaling.alpha.kubernetes.io/current-metrics": wantCurrentAnnotation,
		"autoscaling.alpha.kubernetes.io/conditions":      wantConditionsAnnotation,
	}
	if d := cmp.Diff(want, h.GetMetadata().GetAnnotations()); d != "" {
		t.Errorf("v1 annotations (-want +got):\n%s", d)
	}

	// A v1 update that sends the annotations back keeps v2's fields (the
	// CPU target, v1's own field, changed); the metrics come back with
	// the annotation's first, as Kubernetes orders them.
	up := proto.Clone(h).(*autoscalingv1.HorizontalPodAutoscaler)
	up.Spec.TargetCpuUtilizationPercentage = proto.Int32(70)
	up.Metadata.Labels = map[string]string{"tier": "web"}
	if _, err := v1.UpdateHorizontalPodAutoscaler(ctx, &autoscalingv1.UpdateHorizontalPodAutoscalerRequest{Namespace: "default", Name: "web", HorizontalPodAutoscaler: up}); err != nil {
		t.Fatal(err)
	}
	g2, err := v2.GetHorizontalPodAutoscaler(ctx, &autoscalingv2.GetHorizontalPodAutoscalerRequest{Namespace: "default", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	got := g2.GetHorizontalPodAutoscaler()
	wantMetrics := []*autoscalingv2.MetricSpec{
		{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "memory", Target: &autoscalingv2.MetricTarget{Type: "AverageValue", AverageValue: proto.String("512Mi")}}},
		{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "cpu", Target: &autoscalingv2.MetricTarget{Type: "Utilization", AverageUtilization: proto.Int32(70)}}},
	}
	if d := cmp.Diff(wantMetrics, got.GetSpec().GetMetrics(), protocmp.Transform()); d != "" {
		t.Errorf("v2 metrics after a v1 update (-want +got):\n%s", d)
	}
	if got.GetSpec().GetBehavior().GetScaleDown().GetStabilizationWindowSeconds() != 60 || got.GetSpec().GetBehavior().GetScaleUp() == nil {
		t.Errorf("v2 behavior after a v1 update: got %v", got.GetSpec().GetBehavior())
	}
	if len(got.GetStatus().GetConditions()) != 1 || len(got.GetStatus().GetCurrentMetrics()) != 2 {
		t.Errorf("v2 status after a v1 update: got %v", got.GetStatus())
	}
	if a := got.GetMetadata().GetAnnotations(); len(a) != 0 {
		t.Errorf("stored annotations: got %v, want none (the round-trip annotations are never stored)", a)
	}
	if got.GetMetadata().GetLabels()["tier"] != "web" {
		t.Errorf("labels: got %v", got.GetMetadata().GetLabels())
	}

	// A v1 update without the annotations loses what only they held, as on
	// Kubernetes.
	bare := proto.Clone(h).(*autoscalingv1.HorizontalPodAutoscaler)
	bare.Metadata.Annotations = nil
	bare.Metadata.ResourceVersion = ""
	ur, err := v1.UpdateHorizontalPodAutoscaler(ctx, &autoscalingv1.UpdateHorizontalPodAutoscalerRequest{Namespace: "default", Name: "web", HorizontalPodAutoscaler: bare})
	if err != nil {
		t.Fatal(err)
	}
	if a := ur.GetHorizontalPodAutoscaler().GetMetadata().GetAnnotations(); a["autoscaling.alpha.kubernetes.io/metrics"] != "" || a["autoscaling.alpha.kubernetes.io/behavior"] != "" {
		t.Errorf("annotations after a bare v1 update: got %v, want no metrics or behavior", a)
	}
}

func TestHPAV1Validation(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	v1 := autoscalingv1.NewHorizontalPodAutoscalerServiceClient(e.conn)
	ref := &autoscalingv1.CrossVersionObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	for _, tc := range []struct {
		name string
		spec *autoscalingv1.HorizontalPodAutoscalerSpec
		want string
	}{{
		name: "zero CPU target",
		spec: &autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref, MaxReplicas: 5, TargetCpuUtilizationPercentage: proto.Int32(0)},
		want: `HorizontalPodAutoscaler.autoscaling "bad" is invalid: spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0`,
	}, {
		name: "no maxReplicas, no target",
		spec: &autoscalingv1.HorizontalPodAutoscalerSpec{MinReplicas: proto.Int32(0)},
		want: `HorizontalPodAutoscaler.autoscaling "bad" is invalid: [spec.minReplicas: Invalid value: 0: must be greater than or equal to 1, spec.maxReplicas: Invalid value: 0: must be greater than 0, spec.scaleTargetRef.kind: Required value, spec.scaleTargetRef.name: Required value, spec.metrics: Forbidden: must specify at least one Object or External metric to support scaling to zero replicas]`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v1.CreateHorizontalPodAutoscaler(ctx, &autoscalingv1.CreateHorizontalPodAutoscalerRequest{Namespace: "default",
				HorizontalPodAutoscaler: &autoscalingv1.HorizontalPodAutoscaler{Metadata: om("default", "bad"), Spec: tc.spec}})
			if se := wantReason(t, err, apierrors.ReasonInvalid); se.Message != tc.want {
				t.Errorf("got %q, want %q", se.Message, tc.want)
			}
		})
	}
}

func TestHPAV1ListWatchDelete(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	v1 := autoscalingv1.NewHorizontalPodAutoscalerServiceClient(e.conn)
	v2 := autoscalingv2.NewHorizontalPodAutoscalerServiceClient(e.conn)
	newV2 := func(name string) *autoscalingv2.HorizontalPodAutoscaler {
		return &autoscalingv2.HorizontalPodAutoscaler{Metadata: om("default", name), Spec: &autoscalingv2.HorizontalPodAutoscalerSpec{MaxReplicas: 3,
			ScaleTargetRef: &autoscalingv2.CrossVersionObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Name: name}}}
	}
	if _, err := v2.CreateHorizontalPodAutoscaler(ctx, &autoscalingv2.CreateHorizontalPodAutoscalerRequest{Namespace: "default", HorizontalPodAutoscaler: newV2("a")}); err != nil {
		t.Fatal(err)
	}
	l, err := v1.ListHorizontalPodAutoscalers(ctx, &autoscalingv1.ListHorizontalPodAutoscalersRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.GetList(); got.GetApiVersion() != "autoscaling/v1" || got.GetKind() != "HorizontalPodAutoscalerList" || len(got.GetItems()) != 1 ||
		got.GetItems()[0].GetSpec().GetTargetCpuUtilizationPercentage() != 80 {
		t.Errorf("v1 list: got %v, want one autoscaler at the default 80%% CPU", got)
	}

	// A watch at v1 sees a write at v2, converted.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ws, err := v1.WatchHorizontalPodAutoscalers(wctx, &autoscalingv1.WatchHorizontalPodAutoscalersRequest{Namespace: "default",
		ResourceVersion: l.GetList().GetMetadata().GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	b := newV2("b")
	b.Spec.Metrics = []*autoscalingv2.MetricSpec{{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "memory",
		Target: &autoscalingv2.MetricTarget{Type: "AverageValue", AverageValue: proto.String("1Gi")}}}}
	if _, err := v2.CreateHorizontalPodAutoscaler(ctx, &autoscalingv2.CreateHorizontalPodAutoscalerRequest{Namespace: "default", HorizontalPodAutoscaler: b}); err != nil {
		t.Fatal(err)
	}
	ev, err := ws.Recv()
	if err != nil {
		t.Fatal(err)
	}
	o := ev.GetObject()
	if ev.GetType() != "ADDED" || o.GetMetadata().GetName() != "b" || o.GetApiVersion() != "autoscaling/v1" || o.GetSpec().TargetCpuUtilizationPercentage != nil ||
		o.GetMetadata().GetAnnotations()["autoscaling.alpha.kubernetes.io/metrics"] != `[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"1Gi"}}]` {
		t.Errorf("watch event: got %v", ev)
	}

	// Deleted at v1: gone at v2.
	dr, err := v1.DeleteHorizontalPodAutoscaler(ctx, &autoscalingv1.DeleteHorizontalPodAutoscalerRequest{Namespace: "default", Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if dr.GetHorizontalPodAutoscaler().GetApiVersion() != "autoscaling/v1" {
		t.Errorf("deleted: got %v", dr.GetHorizontalPodAutoscaler())
	}
	_, err = v2.GetHorizontalPodAutoscaler(ctx, &autoscalingv2.GetHorizontalPodAutoscalerRequest{Namespace: "default", Name: "a"})
	wantReason(t, err, apierrors.ReasonNotFound)
	_, err = v1.GetHorizontalPodAutoscaler(ctx, &autoscalingv1.GetHorizontalPodAutoscalerRequest{Namespace: "default", Name: "a"})
	if se := wantReason(t, err, apierrors.ReasonNotFound); se.Message != `horizontalpodautoscalers.autoscaling "a" not found` {
		t.Errorf("message: got %q", se.Message)
	}
}
