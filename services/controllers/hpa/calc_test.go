// This file holds table tests of the controller's arithmetic: the replica
// calculation over pods ready, pending, without samples or deleted; the
// built-in limits; and the behavior's policies over recent scale events.
package hpa

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// calc is a controller with Kubernetes' default tunables and no informers,
// for the arithmetic alone.
func calc() *Controller {
	return &Controller{cfg: Config{Tolerance: 0.1, CPUInitializationPeriod: 5 * time.Minute, InitialReadinessDelay: 30 * time.Second,
		DownscaleStabilization: 5 * time.Minute}, recommendations: map[string][]recommendation{},
		scaleUpEvents: map[string][]scaleEvent{}, scaleDownEvents: map[string][]scaleEvent{}}
}

// testPod is a pod with one container requesting 1 CPU, in phase, Ready
// since started (when running).
func testPod(name, phase string, started time.Time) *corev1.Pod {
	p := &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: name}, Spec: &corev1.PodSpec{Containers: []*corev1.Container{
		{Name: "c", Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "1"}}}}},
		Status: &corev1.PodStatus{Phase: phase}}
	if phase == "Running" {
		p.Status.StartTime = timestamppb.New(started)
		p.Status.Conditions = []*corev1.PodCondition{{Type: "Ready", Status: "True", LastTransitionTime: timestamppb.New(started)}}
	}
	return p
}

func TestUtilizationReplicas(t *testing.T) {
	now := time.Now()
	long := now.Add(-time.Hour)
	c := calc()
	sample := func(milli int64) podMetric { return podMetric{value: milli, at: now} }
	for _, tc := range []struct {
		name     string
		current  int32
		pods     []*corev1.Pod
		metrics  map[string]podMetric
		want     int32
		wantUtil int32
	}{
		{name: "above target: ceil(ratio x ready)", current: 3,
			pods:    []*corev1.Pod{testPod("a", "Running", long), testPod("b", "Running", long), testPod("c", "Running", long)},
			metrics: map[string]podMetric{"a": sample(800), "b": sample(800), "c": sample(800)}, want: 5, wantUtil: 80},
		{name: "within the tolerance", current: 2,
			pods:    []*corev1.Pod{testPod("a", "Running", long), testPod("b", "Running", long)},
			metrics: map[string]podMetric{"a": sample(520), "b": sample(520)}, want: 2, wantUtil: 52},
		{name: "scale-up counts a pending pod as using nothing", current: 3,
			pods:    []*corev1.Pod{testPod("a", "Running", long), testPod("b", "Running", long), testPod("p", "Pending", long)},
			metrics: map[string]podMetric{"a": sample(1000), "b": sample(1000)}, want: 4, wantUtil: 100},
		{name: "scale-down counts a pod without a sample as using its request", current: 3,
			pods:    []*corev1.Pod{testPod("a", "Running", long), testPod("b", "Running", long), testPod("m", "Running", long)},
			metrics: map[string]podMetric{"a": sample(100), "b": sample(100)}, want: 3, wantUtil: 10},
		{name: "deleted and failed pods are ignored", current: 2,
			pods: []*corev1.Pod{testPod("a", "Running", long), testPod("f", "Failed", long),
				func() *corev1.Pod {
					p := testPod("d", "Running", long)
					p.Metadata.DeletionTimestamp = timestamppb.New(now)
					return p
				}()},
			metrics: map[string]podMetric{"a": sample(100), "f": sample(900), "d": sample(900)}, want: 1, wantUtil: 10},
		{name: "a CPU sample from before the pod became ready does not count", current: 2,
			pods: []*corev1.Pod{testPod("a", "Running", long), testPod("new", "Running", now.Add(time.Second))},
			// Counted as using nothing: 1500m of 2 CPUs is 75%, 1.5 x 2 pods.
			metrics: map[string]podMetric{"a": sample(1500), "new": sample(0)}, want: 3, wantUtil: 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, util, _, err := c.fromUtilization(tc.current, 50, "cpu", "", tc.metrics, tc.pods, now)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || util != tc.wantUtil {
				t.Errorf("got %d replicas at %d%%, want %d at %d%%", got, util, tc.want, tc.wantUtil)
			}
		})
	}
	_, _, _, err := c.fromUtilization(1, 50, "cpu", "", map[string]podMetric{"x": sample(1)},
		[]*corev1.Pod{{Metadata: &metav1.ObjectMeta{Name: "x"}, Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c"}}},
			Status: &corev1.PodStatus{Phase: "Running"}}}, now)
	if want := "did not receive metrics for targeted pods (pods might be unready)"; err == nil || err.Error() != want {
		t.Errorf("pod with no Ready condition: got %v, want %q", err, want)
	}
}

func TestAverageValueReplicas(t *testing.T) {
	now := time.Now()
	long := now.Add(-time.Hour)
	c := calc()
	got, avg, err := c.fromAverage(2, 200*1000*1000, "memory", map[string]podMetric{
		"a": {value: 400 * 1000 * 1000, at: now}, "b": {value: 200 * 1000 * 1000, at: now}},
		[]*corev1.Pod{testPod("a", "Running", long), testPod("b", "Running", long)}, now)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3 || avg != 300*1000*1000 {
		t.Errorf("got %d replicas at average %d, want 3 at 300M", got, avg)
	}
}

func TestLimitWithRules(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		current, desired, lo, hi int32
		want                     int32
		wantReason               string
	}{
		{name: "within", current: 2, desired: 3, lo: 1, hi: 10, want: 3, wantReason: "DesiredWithinRange"},
		{name: "scale-up limit: twice or 4", current: 3, desired: 20, lo: 1, hi: 10, want: 6, wantReason: "ScaleUpLimit"},
		{name: "max", current: 3, desired: 20, lo: 1, hi: 5, want: 5, wantReason: "TooManyReplicas"},
		{name: "min", current: 3, desired: 1, lo: 2, hi: 5, want: 2, wantReason: "TooFewReplicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason, _ := limitWithRules(tc.current, tc.desired, tc.lo, tc.hi)
			if got != tc.want || reason != tc.wantReason {
				t.Errorf("got %d %s, want %d %s", got, reason, tc.want, tc.wantReason)
			}
		})
	}
}

func TestPolicyLimit(t *testing.T) {
	now := time.Now()
	pol := func(typ string, v, period int32) *autoscalingv2.HPAScalingPolicy {
		return &autoscalingv2.HPAScalingPolicy{Type: typ, Value: v, PeriodSeconds: period}
	}
	rules := func(sel string, ps ...*autoscalingv2.HPAScalingPolicy) *autoscalingv2.HPAScalingRules {
		return &autoscalingv2.HPAScalingRules{SelectPolicy: proto.String(sel), Policies: ps}
	}
	for _, tc := range []struct {
		name    string
		current int32
		ups     []scaleEvent
		rules   *autoscalingv2.HPAScalingRules
		up      bool
		want    int32
	}{
		{name: "up, Max of 4 pods and 100%", current: 1, rules: rules("Max", pol("Pods", 4, 15), pol("Percent", 100, 15)), up: true, want: 5},
		{name: "up, Min of 4 pods and 100%", current: 1, rules: rules("Min", pol("Pods", 4, 15), pol("Percent", 100, 15)), up: true, want: 2},
		{name: "up, counted from the period's start", current: 4, ups: []scaleEvent{{change: 3, at: now.Add(-5 * time.Second)}},
			rules: rules("Max", pol("Pods", 4, 15)), up: true, want: 5},
		{name: "up, an event older than the period is not counted", current: 4, ups: []scaleEvent{{change: 3, at: now.Add(-time.Minute)}},
			rules: rules("Max", pol("Pods", 4, 15)), up: true, want: 8},
		{name: "down, Max of 50% and 1 pod", current: 10, rules: rules("Max", pol("Percent", 50, 60), pol("Pods", 1, 60)), want: 5},
		{name: "down, Min of 50% and 1 pod", current: 10, rules: rules("Min", pol("Percent", 50, 60), pol("Pods", 1, 60)), want: 9},
		{name: "disabled", current: 7, rules: rules("Disabled", pol("Pods", 1, 60)), up: true, want: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := policyLimit(tc.current, tc.ups, nil, tc.rules, tc.up); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestStabilizationWindows(t *testing.T) {
	c := calc()
	k := "ns/h"
	past := time.Now().Add(-30 * time.Second)
	c.recommendations[k] = []recommendation{{8, past}, {3, past}}
	for _, tc := range []struct {
		name                 string
		current, desired     int32
		upWindow, downWindow int32
		want                 int32
	}{
		// Within a 60 s scale-down window the highest recommendation (8) holds.
		{name: "down held by the window", current: 8, desired: 2, downWindow: 60, want: 8},
		// With a 10 s window the 30 s old ones no longer count.
		{name: "down once the window passed", current: 8, desired: 2, downWindow: 10, want: 2},
		// A 60 s scale-up window holds the lowest recent one (2, just recorded).
		{name: "up held by the window", current: 2, desired: 9, upWindow: 60, downWindow: 0, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, _ := c.stabilizeWithWindows(k, tc.current, tc.desired, tc.upWindow, tc.downWindow)
			if got != tc.want {
				t.Errorf("got %d, want %d (recommendations %v)", got, tc.want, fmt.Sprint(c.recommendations[k]))
			}
		})
	}
}
