// This file holds the Table cells kube-apiserver prints for
// HorizontalPodAutoscalers: the target, each metric as current/target (two
// at most, then "+ N more..."), the replica bounds and count.
package gateway

import (
	"fmt"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
)

func printHPA(obj *autoscalingv2.HorizontalPodAutoscaler, since string) printedRow {
	minPods := "<unset>"
	if obj.Spec.MinReplicas != nil {
		minPods = fmt.Sprintf("%d", *obj.Spec.MinReplicas)
	}
	ref := obj.Spec.ScaleTargetRef.Kind + "/" + obj.Spec.ScaleTargetRef.Name
	return row(obj.Name, ref, hpaTargets(obj.Spec.Metrics, obj.Status.CurrentMetrics), minPods,
		int64(obj.Spec.MaxReplicas), int64(obj.Status.CurrentReplicas), since)
}

// quantityString is Quantity.String, "<nil>" for an absent one as the
// pointer method prints it.
func quantityString(q *apiresource.Quantity) string {
	if q == nil {
		return "<nil>"
	}
	return q.String()
}

// hpaTargets is the TARGETS cell, as kube-apiserver's printer writes it.
func hpaTargets(specs []autoscalingv2.MetricSpec, statuses []autoscalingv2.MetricStatus) string {
	if len(specs) == 0 {
		return "<none>"
	}
	var list []string
	for i, spec := range specs {
		var st *autoscalingv2.MetricStatus
		if i < len(statuses) {
			st = &statuses[i]
		}
		list = append(list, hpaTarget(spec, st))
	}
	if len(list) > 2 {
		return strings.Join(list[:2], ", ") + fmt.Sprintf(" + %d more...", len(list)-2)
	}
	return strings.Join(list, ", ")
}

func hpaTarget(spec autoscalingv2.MetricSpec, st *autoscalingv2.MetricStatus) string {
	current := "<unknown>"
	switch spec.Type {
	case autoscalingv2.ExternalMetricSourceType, autoscalingv2.ObjectMetricSourceType:
		t, cur := &autoscalingv2.MetricTarget{}, (*autoscalingv2.MetricValueStatus)(nil)
		if spec.Type == autoscalingv2.ExternalMetricSourceType && spec.External != nil {
			t = &spec.External.Target
			if st != nil && st.External != nil {
				cur = &st.External.Current
			}
		} else if spec.Object != nil {
			t = &spec.Object.Target
			if st != nil && st.Object != nil {
				cur = &st.Object.Current
			}
		}
		if t.AverageValue != nil {
			if cur != nil && cur.AverageValue != nil {
				current = cur.AverageValue.String()
			}
			return fmt.Sprintf("%s/%s (avg)", current, t.AverageValue.String())
		}
		if cur != nil {
			current = quantityString(cur.Value)
		}
		return fmt.Sprintf("%s/%s", current, quantityString(t.Value))
	case autoscalingv2.PodsMetricSourceType:
		if st != nil && st.Pods != nil {
			current = quantityString(st.Pods.Current.AverageValue)
		}
		var target *apiresource.Quantity
		if spec.Pods != nil {
			target = spec.Pods.Target.AverageValue
		}
		return fmt.Sprintf("%s/%s", current, quantityString(target))
	case autoscalingv2.ResourceMetricSourceType, autoscalingv2.ContainerResourceMetricSourceType:
		var name string
		var t autoscalingv2.MetricTarget
		var cur *autoscalingv2.MetricValueStatus
		if spec.Type == autoscalingv2.ResourceMetricSourceType && spec.Resource != nil {
			name, t = spec.Resource.Name.String(), spec.Resource.Target
			if st != nil && st.Resource != nil {
				cur = &st.Resource.Current
			}
		} else if spec.ContainerResource != nil {
			name, t = spec.ContainerResource.Name.String(), spec.ContainerResource.Target
			if st != nil && st.ContainerResource != nil {
				cur = &st.ContainerResource.Current
			}
		}
		if t.AverageValue != nil {
			if cur != nil {
				current = quantityString(cur.AverageValue)
			}
			return fmt.Sprintf("%s: %s/%s", name, current, t.AverageValue.String())
		}
		if cur != nil && cur.AverageUtilization != nil {
			current = fmt.Sprintf("%d%%", *cur.AverageUtilization)
		}
		target := "<auto>"
		if t.AverageUtilization != nil {
			target = fmt.Sprintf("%d%%", *t.AverageUtilization)
		}
		return fmt.Sprintf("%s: %s/%s", name, current, target)
	}
	return "<unknown type>"
}
