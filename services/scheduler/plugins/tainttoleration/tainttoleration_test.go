// This file holds the tests of taints and tolerations: the filter for
// NoSchedule taints, and the score for PreferNoSchedule ones.

package tainttoleration_test

import (
	"context"
	"slices"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/tainttoleration"
)

func tainted(taints ...*corev1.Taint) *framework.NodeInfo {
	return fixture.Node("n", "4", "8Gi", func(n *corev1.Node) { n.Spec.Taints = taints })
}

func tolerating(tols ...*corev1.Toleration) *framework.PodInfo {
	return fixture.Pod("p", "", "", func(p *corev1.Pod) { p.Spec.Tolerations = tols })
}

func TestFilter(t *testing.T) {
	gpu := &corev1.Taint{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}
	tests := []struct {
		name        string
		pod         *framework.PodInfo
		node        *framework.NodeInfo
		wantCode    framework.Code
		wantReasons []string
	}{
		{name: "untainted node", pod: tolerating(), node: tainted(), wantCode: framework.Success},
		{name: "untolerated NoSchedule", pod: tolerating(), node: tainted(gpu),
			wantCode: framework.UnschedulableAndUnresolvable, wantReasons: []string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{name: "Equal toleration", pod: tolerating(&corev1.Toleration{Key: "dedicated", Operator: "Equal", Value: "gpu", Effect: "NoSchedule"}), node: tainted(gpu), wantCode: framework.Success},
		{name: "wrong value", pod: tolerating(&corev1.Toleration{Key: "dedicated", Value: "cpu", Effect: "NoSchedule"}), node: tainted(gpu),
			wantCode: framework.UnschedulableAndUnresolvable, wantReasons: []string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{name: "Exists with empty effect", pod: tolerating(&corev1.Toleration{Key: "dedicated", Operator: "Exists"}), node: tainted(gpu), wantCode: framework.Success},
		{name: "wildcard Exists", pod: tolerating(&corev1.Toleration{Operator: "Exists"}), node: tainted(gpu), wantCode: framework.Success},
		{name: "NoExecute needs toleration", pod: tolerating(&corev1.Toleration{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}),
			node: tainted(&corev1.Taint{Key: "dedicated", Value: "gpu", Effect: "NoExecute"}), wantCode: framework.UnschedulableAndUnresolvable,
			wantReasons: []string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{name: "PreferNoSchedule does not filter", pod: tolerating(), node: tainted(&corev1.Taint{Key: "soft", Effect: "PreferNoSchedule"}), wantCode: framework.Success},
	}
	p, _ := tainttoleration.New(nil, nil)
	f := p.(framework.FilterPlugin)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := f.Filter(context.Background(), framework.NewCycleState(), tc.pod, tc.node)
			if s.Code() != tc.wantCode || !slices.Equal(s.Reasons(), tc.wantReasons) {
				t.Errorf("got %v %q, want %v %q", s.Code(), s.Reasons(), tc.wantCode, tc.wantReasons)
			}
		})
	}
}

func TestScore(t *testing.T) {
	soft := func(k string) *corev1.Taint { return &corev1.Taint{Key: k, Effect: "PreferNoSchedule"} }
	nodes := []*framework.NodeInfo{
		fixture.Node("clean", "4", "8Gi", nil),
		fixture.Node("one", "4", "8Gi", func(n *corev1.Node) { n.Spec.Taints = []*corev1.Taint{soft("a")} }),
		fixture.Node("two", "4", "8Gi", func(n *corev1.Node) { n.Spec.Taints = []*corev1.Taint{soft("a"), soft("b")} }),
	}
	tests := []struct {
		name string
		pod  *framework.PodInfo
		want []int64
	}{
		{name: "fewer untolerated soft taints score higher", pod: tolerating(), want: []int64{100, 50, 0}},
		{name: "tolerated soft taints do not count", pod: tolerating(&corev1.Toleration{Key: "a", Operator: "Exists"}), want: []int64{100, 100, 0}},
	}
	p, _ := tainttoleration.New(nil, nil)
	sp := p.(framework.ScorePlugin)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scores := make(framework.NodeScoreList, len(nodes))
			for i, n := range nodes {
				s, st := sp.Score(context.Background(), nil, tc.pod, n)
				if !st.IsSuccess() {
					t.Fatal(st.AsError())
				}
				scores[i] = framework.NodeScore{Name: n.Name, Score: s}
			}
			sp.ScoreExtensions().NormalizeScore(context.Background(), nil, tc.pod, scores)
			var got []int64
			for _, s := range scores {
				got = append(got, s.Score)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
