// This file holds what the API service does with autoscaling/v2
// HorizontalPodAutoscalers beyond the generic registry: Kubernetes'
// defaults (SetDefaults_HorizontalPodAutoscaler), its strategy's create and
// update rules, and its validation with kube-apiserver v1.33.13's field
// paths and messages, with v1.33's default feature gates (HPAScaleToZero
// and HPAConfigurableTolerance off).
package apiserver

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kplane/kplane/internal/hpaconv"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
)

// Kubernetes' bounds on a behavior's periods and windows.
const (
	hpaMaxPeriodSeconds              = 1800
	hpaMaxStabilizationWindowSeconds = 3600
)

// defaultHPA is SetDefaults_HorizontalPodAutoscaler: minReplicas 1, a CPU
// utilization target of 80% when no metric is given, and a behavior's
// unset rules and fields filled from the controller's built-in rules.
func defaultHPA(o *autoscalingv2.HorizontalPodAutoscaler) {
	if o.Spec == nil {
		o.Spec = &autoscalingv2.HorizontalPodAutoscalerSpec{}
	}
	s := o.Spec
	if s.MinReplicas == nil {
		s.MinReplicas = proto.Int32(1)
	}
	if len(s.Metrics) == 0 {
		s.Metrics = []*autoscalingv2.MetricSpec{{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{
			Name: "cpu", Target: &autoscalingv2.MetricTarget{Type: "Utilization", AverageUtilization: proto.Int32(80)}}}}
	}
	for _, m := range s.Metrics {
		canonicalTarget(m.GetObject().GetTarget())
		canonicalTarget(m.GetPods().GetTarget())
		canonicalTarget(m.GetResource().GetTarget())
		canonicalTarget(m.GetContainerResource().GetTarget())
		canonicalTarget(m.GetExternal().GetTarget())
	}
	if b := s.Behavior; b != nil {
		b.ScaleUp = hpaRules(b.ScaleUp, &autoscalingv2.HPAScalingRules{
			StabilizationWindowSeconds: proto.Int32(0), SelectPolicy: proto.String("Max"),
			Policies: []*autoscalingv2.HPAScalingPolicy{{Type: "Pods", Value: 4, PeriodSeconds: 15}, {Type: "Percent", Value: 100, PeriodSeconds: 15}}})
		// The scale-down window stays unset: the controller's
		// --horizontal-pod-autoscaler-downscale-stabilization (300s) applies.
		b.ScaleDown = hpaRules(b.ScaleDown, &autoscalingv2.HPAScalingRules{
			SelectPolicy: proto.String("Max"),
			Policies:     []*autoscalingv2.HPAScalingPolicy{{Type: "Percent", Value: 100, PeriodSeconds: 15}}})
	}
}

// hpaRules fills what from leaves unset from def.
func hpaRules(from, def *autoscalingv2.HPAScalingRules) *autoscalingv2.HPAScalingRules {
	if from == nil {
		return def
	}
	if from.SelectPolicy != nil {
		def.SelectPolicy = from.SelectPolicy
	}
	if from.StabilizationWindowSeconds != nil {
		def.StabilizationWindowSeconds = from.StabilizationWindowSeconds
	}
	if from.Policies != nil {
		def.Policies = from.Policies
	}
	def.Tolerance = from.Tolerance
	return def
}

// canonicalTarget writes a target's quantities as Kubernetes stores them.
func canonicalTarget(t *autoscalingv2.MetricTarget) {
	if t == nil {
		return
	}
	if t.Value != nil {
		t.Value = proto.String(canonicalQuantity(t.GetValue()))
	}
	if t.AverageValue != nil {
		t.AverageValue = proto.String(canonicalQuantity(t.GetAverageValue()))
	}
}

// prepareHPA is the strategy's PrepareForCreate (old nil) and
// PrepareForUpdate: a new autoscaler's status is empty (the generic update
// keeps the stored one), and with HPAConfigurableTolerance off a tolerance
// is dropped unless the stored object already uses one; v1's round-trip
// annotations are dropped.
func prepareHPA(o, old *autoscalingv2.HorizontalPodAutoscaler) {
	// v1's round-trip annotations are never stored: Kubernetes' v2
	// conversion drops them, v2 holds their fields.
	if m := o.GetMetadata(); m != nil {
		m.Annotations = hpaconv.DropRoundTripAnnotations(m.Annotations)
	}
	if old == nil {
		o.Status = &autoscalingv2.HorizontalPodAutoscalerStatus{}
	}
	for _, r := range []*autoscalingv2.HPAScalingRules{old.GetSpec().GetBehavior().GetScaleUp(), old.GetSpec().GetBehavior().GetScaleDown()} {
		if r != nil && r.Tolerance != nil {
			return
		}
	}
	if b := o.GetSpec().GetBehavior(); b != nil {
		for _, r := range []*autoscalingv2.HPAScalingRules{b.ScaleUp, b.ScaleDown} {
			if r != nil {
				r.Tolerance = nil
			}
		}
	}
}

// validateHPA is ValidateHorizontalPodAutoscaler(Update) after the
// metadata. minReplicas may be 0 only if the stored object already had 0
// (HPAScaleToZero is off).
func validateHPA(o, old *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	s := o.GetSpec()
	if s == nil {
		s = &autoscalingv2.HorizontalPodAutoscalerSpec{}
	}
	lower := int32(1)
	if was := old.GetSpec(); was != nil && was.MinReplicas != nil && was.GetMinReplicas() == 0 {
		lower = 0
	}
	if s.MinReplicas != nil && s.GetMinReplicas() < lower {
		errs = append(errs, field.Invalid(p.Child("minReplicas"), s.GetMinReplicas(), fmt.Sprintf("must be greater than or equal to %d", lower)))
	}
	if s.GetMaxReplicas() < 1 {
		errs = append(errs, field.Invalid(p.Child("maxReplicas"), s.GetMaxReplicas(), "must be greater than 0"))
	}
	if s.MinReplicas != nil && s.GetMaxReplicas() < s.GetMinReplicas() {
		errs = append(errs, field.Invalid(p.Child("maxReplicas"), s.GetMaxReplicas(), "must be greater than or equal to `minReplicas`"))
	}
	errs = append(errs, validateCrossVersionRef(s.GetScaleTargetRef(), p.Child("scaleTargetRef"))...)
	errs = append(errs, validateHPAMetrics(s.GetMetrics(), p.Child("metrics"), s.MinReplicas)...)
	if b := s.GetBehavior(); b != nil {
		errs = append(errs, validateHPARules(b.ScaleUp, p.Child("behavior", "scaleUp"))...)
		errs = append(errs, validateHPARules(b.ScaleDown, p.Child("behavior", "scaleDown"))...)
	}
	return errs
}

// validateHPAStatus is ValidateHorizontalPodAutoscalerStatusUpdate's
// status checks.
func validateHPAStatus(o *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
	var errs field.ErrorList
	if n := o.GetStatus().GetCurrentReplicas(); n < 0 {
		errs = append(errs, field.Invalid(field.NewPath("status", "currentReplicas"), int64(n), "must be greater than or equal to 0"))
	}
	if n := o.GetStatus().GetDesiredReplicas(); n < 0 {
		errs = append(errs, field.Invalid(field.NewPath("status", "desiredReplicas"), int64(n), "must be greater than or equal to 0"))
	}
	return errs
}

func validateCrossVersionRef(ref *autoscalingv2.CrossVersionObjectReference, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct{ name, v string }{{"kind", ref.GetKind()}, {"name", ref.GetName()}} {
		if f.v == "" {
			errs = append(errs, field.Required(p.Child(f.name), ""))
			continue
		}
		for _, msg := range path.IsValidPathSegmentName(f.v) {
			errs = append(errs, field.Invalid(p.Child(f.name), f.v, msg))
		}
	}
	return errs
}

var (
	hpaMetricTypes = []string{"ContainerResource", "External", "Object", "Pods", "Resource"}
	hpaSelect      = []string{"Disabled", "Max", "Min"}
	hpaPolicyTypes = []string{"Percent", "Pods"}
)

func validateHPAMetrics(metrics []*autoscalingv2.MetricSpec, p *field.Path, minReplicas *int32) field.ErrorList {
	var errs field.ErrorList
	objectOrExternal := false
	for i, m := range metrics {
		errs = append(errs, validateMetricSpec(m, p.Index(i))...)
		objectOrExternal = objectOrExternal || m.GetType() == "Object" || m.GetType() == "External"
	}
	if minReplicas != nil && *minReplicas == 0 && !objectOrExternal {
		errs = append(errs, field.Forbidden(p, "must specify at least one Object or External metric to support scaling to zero replicas"))
	}
	return errs
}

func validateMetricSpec(m *autoscalingv2.MetricSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.GetType() == "" {
		errs = append(errs, field.Required(p.Child("type"), "must specify a metric source type"))
	}
	if !slices.Contains(hpaMetricTypes, m.GetType()) {
		errs = append(errs, field.NotSupported(p.Child("type"), m.GetType(), hpaMetricTypes))
	}
	// Only the first source set (in Kubernetes' order) is validated; the
	// others are refused below.
	var present []string
	if m.Object != nil {
		present = append(present, "object")
		if len(present) == 1 {
			o := m.Object
			errs = append(errs, validateCrossVersionRef(o.GetDescribedObject(), p.Child("object", "describedObject"))...)
			errs = append(errs, validateMetricID(o.GetMetric(), p.Child("object", "metric"))...)
			errs = append(errs, validateMetricTarget(o.GetTarget(), p.Child("object", "target"))...)
			if target(o.GetTarget()).Value == nil && target(o.GetTarget()).AverageValue == nil {
				errs = append(errs, field.Required(p.Child("object", "target", "averageValue"), "must set either a target value or averageValue"))
			}
		}
	}
	if m.External != nil {
		present = append(present, "external")
		if len(present) == 1 {
			e := m.External
			errs = append(errs, validateMetricID(e.GetMetric(), p.Child("external", "metric"))...)
			errs = append(errs, validateMetricTarget(e.GetTarget(), p.Child("external", "target"))...)
			t := target(e.GetTarget())
			if t.Value == nil && t.AverageValue == nil {
				errs = append(errs, field.Required(p.Child("external", "target", "averageValue"), "must set either a target value for metric or a per-pod target"))
			}
			if t.Value != nil && t.AverageValue != nil {
				errs = append(errs, field.Forbidden(p.Child("external", "target", "value"), "may not set both a target value for metric and a per-pod target"))
			}
		}
	}
	if m.Pods != nil {
		present = append(present, "pods")
		if len(present) == 1 {
			errs = append(errs, validateMetricID(m.Pods.GetMetric(), p.Child("pods", "metric"))...)
			errs = append(errs, validateMetricTarget(m.Pods.GetTarget(), p.Child("pods", "target"))...)
			if target(m.Pods.GetTarget()).AverageValue == nil {
				errs = append(errs, field.Required(p.Child("pods", "target", "averageValue"), "must specify a positive target averageValue"))
			}
		}
	}
	if m.Resource != nil {
		present = append(present, "resource")
		if len(present) == 1 {
			rp := p.Child("resource")
			if m.Resource.GetName() == "" {
				errs = append(errs, field.Required(rp.Child("name"), "must specify a resource name"))
			}
			errs = append(errs, validateResourceTarget(m.Resource.GetTarget(), rp.Child("target"))...)
		}
	}
	if m.ContainerResource != nil {
		present = append(present, "containerResource")
		if len(present) == 1 {
			c := m.ContainerResource
			cp := p.Child("containerResource")
			if c.GetName() == "" {
				errs = append(errs, field.Required(cp.Child("name"), "must specify a resource name"))
			} else {
				errs = append(errs, validateContainerResourceName(c.GetName(), cp.Child("name"))...)
			}
			if c.GetContainer() == "" {
				errs = append(errs, field.Required(cp.Child("container"), "must specify a container"))
			} else {
				for _, msg := range validation.IsDNS1123Label(c.GetContainer()) {
					errs = append(errs, field.Invalid(cp.Child("container"), c.GetContainer(), msg))
				}
			}
			errs = append(errs, validateResourceTarget(c.GetTarget(), cp.Child("target"))...)
		}
	}
	expected := ""
	switch m.GetType() {
	case "Object":
		expected = "object"
		if m.Object == nil {
			errs = append(errs, field.Required(p.Child("object"), "must populate information for the given metric source"))
		}
	case "Pods":
		expected = "pods"
		if m.Pods == nil {
			errs = append(errs, field.Required(p.Child("pods"), "must populate information for the given metric source"))
		}
	case "Resource":
		expected = "resource"
		if m.Resource == nil {
			errs = append(errs, field.Required(p.Child("resource"), "must populate information for the given metric source"))
		}
	case "External":
		expected = "external"
		if m.External == nil {
			errs = append(errs, field.Required(p.Child("external"), "must populate information for the given metric source"))
		}
	case "ContainerResource":
		expected = "containerResource"
		if m.ContainerResource == nil {
			errs = append(errs, field.Required(p.Child("containerResource"), "must populate information for the given metric source"))
		}
	default:
		// Kubernetes refuses an unknown type twice, here and above.
		errs = append(errs, field.NotSupported(p.Child("type"), m.GetType(), hpaMetricTypes))
	}
	if len(present) != 1 {
		for _, t := range present {
			if t != expected {
				errs = append(errs, field.Forbidden(p.Child(t), "must populate the given metric source only"))
			}
		}
	}
	return errs
}

// validateResourceTarget is the target rule of Resource and
// ContainerResource metrics: a utilization or an average value, not both.
func validateResourceTarget(t *autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	t = target(t)
	errs := validateMetricTarget(t, p)
	if t.AverageUtilization == nil && t.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("averageUtilization"), "must set either a target raw value or a target utilization"))
	}
	if t.AverageUtilization != nil && t.AverageValue != nil {
		errs = append(errs, field.Forbidden(p.Child("averageValue"), "may not set both a target raw value and a target utilization"))
	}
	return errs
}

// target is t, or an empty target where none was given.
func target(t *autoscalingv2.MetricTarget) *autoscalingv2.MetricTarget {
	if t == nil {
		return &autoscalingv2.MetricTarget{}
	}
	return t
}

func validateMetricTarget(t *autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	t = target(t)
	var errs field.ErrorList
	if t.GetType() == "" {
		errs = append(errs, field.Required(p.Child("type"), "must specify a metric target type"))
	}
	if !slices.Contains([]string{"Utilization", "Value", "AverageValue"}, t.GetType()) {
		errs = append(errs, field.Invalid(p.Child("type"), t.GetType(), "must be either Utilization, Value, or AverageValue"))
	}
	for _, q := range []struct {
		name string
		v    *string
	}{{"value", t.Value}, {"averageValue", t.AverageValue}} {
		if q.v == nil {
			continue
		}
		v, ferr := parseQuantity(*q.v, p.Child(q.name))
		if ferr != nil {
			errs = append(errs, ferr)
			continue
		}
		if v.Sign() != 1 {
			// Kubernetes prints the Quantity itself (%#v of the struct).
			errs = append(errs, field.Invalid(p.Child(q.name), &v, "must be positive"))
		}
	}
	if t.AverageUtilization != nil && t.GetAverageUtilization() < 1 {
		errs = append(errs, field.Invalid(p.Child("averageUtilization"), t.GetAverageUtilization(), "must be greater than 0"))
	}
	return errs
}

func validateMetricID(id *autoscalingv2.MetricIdentifier, p *field.Path) field.ErrorList {
	if id.GetName() == "" {
		return field.ErrorList{field.Required(p.Child("name"), "must specify a metric name")}
	}
	var errs field.ErrorList
	for _, msg := range path.IsValidPathSegmentName(id.GetName()) {
		errs = append(errs, field.Invalid(p.Child("name"), id.GetName(), msg))
	}
	return errs
}

func validateHPARules(r *autoscalingv2.HPAScalingRules, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if w := r.StabilizationWindowSeconds; w != nil && *w < 0 {
		errs = append(errs, field.Invalid(p.Child("stabilizationWindowSeconds"), *w, "must be greater than or equal to zero"))
	}
	if w := r.StabilizationWindowSeconds; w != nil && *w > hpaMaxStabilizationWindowSeconds {
		errs = append(errs, field.Invalid(p.Child("stabilizationWindowSeconds"), *w, fmt.Sprintf("must be less than or equal to %v", hpaMaxStabilizationWindowSeconds)))
	}
	if r.SelectPolicy != nil && !slices.Contains(hpaSelect, r.GetSelectPolicy()) {
		errs = append(errs, field.NotSupported(p.Child("selectPolicy"), r.GetSelectPolicy(), hpaSelect))
	}
	pp := p.Child("policies")
	if len(r.Policies) == 0 {
		errs = append(errs, field.Required(pp, "must specify at least one Policy"))
	}
	for i, pol := range r.Policies {
		ip := pp.Index(i)
		if !slices.Contains(hpaPolicyTypes, pol.GetType()) {
			errs = append(errs, field.NotSupported(ip.Child("type"), pol.GetType(), hpaPolicyTypes))
		}
		if pol.GetValue() <= 0 {
			errs = append(errs, field.Invalid(ip.Child("value"), pol.GetValue(), "must be greater than zero"))
		}
		if pol.GetPeriodSeconds() <= 0 {
			errs = append(errs, field.Invalid(ip.Child("periodSeconds"), pol.GetPeriodSeconds(), "must be greater than zero"))
		}
		if pol.GetPeriodSeconds() > hpaMaxPeriodSeconds {
			errs = append(errs, field.Invalid(ip.Child("periodSeconds"), pol.GetPeriodSeconds(), fmt.Sprintf("must be less than or equal to %v", hpaMaxPeriodSeconds)))
		}
	}
	if r.Tolerance != nil {
		if v, ferr := parseQuantity(r.GetTolerance(), p.Child("tolerance")); ferr != nil {
			errs = append(errs, ferr)
		} else if v.Sign() < 0 {
			errs = append(errs, field.Invalid(p.Child("tolerance"), v.String(), "must be greater than or equal to 0"))
		}
	}
	return errs
}
