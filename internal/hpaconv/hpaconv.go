// Package hpaconv holds Kubernetes' conversion of a HorizontalPodAutoscaler
// between autoscaling/v1 and autoscaling/v2, on k8s.io/api's types: v1's
// targetCPUUtilizationPercentage is v2's Resource cpu Utilization metric,
// and what v1 cannot hold (the other metrics, the behavior, the current
// metrics and the conditions) travels in v1's annotations, encoded exactly
// as kube-apiserver v1.33.13 encodes them and read back from them on a v1
// write. The API service serves autoscaling/v1 as a view of the stored v2
// object through it; the gateway prints a v1 object's Table through it.
//
// autoscaling/v2 stands in for Kubernetes' internal version here: the two
// have the same fields, and kube-apiserver drops the round-trip annotations
// on both of its v2 conversions.
package hpaconv

import (
	"encoding/json"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The annotations v1 keeps v2's fields in.
const (
	MetricsAnnotation        = "autoscaling.alpha.kubernetes.io/metrics"
	CurrentMetricsAnnotation = "autoscaling.alpha.kubernetes.io/current-metrics"
	ConditionsAnnotation     = "autoscaling.alpha.kubernetes.io/conditions"
	BehaviorAnnotation       = "autoscaling.alpha.kubernetes.io/behavior"
	// The tolerances' annotations are v2beta2's (not served); Kubernetes
	// drops them with the others.
	scaleDownToleranceAnnotation = "autoscaling.alpha.kubernetes.io/scale-down-tolerance"
	scaleUpToleranceAnnotation   = "autoscaling.alpha.kubernetes.io/scale-up-tolerance"
)

// DefaultCPUUtilization is the CPU utilization target a v1 object without
// one (and without other metrics) gets, as v2's default.
const DefaultCPUUtilization = 80

var roundTrip = []string{MetricsAnnotation, BehaviorAnnotation, scaleDownToleranceAnnotation,
	scaleUpToleranceAnnotation, CurrentMetricsAnnotation, ConditionsAnnotation}

// DropRoundTripAnnotations is in without the round-trip annotations: in
// itself when it has none, else a copy.
func DropRoundTripAnnotations(in map[string]string) map[string]string {
	has := false
	for _, k := range roundTrip {
		_, ok := in[k]
		has = has || ok
	}
	if !has {
		return in
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	for _, k := range roundTrip {
		delete(out, k)
	}
	return out
}

// The behavior annotation holds Kubernetes' internal HorizontalPodAutoscalerBehavior
// as encoding/json writes it: Go field names, no omitted fields. These
// types have its fields, in its order.
type (
	internalBehavior struct {
		ScaleUp   *internalRules
		ScaleDown *internalRules
	}
	internalRules struct {
		StabilizationWindowSeconds *int32
		SelectPolicy               *autoscalingv2.ScalingPolicySelect
		Policies                   []internalPolicy
		Tolerance                  *resource.Quantity
	}
	internalPolicy struct {
		Type          autoscalingv2.HPAScalingPolicyType
		Value         int32
		PeriodSeconds int32
	}
)

func rulesToInternal(r *autoscalingv2.HPAScalingRules) *internalRules {
	if r == nil {
		return nil
	}
	out := &internalRules{StabilizationWindowSeconds: r.StabilizationWindowSeconds, SelectPolicy: r.SelectPolicy, Tolerance: r.Tolerance}
	if r.Policies != nil {
		out.Policies = make([]internalPolicy, len(r.Policies))
		for i, p := range r.Policies {
			out.Policies[i] = internalPolicy{Type: p.Type, Value: p.Value, PeriodSeconds: p.PeriodSeconds}
		}
	}
	return out
}

func rulesFromInternal(r *internalRules) *autoscalingv2.HPAScalingRules {
	if r == nil {
		return nil
	}
	out := &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: r.StabilizationWindowSeconds, SelectPolicy: r.SelectPolicy, Tolerance: r.Tolerance}
	if r.Policies != nil {
		out.Policies = make([]autoscalingv2.HPAScalingPolicy, len(r.Policies))
		for i, p := range r.Policies {
			out.Policies[i] = autoscalingv2.HPAScalingPolicy{Type: p.Type, Value: p.Value, PeriodSeconds: p.PeriodSeconds}
		}
	}
	return out
}

// isCPUUtilization: the metric is the one v1's targetCPUUtilizationPercentage
// holds.
func isCPUUtilization(m autoscalingv2.MetricSpec) bool {
	return m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil &&
		m.Resource.Name == corev1.ResourceCPU && m.Resource.Target.AverageUtilization != nil
}

// ToV1 is in as autoscaling/v1: the CPU utilization target and current
// value in v1's fields, everything else in the annotations (as
// Convert_autoscaling_HorizontalPodAutoscaler_To_v1_HorizontalPodAutoscaler).
// in is not modified.
func ToV1(in *autoscalingv2.HorizontalPodAutoscaler) (*autoscalingv1.HorizontalPodAutoscaler, error) {
	out := &autoscalingv1.HorizontalPodAutoscaler{
		TypeMeta:   in.TypeMeta,
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
	}
	out.APIVersion, out.Kind = "autoscaling/v1", "HorizontalPodAutoscaler"
	out.Annotations = DropRoundTripAnnotations(out.Annotations)

	ref := in.Spec.ScaleTargetRef
	out.Spec = autoscalingv1.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{Kind: ref.Kind, Name: ref.Name, APIVersion: ref.APIVersion},
		MinReplicas:    in.Spec.MinReplicas,
		MaxReplicas:    in.Spec.MaxReplicas,
	}
	var other []autoscalingv1.MetricSpec
	for _, m := range in.Spec.Metrics {
		if isCPUUtilization(m) {
			// The first is v1's target; every one is left out of the
			// annotation.
			if out.Spec.TargetCPUUtilizationPercentage == nil {
				out.Spec.TargetCPUUtilizationPercentage = ptr(*m.Resource.Target.AverageUtilization)
			}
			continue
		}
		other = append(other, metricSpecToV1(m))
	}

	st := in.Status
	out.Status = autoscalingv1.HorizontalPodAutoscalerStatus{
		ObservedGeneration: st.ObservedGeneration, LastScaleTime: st.LastScaleTime,
		CurrentReplicas: st.CurrentReplicas, DesiredReplicas: st.DesiredReplicas,
	}
	current := make([]autoscalingv1.MetricStatus, len(st.CurrentMetrics))
	for i, m := range st.CurrentMetrics {
		// The last CPU utilization is v1's current one; all are kept in the
		// annotation, which has their raw values too.
		if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
			m.Resource.Current.AverageUtilization != nil {
			out.Status.CurrentCPUUtilizationPercentage = ptr(*m.Resource.Current.AverageUtilization)
		}
		current[i] = metricStatusToV1(m)
	}
	conditions := make([]autoscalingv1.HorizontalPodAutoscalerCondition, len(st.Conditions))
	for i, c := range st.Conditions {
		conditions[i] = autoscalingv1.HorizontalPodAutoscalerCondition{
			Type: autoscalingv1.HorizontalPodAutoscalerConditionType(c.Type), Status: c.Status,
			LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message,
		}
	}

	set := func(key string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("hpaconv: encoding %s: %w", key, err)
		}
		if out.Annotations == nil {
			// The metadata is a deep copy: the map is out's own.
			out.Annotations = map[string]string{}
		}
		out.Annotations[key] = string(b)
		return nil
	}
	if len(other) > 0 {
		if err := set(MetricsAnnotation, other); err != nil {
			return nil, err
		}
	}
	if len(st.CurrentMetrics) > 0 {
		if err := set(CurrentMetricsAnnotation, current); err != nil {
			return nil, err
		}
	}
	if b := in.Spec.Behavior; b != nil {
		if err := set(BehaviorAnnotation, internalBehavior{ScaleUp: rulesToInternal(b.ScaleUp), ScaleDown: rulesToInternal(b.ScaleDown)}); err != nil {
			return nil, err
		}
	}
	if len(st.Conditions) > 0 {
		if err := set(ConditionsAnnotation, conditions); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// FromV1 is in as autoscaling/v2: v1's CPU target and current value as
// Resource cpu metrics, the annotations' metrics, behavior, current metrics
// and conditions read back (an annotation that does not parse is ignored,
// as Kubernetes ignores it), the CPU default when no metric results, and the
// annotations dropped (as
// Convert_v1_HorizontalPodAutoscaler_To_autoscaling_HorizontalPodAutoscaler).
// in is not modified; v1's own default (minReplicas 1) is the caller's.
func FromV1(in *autoscalingv1.HorizontalPodAutoscaler) *autoscalingv2.HorizontalPodAutoscaler {
	out := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: *in.ObjectMeta.DeepCopy()}
	out.APIVersion, out.Kind = "autoscaling/v2", "HorizontalPodAutoscaler"
	ref := in.Spec.ScaleTargetRef
	out.Spec = autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: ref.Kind, Name: ref.Name, APIVersion: ref.APIVersion},
		MinReplicas:    in.Spec.MinReplicas,
		MaxReplicas:    in.Spec.MaxReplicas,
	}
	if u := in.Spec.TargetCPUUtilizationPercentage; u != nil {
		out.Spec.Metrics = []autoscalingv2.MetricSpec{cpuUtilization(*u)}
	}
	st := in.Status
	out.Status = autoscalingv2.HorizontalPodAutoscalerStatus{
		ObservedGeneration: st.ObservedGeneration, LastScaleTime: st.LastScaleTime,
		CurrentReplicas: st.CurrentReplicas, DesiredReplicas: st.DesiredReplicas,
	}
	if u := st.CurrentCPUUtilizationPercentage; u != nil {
		out.Status.CurrentMetrics = []autoscalingv2.MetricStatus{{Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU, Current: autoscalingv2.MetricValueStatus{AverageUtilization: ptr(*u)}}}}
	}

	ann := in.Annotations
	if enc, ok := ann[MetricsAnnotation]; ok {
		var other []autoscalingv1.MetricSpec
		if json.Unmarshal([]byte(enc), &other) == nil {
			// The annotation's metrics first, then v1's CPU target.
			metrics := make([]autoscalingv2.MetricSpec, 0, len(other)+1)
			for _, m := range other {
				metrics = append(metrics, metricSpecFromV1(m))
			}
			out.Spec.Metrics = append(metrics, out.Spec.Metrics...)
		}
	}
	if enc, ok := ann[BehaviorAnnotation]; ok {
		var b internalBehavior
		if json.Unmarshal([]byte(enc), &b) == nil && (b.ScaleUp != nil || b.ScaleDown != nil) {
			out.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: rulesFromInternal(b.ScaleUp), ScaleDown: rulesFromInternal(b.ScaleDown)}
		}
	}
	if enc, ok := ann[CurrentMetricsAnnotation]; ok {
		// These replace v1's current CPU value: they have more.
		var current []autoscalingv1.MetricStatus
		if json.Unmarshal([]byte(enc), &current) == nil {
			out.Status.CurrentMetrics = make([]autoscalingv2.MetricStatus, len(current))
			for i, m := range current {
				out.Status.CurrentMetrics[i] = metricStatusFromV1(m)
			}
		}
	}
	if len(out.Spec.Metrics) == 0 {
		// v1's implicit default, applied here where the annotation's
		// metrics are known.
		out.Spec.Metrics = []autoscalingv2.MetricSpec{cpuUtilization(DefaultCPUUtilization)}
	}
	if enc, ok := ann[ConditionsAnnotation]; ok {
		var conditions []autoscalingv1.HorizontalPodAutoscalerCondition
		if json.Unmarshal([]byte(enc), &conditions) == nil {
			out.Status.Conditions = make([]autoscalingv2.HorizontalPodAutoscalerCondition, len(conditions))
			for i, c := range conditions {
				out.Status.Conditions[i] = autoscalingv2.HorizontalPodAutoscalerCondition{
					Type: autoscalingv2.HorizontalPodAutoscalerConditionType(c.Type), Status: c.Status,
					LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message,
				}
			}
		}
	}
	out.Annotations = DropRoundTripAnnotations(out.Annotations)
	return out
}

func cpuUtilization(u int32) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr(u)}}}
}

func ptr[T any](v T) *T { return &v }

// quantity is *q, or zero.
func quantity(q *resource.Quantity) resource.Quantity {
	if q == nil {
		return resource.Quantity{}
	}
	return q.DeepCopy()
}

func metricSpecToV1(m autoscalingv2.MetricSpec) autoscalingv1.MetricSpec {
	out := autoscalingv1.MetricSpec{Type: autoscalingv1.MetricSourceType(m.Type)}
	if o := m.Object; o != nil {
		out.Object = &autoscalingv1.ObjectMetricSource{
			Target:       autoscalingv1.CrossVersionObjectReference{Kind: o.DescribedObject.Kind, Name: o.DescribedObject.Name, APIVersion: o.DescribedObject.APIVersion},
			MetricName:   o.Metric.Name,
			TargetValue:  quantity(o.Target.Value),
			Selector:     o.Metric.Selector,
			AverageValue: o.Target.AverageValue,
		}
	}
	if p := m.Pods; p != nil {
		out.Pods = &autoscalingv1.PodsMetricSource{MetricName: p.Metric.Name, TargetAverageValue: quantity(p.Target.AverageValue), Selector: p.Metric.Selector}
	}
	if r := m.Resource; r != nil {
		out.Resource = &autoscalingv1.ResourceMetricSource{Name: r.Name, TargetAverageUtilization: r.Target.AverageUtilization, TargetAverageValue: r.Target.AverageValue}
	}
	if c := m.ContainerResource; c != nil {
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricSource{Name: c.Name, Container: c.Container,
			TargetAverageUtilization: c.Target.AverageUtilization, TargetAverageValue: c.Target.AverageValue}
	}
	if e := m.External; e != nil {
		out.External = &autoscalingv1.ExternalMetricSource{MetricName: e.Metric.Name, MetricSelector: e.Metric.Selector,
			TargetValue: e.Target.Value, TargetAverageValue: e.Target.AverageValue}
	}
	return out
}

func metricSpecFromV1(m autoscalingv1.MetricSpec) autoscalingv2.MetricSpec {
	out := autoscalingv2.MetricSpec{Type: autoscalingv2.MetricSourceType(m.Type)}
	if o := m.Object; o != nil {
		t := autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: ptr(o.TargetValue.DeepCopy()), AverageValue: o.AverageValue}
		if o.AverageValue != nil {
			t.Type = autoscalingv2.AverageValueMetricType
		}
		out.Object = &autoscalingv2.ObjectMetricSource{
			DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: o.Target.Kind, Name: o.Target.Name, APIVersion: o.Target.APIVersion},
			Metric:          autoscalingv2.MetricIdentifier{Name: o.MetricName, Selector: o.Selector},
			Target:          t,
		}
	}
	if p := m.Pods; p != nil {
		out.Pods = &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: p.MetricName, Selector: p.Selector},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr(p.TargetAverageValue.DeepCopy())}}
	}
	if r := m.Resource; r != nil {
		out.Resource = &autoscalingv2.ResourceMetricSource{Name: r.Name, Target: resourceTarget(r.TargetAverageUtilization, r.TargetAverageValue)}
	}
	if c := m.ContainerResource; c != nil {
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricSource{Name: c.Name, Container: c.Container,
			Target: resourceTarget(c.TargetAverageUtilization, c.TargetAverageValue)}
	}
	if e := m.External; e != nil {
		t := autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: e.TargetValue, AverageValue: e.TargetAverageValue}
		if e.TargetValue == nil {
			t.Type = autoscalingv2.AverageValueMetricType
		}
		out.External = &autoscalingv2.ExternalMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: e.MetricName, Selector: e.MetricSelector}, Target: t}
	}
	return out
}

// resourceTarget is a v1 Resource or ContainerResource target: a
// utilization, else an average value.
func resourceTarget(u *int32, v *resource.Quantity) autoscalingv2.MetricTarget {
	t := autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageUtilization: u, AverageValue: v}
	if u != nil {
		t.Type = autoscalingv2.UtilizationMetricType
	}
	return t
}

func metricStatusToV1(m autoscalingv2.MetricStatus) autoscalingv1.MetricStatus {
	out := autoscalingv1.MetricStatus{Type: autoscalingv1.MetricSourceType(m.Type)}
	if o := m.Object; o != nil {
		out.Object = &autoscalingv1.ObjectMetricStatus{
			Target:       autoscalingv1.CrossVersionObjectReference{Kind: o.DescribedObject.Kind, Name: o.DescribedObject.Name, APIVersion: o.DescribedObject.APIVersion},
			MetricName:   o.Metric.Name,
			CurrentValue: quantity(o.Current.Value),
			Selector:     o.Metric.Selector,
		}
		if o.Current.AverageValue != nil {
			out.Object.AverageValue = ptr(o.Current.AverageValue.DeepCopy())
		}
	}
	if p := m.Pods; p != nil {
		out.Pods = &autoscalingv1.PodsMetricStatus{MetricName: p.Metric.Name, CurrentAverageValue: quantity(p.Current.AverageValue), Selector: p.Metric.Selector}
	}
	if r := m.Resource; r != nil {
		out.Resource = &autoscalingv1.ResourceMetricStatus{Name: r.Name, CurrentAverageUtilization: r.Current.AverageUtilization,
			CurrentAverageValue: quantity(r.Current.AverageValue)}
	}
	if c := m.ContainerResource; c != nil {
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricStatus{Name: c.Name, Container: c.Container,
			CurrentAverageUtilization: c.Current.AverageUtilization, CurrentAverageValue: quantity(c.Current.AverageValue)}
	}
	if e := m.External; e != nil {
		out.External = &autoscalingv1.ExternalMetricStatus{MetricName: e.Metric.Name, MetricSelector: e.Metric.Selector,
			CurrentValue: quantity(e.Current.Value), CurrentAverageValue: e.Current.AverageValue}
	}
	return out
}

func metricStatusFromV1(m autoscalingv1.MetricStatus) autoscalingv2.MetricStatus {
	out := autoscalingv2.MetricStatus{Type: autoscalingv2.MetricSourceType(m.Type)}
	if o := m.Object; o != nil {
		out.Object = &autoscalingv2.ObjectMetricStatus{
			DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: o.Target.Kind, Name: o.Target.Name, APIVersion: o.Target.APIVersion},
			Metric:          autoscalingv2.MetricIdentifier{Name: o.MetricName, Selector: o.Selector},
			Current:         autoscalingv2.MetricValueStatus{Value: ptr(o.CurrentValue.DeepCopy()), AverageValue: o.AverageValue},
		}
	}
	if p := m.Pods; p != nil {
		out.Pods = &autoscalingv2.PodsMetricStatus{Metric: autoscalingv2.MetricIdentifier{Name: p.MetricName, Selector: p.Selector},
			Current: autoscalingv2.MetricValueStatus{AverageValue: ptr(p.CurrentAverageValue.DeepCopy())}}
	}
	if r := m.Resource; r != nil {
		out.Resource = &autoscalingv2.ResourceMetricStatus{Name: r.Name,
			Current: autoscalingv2.MetricValueStatus{AverageUtilization: r.CurrentAverageUtilization, AverageValue: ptr(r.CurrentAverageValue.DeepCopy())}}
	}
	if c := m.ContainerResource; c != nil {
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricStatus{Name: c.Name, Container: c.Container,
			Current: autoscalingv2.MetricValueStatus{AverageUtilization: c.CurrentAverageUtilization, AverageValue: ptr(c.CurrentAverageValue.DeepCopy())}}
	}
	if e := m.External; e != nil {
		out.External = &autoscalingv2.ExternalMetricStatus{Metric: autoscalingv2.MetricIdentifier{Name: e.MetricName, Selector: e.MetricSelector},
			Current: autoscalingv2.MetricValueStatus{Value: ptr(e.CurrentValue.DeepCopy()), AverageValue: e.CurrentAverageValue}}
	}
	return out
}
