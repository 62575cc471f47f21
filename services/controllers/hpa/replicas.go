// This file holds the replica calculation: each metric's proposal from the
// pods' resource metrics (Kubernetes' ReplicaCalculator for Resource and
// ContainerResource metrics: the tolerance, pods missing metrics or not
// ready, the direction checks), and the largest proposal of all metrics.

package hpa

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// podMetric is one pod's usage of a resource, in milli-units.
type podMetric struct {
	value  int64
	at     time.Time
	window time.Duration
}

// computeReplicasForMetrics is the largest replica count the metrics
// propose (-1 and an error when none could be computed, or when an invalid
// metric would be hidden by a scale-down) and the metric that proposed it.
func (c *Controller) computeReplicasForMetrics(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, scale *autoscalingv1.Scale) (int32, string, []*autoscalingv2.MetricStatus, error) {
	sel := scale.GetStatus().GetSelector()
	if sel == "" {
		c.cfg.Recorder.Eventf(hpa, "Warning", "SelectorRequired", "selector is required")
		setCondition(hpa, "ScalingActive", "False", "InvalidSelector", "the HPA target's scale is missing a selector")
		return -1, "", nil, errors.New("selector is required")
	}
	selector, err := labels.Parse(sel)
	if err != nil {
		msg := fmt.Sprintf("couldn't convert selector into a corresponding internal selector object: %v", err)
		c.cfg.Recorder.Eventf(hpa, "Warning", "InvalidSelector", "%s", msg)
		setCondition(hpa, "ScalingActive", "False", "InvalidSelector", "%s", msg)
		return -1, "", nil, errors.New(msg)
	}
	specs := hpa.Spec.GetMetrics()
	statuses := make([]*autoscalingv2.MetricStatus, len(specs))
	var replicas int32
	var metric string
	invalid := 0
	var firstErr error
	var firstCond *autoscalingv2.HorizontalPodAutoscalerCondition
	for i, spec := range specs {
		statuses[i] = &autoscalingv2.MetricStatus{}
		proposal, name, cond, err := c.computeReplicasForMetric(ctx, hpa, spec, scale.GetSpec().GetReplicas(), selector, statuses[i])
		if err != nil {
			if invalid == 0 {
				firstErr, firstCond = err, cond
			}
			invalid++
			continue
		}
		if replicas == 0 || proposal > replicas {
			replicas, metric = proposal, name
		}
	}
	if firstErr != nil {
		firstErr = fmt.Errorf("invalid metrics (%v invalid out of %v), first error is: %w", invalid, len(specs), firstErr)
	}
	if invalid >= len(specs) || (invalid > 0 && replicas < scale.GetSpec().GetReplicas()) {
		if firstCond != nil {
			setCondition(hpa, firstCond.Type, firstCond.Status, firstCond.Reason, "%s", firstCond.Message)
		}
		return -1, "", statuses, firstErr
	}
	setCondition(hpa, "ScalingActive", "True", "ValidMetricFound", "the HPA was able to successfully calculate a replica count from %s", metric)
	return replicas, metric, statuses, firstErr
}

// computeReplicasForMetric is one metric's proposal; status gets its
// current value.
func (c *Controller) computeReplicasForMetric(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, spec *autoscalingv2.MetricSpec, current int32,
	selector labels.Selector, status *autoscalingv2.MetricStatus) (int32, string, *autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	switch spec.GetType() {
	case "Resource":
		r := spec.GetResource()
		n, v, name, err := c.resourceProposal(ctx, hpa, current, r.GetTarget(), r.GetName(), "", selector, false)
		if err != nil {
			cond := c.unableCondition(hpa, "FailedGetResourceMetric", err)
			return 0, "", cond, fmt.Errorf("failed to get %s resource metric value: %w", r.GetName(), err)
		}
		*status = autoscalingv2.MetricStatus{Type: "Resource", Resource: &autoscalingv2.ResourceMetricStatus{Name: r.GetName(), Current: v}}
		return n, name, nil, nil
	case "ContainerResource":
		r := spec.GetContainerResource()
		n, v, name, err := c.resourceProposal(ctx, hpa, current, r.GetTarget(), r.GetName(), r.GetContainer(), selector, true)
		if err != nil {
			cond := c.unableCondition(hpa, "FailedGetContainerResourceMetric", err)
			return 0, "", cond, fmt.Errorf("failed to get %s container metric value: %w", r.GetContainer(), err)
		}
		*status = autoscalingv2.MetricStatus{Type: "ContainerResource", ContainerResource: &autoscalingv2.ContainerResourceMetricStatus{
			Name: r.GetName(), Container: r.GetContainer(), Current: v}}
		return n, name, nil, nil
	case "Pods", "Object", "External":
		// kplane serves no custom or external metrics API.
		var name string
		switch spec.GetType() {
		case "Pods":
			name = spec.GetPods().GetMetric().GetName()
		case "Object":
			name = spec.GetObject().GetMetric().GetName()
		default:
			name = spec.GetExternal().GetMetric().GetName()
		}
		api := "custom.metrics.k8s.io"
		if spec.GetType() == "External" {
			api = "external.metrics.k8s.io"
		}
		err := fmt.Errorf("unable to get metric %s: the %s API is not served by kplane", name, api)
		cond := c.unableCondition(hpa, "FailedGet"+spec.GetType()+"Metric", err)
		return 0, "", cond, fmt.Errorf("failed to get %s metric value: %w", lower(spec.GetType()), err)
	}
	err := fmt.Errorf("unknown metric source type %q", spec.GetType())
	return 0, "", c.unableCondition(hpa, "InvalidMetricSourceType", err), err
}

// resourceProposal is a Resource (container "") or ContainerResource
// metric's proposal, its current value and its name in the rescale reason.
func (c *Controller) resourceProposal(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, current int32, target *autoscalingv2.MetricTarget,
	res, container string, selector labels.Selector, isContainer bool) (int32, *autoscalingv2.MetricValueStatus, string, error) {
	ns := hpa.GetMetadata().GetNamespace()
	if target.AverageValue != nil {
		q, err := resource.ParseQuantity(target.GetAverageValue())
		if err != nil {
			return 0, nil, "", fmt.Errorf("target averageValue %q: %w", target.GetAverageValue(), err)
		}
		n, usage, err := c.rawReplicas(ctx, current, q.MilliValue(), res, ns, selector, container)
		if err != nil {
			return 0, nil, "", fmt.Errorf("failed to get %s usage: %w", res, err)
		}
		return n, &autoscalingv2.MetricValueStatus{AverageValue: proto.String(resource.NewMilliQuantity(usage, resource.DecimalSI).String())}, res + " resource", nil
	}
	if target.AverageUtilization == nil {
		return 0, nil, "", errors.New("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set")
	}
	n, util, raw, err := c.utilizationReplicas(ctx, current, target.GetAverageUtilization(), res, ns, selector, container)
	if err != nil {
		return 0, nil, "", fmt.Errorf("failed to get %s utilization: %w", res, err)
	}
	name := res + " resource utilization (percentage of request)"
	if isContainer {
		name = res + " container resource utilization (percentage of request)"
	}
	return n, &autoscalingv2.MetricValueStatus{AverageUtilization: proto.Int32(util),
		AverageValue: proto.String(resource.NewMilliQuantity(raw, resource.DecimalSI).String())}, name, nil
}

// within reports whether ratio is inside the tolerance (no scaling).
func (c *Controller) within(ratio float64) bool {
	return 1.0-c.cfg.Tolerance <= ratio && ratio <= 1.0+c.cfg.Tolerance
}

// podsAndMetrics reads the metrics and the pods the selector picks.
func (c *Controller) podsAndMetrics(ctx context.Context, res, ns string, selector labels.Selector, container string) (map[string]podMetric, []*corev1.Pod, error) {
	metrics, err := c.cfg.Metrics.PodUsage(ctx, ns, selector, res, container)
	if err != nil {
		return nil, nil, fmt.Errorf("unable to get metrics for resource %s: %w", res, err)
	}
	var pods []*corev1.Pod
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(ns) {
		if selector.Matches(labels.Set(p.GetMetadata().GetLabels())) {
			pods = append(pods, p)
		}
	}
	if len(pods) == 0 {
		return nil, nil, errors.New("no pods returned by selector while calculating replica count")
	}
	return metrics, pods, nil
}

// utilizationReplicas is Kubernetes' GetResourceReplicas: the proposal for
// a utilization target, the utilization and the average raw usage.
func (c *Controller) utilizationReplicas(ctx context.Context, current, target int32, res, ns string, selector labels.Selector, container string) (int32, int32, int64, error) {
	metrics, pods, err := c.podsAndMetrics(ctx, res, ns, selector, container)
	if err != nil {
		return 0, 0, 0, err
	}
	return c.fromUtilization(current, target, res, container, metrics, pods, time.Now())
}

// fromUtilization is utilizationReplicas' calculation over the samples and
// pods read at now.
func (c *Controller) fromUtilization(current, target int32, res, container string, metrics map[string]podMetric, pods []*corev1.Pod, now time.Time) (int32, int32, int64, error) {
	ready, unready, missing, ignored := c.groupPods(pods, metrics, res, now)
	for n := range ignored {
		delete(metrics, n)
	}
	for n := range unready {
		delete(metrics, n)
	}
	if len(metrics) == 0 {
		return 0, 0, 0, errors.New("did not receive metrics for targeted pods (pods might be unready)")
	}
	requests, err := podRequests(pods, container, res)
	if err != nil {
		return 0, 0, 0, err
	}
	ratio, util, raw, err := utilizationRatio(metrics, requests, target)
	if err != nil {
		return 0, 0, 0, err
	}
	upWithUnready := len(unready) > 0 && ratio > 1.0
	if !upWithUnready && len(missing) == 0 {
		if c.within(ratio) {
			return current, util, raw, nil
		}
		return int32(math.Ceil(ratio * float64(ready))), util, raw, nil
	}
	if len(missing) > 0 {
		if ratio < 1.0 {
			// On a scale-down a pod without metrics counts as using its
			// request (or the target, above 100%).
			fallback := int64(max(100, target))
			for n := range missing {
				metrics[n] = podMetric{value: requests[n] * fallback / 100}
			}
		} else if ratio > 1.0 {
			for n := range missing {
				metrics[n] = podMetric{}
			}
		}
	}
	if upWithUnready {
		for n := range unready {
			metrics[n] = podMetric{}
		}
	}
	newRatio, _, _, err := utilizationRatio(metrics, requests, target)
	if err != nil {
		return 0, util, raw, err
	}
	if c.within(newRatio) || (ratio < 1.0 && newRatio > 1.0) || (ratio > 1.0 && newRatio < 1.0) {
		return current, util, raw, nil
	}
	n := int32(math.Ceil(newRatio * float64(len(metrics))))
	if (newRatio < 1.0 && n > current) || (newRatio > 1.0 && n < current) {
		return current, util, raw, nil
	}
	return n, util, raw, nil
}

// rawReplicas is Kubernetes' GetRawResourceReplicas: the proposal for an
// average value target (milli-units) and the average usage.
func (c *Controller) rawReplicas(ctx context.Context, current int32, target int64, res, ns string, selector labels.Selector, container string) (int32, int64, error) {
	metrics, pods, err := c.podsAndMetrics(ctx, res, ns, selector, container)
	if err != nil {
		return 0, 0, err
	}
	return c.fromAverage(current, target, res, metrics, pods, time.Now())
}

// fromAverage is rawReplicas' calculation over the samples and pods read
// at now.
func (c *Controller) fromAverage(current int32, target int64, res string, metrics map[string]podMetric, pods []*corev1.Pod, now time.Time) (int32, int64, error) {
	ready, unready, missing, ignored := c.groupPods(pods, metrics, res, now)
	for n := range ignored {
		delete(metrics, n)
	}
	for n := range unready {
		delete(metrics, n)
	}
	if len(metrics) == 0 {
		return 0, 0, errors.New("did not receive metrics for targeted pods (pods might be unready)")
	}
	ratio, usage := usageRatio(metrics, target)
	upWithUnready := len(unready) > 0 && ratio > 1.0
	if !upWithUnready && len(missing) == 0 {
		if c.within(ratio) {
			return current, usage, nil
		}
		return int32(math.Ceil(ratio * float64(ready))), usage, nil
	}
	if len(missing) > 0 {
		if ratio < 1.0 {
			for n := range missing {
				metrics[n] = podMetric{value: target}
			}
		} else if ratio > 1.0 {
			for n := range missing {
				metrics[n] = podMetric{}
			}
		}
	}
	if upWithUnready {
		for n := range unready {
			metrics[n] = podMetric{}
		}
	}
	newRatio, _ := usageRatio(metrics, target)
	if c.within(newRatio) || (ratio < 1.0 && newRatio > 1.0) || (ratio > 1.0 && newRatio < 1.0) {
		return current, usage, nil
	}
	n := int32(math.Ceil(newRatio * float64(len(metrics))))
	if (newRatio < 1.0 && n > current) || (newRatio > 1.0 && n < current) {
		return current, usage, nil
	}
	return n, usage, nil
}

// groupPods sorts the pods as Kubernetes does: deleted and failed pods are
// ignored; pending ones unready; those without a sample missing; for CPU,
// a pod in its initialization period counts only once ready for a whole
// sample window, and a later one unless it has never been ready.
func (c *Controller) groupPods(pods []*corev1.Pod, metrics map[string]podMetric, res string, now time.Time) (ready int, unready, missing, ignored map[string]bool) {
	unready, missing, ignored = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, p := range pods {
		name := p.GetMetadata().GetName()
		if p.GetMetadata().GetDeletionTimestamp() != nil || p.GetStatus().GetPhase() == "Failed" {
			ignored[name] = true
			continue
		}
		if p.GetStatus().GetPhase() == "Pending" {
			unready[name] = true
			continue
		}
		m, ok := metrics[name]
		if !ok {
			missing[name] = true
			continue
		}
		if res == "cpu" {
			var cond *corev1.PodCondition
			for _, x := range p.GetStatus().GetConditions() {
				if x.GetType() == "Ready" {
					cond = x
				}
			}
			var notReady bool
			if cond == nil || p.GetStatus().GetStartTime() == nil {
				notReady = true
			} else {
				start, changed := p.GetStatus().GetStartTime().AsTime(), cond.GetLastTransitionTime().AsTime()
				if start.Add(c.cfg.CPUInitializationPeriod).After(now) {
					notReady = cond.GetStatus() == "False" || m.at.Before(changed.Add(m.window))
				} else {
					notReady = cond.GetStatus() == "False" && start.Add(c.cfg.InitialReadinessDelay).After(changed)
				}
			}
			if notReady {
				unready[name] = true
				continue
			}
		}
		ready++
	}
	return ready, unready, missing, ignored
}

// podRequests is each pod's request of res (its containers', or the one
// container's), in milli-units; a container without one is an error.
func podRequests(pods []*corev1.Pod, container, res string) (map[string]int64, error) {
	out := make(map[string]int64, len(pods))
	for _, p := range pods {
		cs := append([]*corev1.Container(nil), p.GetSpec().GetContainers()...)
		for _, ic := range p.GetSpec().GetInitContainers() {
			if ic.GetRestartPolicy() == "Always" {
				cs = append(cs, ic)
			}
		}
		var sum int64
		for _, ct := range cs {
			if container != "" && container != ct.GetName() {
				continue
			}
			v, ok := ct.GetResources().GetRequests()[res]
			if !ok {
				return nil, fmt.Errorf("missing request for %s in container %s of Pod %s", res, ct.GetName(), p.GetMetadata().GetName())
			}
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("request for %s in container %s of Pod %s: %w", res, ct.GetName(), p.GetMetadata().GetName(), err)
			}
			sum += q.MilliValue()
		}
		out[p.GetMetadata().GetName()] = sum
	}
	return out, nil
}

// utilizationRatio is the pods' usage over their requests, against target.
func utilizationRatio(metrics map[string]podMetric, requests map[string]int64, target int32) (float64, int32, int64, error) {
	var usage, requested int64
	n := 0
	for name, m := range metrics {
		r, ok := requests[name]
		if !ok {
			continue
		}
		usage += m.value
		requested += r
		n++
	}
	if requested == 0 {
		return 0, 0, 0, errors.New("no metrics returned matched known pods")
	}
	util := int32(usage * 100 / requested)
	return float64(util) / float64(target), util, usage / int64(n), nil
}

// usageRatio is the pods' average usage against target.
func usageRatio(metrics map[string]podMetric, target int64) (float64, int64) {
	var sum int64
	for _, m := range metrics {
		sum += m.value
	}
	avg := sum / int64(len(metrics))
	return float64(avg) / float64(target), avg
}
