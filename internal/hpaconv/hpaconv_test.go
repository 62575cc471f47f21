// This file holds the tests of the v1/v2 conversion: a v2 object survives
// the trip through v1 and back (its metrics reordered as Kubernetes
// reorders them), annotations that do not parse are ignored, and v1's
// implicit CPU target applies only when no metric results.

package hpaconv

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRoundTripThroughV1(t *testing.T) {
	q := resource.MustParse
	ptrQ := func(s string) *resource.Quantity { v := q(s); return &v }
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
	cpu := autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceCPU,
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr(int32(60))}}}
	others := []autoscalingv2.MetricSpec{
		{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "qps", Selector: sel},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptrQ("10")}}},
		{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
			DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "Service", Name: "web"},
			Metric:          autoscalingv2.MetricIdentifier{Name: "hits"},
			Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: ptrQ("2k")}}},
		{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "queue"},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptrQ("30")}}},
		{Type: autoscalingv2.ContainerResourceMetricSourceType, ContainerResource: &autoscalingv2.ContainerResourceMetricSource{Name: corev1.ResourceMemory, Container: "app",
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptrQ("100Mi")}}},
	}
	in := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Annotations: map[string]string{"keep": "me", MetricsAnnotation: "stale"}},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    ptr(int32(2)), MaxReplicas: 9,
			Metrics: append([]autoscalingv2.MetricSpec{cpu}, others...),
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{
				StabilizationWindowSeconds: ptr(int32(30)), Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 60}}}},
		},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{
			ObservedGeneration: ptr(int64(3)), CurrentReplicas: 2, DesiredReplicas: 3,
			CurrentMetrics: []autoscalingv2.MetricStatus{
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU,
					Current: autoscalingv2.MetricValueStatus{AverageUtilization: ptr(int32(40)), AverageValue: ptrQ("100m")}}},
				{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricStatus{Metric: autoscalingv2.MetricIdentifier{Name: "queue"},
					Current: autoscalingv2.MetricValueStatus{Value: ptrQ("5"), AverageValue: ptrQ("2")}}},
			},
			Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{{Type: autoscalingv2.ScalingActive, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.Unix(1700000000, 0), Reason: "ValidMetricFound", Message: "ok"}},
		},
	}
	v1, err := ToV1(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := *v1.Spec.TargetCPUUtilizationPercentage; got != 60 {
		t.Errorf("targetCPUUtilizationPercentage: got %d, want 60", got)
	}
	if got := *v1.Status.CurrentCPUUtilizationPercentage; got != 40 {
		t.Errorf("currentCPUUtilizationPercentage: got %d, want 40", got)
	}
	if v1.Annotations["keep"] != "me" || v1.Annotations[MetricsAnnotation] == "stale" {
		t.Errorf("annotations: got %v, want keep kept and the stale metrics replaced", v1.Annotations)
	}
	if in.Annotations[MetricsAnnotation] != "stale" {
		t.Errorf("ToV1 changed its input's annotations: %v", in.Annotations)
	}
	back := FromV1(v1)
	want := in.DeepCopy()
	want.APIVersion, want.Kind = "autoscaling/v2", "HorizontalPodAutoscaler"
	want.Annotations = map[string]string{"keep": "me"}
	// The annotation's metrics first, then v1's CPU target.
	want.Spec.Metrics = append(append([]autoscalingv2.MetricSpec{}, others...), cpu)
	if d := cmp.Diff(want, back); d != "" {
		t.Errorf("v2 → v1 → v2 (-want +got):\n%s", d)
	}
}

func TestFromV1Annotations(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		cpu         *int32
		wantMetrics int
		wantCPU     int32 // the last metric's utilization
		behavior    bool
	}{
		{name: "nothing: the 80% CPU default", wantMetrics: 1, wantCPU: 80},
		{name: "a CPU target", cpu: ptr(int32(50)), wantMetrics: 1, wantCPU: 50},
		{name: "metrics that do not parse are ignored", annotations: map[string]string{MetricsAnnotation: "{"}, cpu: ptr(int32(50)), wantMetrics: 1, wantCPU: 50},
		{name: "an empty metrics list: the default", annotations: map[string]string{MetricsAnnotation: "[]"}, wantMetrics: 1, wantCPU: 80},
		{name: "a behavior in v2's JSON names", annotations: map[string]string{BehaviorAnnotation: `{"scaleUp":{"selectPolicy":"Min"}}`}, wantMetrics: 1, wantCPU: 80, behavior: true},
		{name: "an empty behavior is none", annotations: map[string]string{BehaviorAnnotation: `{}`}, wantMetrics: 1, wantCPU: 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &autoscalingv1.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: tc.annotations},
				Spec: autoscalingv1.HorizontalPodAutoscalerSpec{MaxReplicas: 3, TargetCPUUtilizationPercentage: tc.cpu}}
			got := FromV1(h)
			m := got.Spec.Metrics
			if len(m) != tc.wantMetrics || m[len(m)-1].Resource == nil || *m[len(m)-1].Resource.Target.AverageUtilization != tc.wantCPU {
				t.Errorf("metrics: got %+v, want %d ending in %d%% CPU", m, tc.wantMetrics, tc.wantCPU)
			}
			if (got.Spec.Behavior != nil) != tc.behavior {
				t.Errorf("behavior: got %+v, want set %v", got.Spec.Behavior, tc.behavior)
			}
			if len(got.Annotations) != 0 {
				t.Errorf("annotations: got %v, want the round-trip ones dropped", got.Annotations)
			}
		})
	}
}
