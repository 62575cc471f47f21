// This file holds the tests of node affinity: required terms and
// nodeSelector as a filter, preferred terms as a score.

package nodeaffinity_test

import (
	"context"
	"slices"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/nodeaffinity"
)

func labelled(name string, labels map[string]string) *framework.NodeInfo {
	return fixture.Node(name, "4", "8Gi", func(n *corev1.Node) { n.Metadata.Labels = labels })
}

func req(key, op string, values ...string) *corev1.NodeSelectorRequirement {
	return &corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func required(terms ...*corev1.NodeSelectorTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
}

func TestFilter(t *testing.T) {
	node := labelled("n1", map[string]string{"zone": "a", "disk": "ssd", "cores": "8"})
	tests := []struct {
		name string
		pod  func(*corev1.Pod)
		want bool
	}{
		{name: "no constraints", pod: nil, want: true},
		{name: "nodeSelector matches", pod: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "a"} }, want: true},
		{name: "nodeSelector value differs", pod: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "b"} }, want: false},
		{name: "nodeSelector label missing", pod: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"gpu": "true"} }, want: false},
		{name: "In", pod: required(&corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{req("zone", "In", "a", "b")}}), want: true},
		{name: "NotIn", pod: required(&corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{req("zone", "NotIn", "a")}}), want: false},
		{name: "Exists and DoesNotExist", pod: required(&corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{req("disk", "Exists"), req("gpu", "DoesNotExist")}}), want: true},
		{name: "Gt", pod: required(&corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{req("cores", "Gt", "4")}}), want: true},
		{name: "Lt", pod: required(&corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{req("cores", "Lt", "4")}}), want: false},
		{name: "terms are ORed", pod: required(
			&corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{req("zone", "In", "z")}},
			&corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{req("disk", "In", "ssd")}}), want: true},
		{name: "expressions are ANDed", pod: required(&corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{req("zone", "In", "a"), req("disk", "In", "hdd")}}), want: false},
		{name: "empty term matches nothing", pod: required(&corev1.NodeSelectorTerm{}), want: false},
		{name: "matchFields metadata.name", pod: required(&corev1.NodeSelectorTerm{MatchFields: []*corev1.NodeSelectorRequirement{req("metadata.name", "In", "n1")}}), want: true},
		{name: "selector and affinity both needed", pod: func(p *corev1.Pod) {
			required(&corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{req("zone", "In", "a")}})(p)
			p.Spec.NodeSelector = map[string]string{"disk": "hdd"}
		}, want: false},
	}
	p, _ := nodeaffinity.New(nil, nil)
	f := p.(framework.FilterPlugin)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := f.Filter(context.Background(), framework.NewCycleState(), fixture.Pod("p", "", "", tc.pod), node)
			if got := s.IsSuccess(); got != tc.want {
				t.Errorf("got fits=%v (%v), want %v", got, s.Reasons(), tc.want)
			}
			if !tc.want && (s.Code() != framework.UnschedulableAndUnresolvable || !slices.Equal(s.Reasons(), []string{nodeaffinity.Reason})) {
				t.Errorf("got %v %q, want UnschedulableAndUnresolvable %q", s.Code(), s.Reasons(), nodeaffinity.Reason)
			}
		})
	}
}

func TestScore(t *testing.T) {
	nodes := []*framework.NodeInfo{
		labelled("a", map[string]string{"zone": "a"}),
		labelled("b", map[string]string{"zone": "b", "disk": "ssd"}),
		labelled("c", nil),
	}
	pref := func(w int32, r *corev1.NodeSelectorRequirement) *corev1.PreferredSchedulingTerm {
		return &corev1.PreferredSchedulingTerm{Weight: w, Preference: &corev1.NodeSelectorTerm{MatchExpressions: []*corev1.NodeSelectorRequirement{r}}}
	}
	tests := []struct {
		name  string
		terms []*corev1.PreferredSchedulingTerm
		want  []int64
	}{
		{name: "one preference", terms: []*corev1.PreferredSchedulingTerm{pref(10, req("zone", "In", "a"))}, want: []int64{100, 0, 0}},
		{name: "weights add up and normalize", terms: []*corev1.PreferredSchedulingTerm{pref(20, req("zone", "In", "a")), pref(30, req("disk", "Exists")), pref(10, req("zone", "In", "b"))},
			want: []int64{50, 100, 0}},
	}
	p, _ := nodeaffinity.New(nil, nil)
	sp := p.(framework.ScorePlugin)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := fixture.Pod("p", "", "", func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: tc.terms}}
			})
			if s := p.(framework.PreScorePlugin).PreScore(context.Background(), nil, pod, nodes); !s.IsSuccess() {
				t.Fatalf("PreScore: got %v, want success", s.Code())
			}
			scores := make(framework.NodeScoreList, len(nodes))
			for i, n := range nodes {
				s, _ := sp.Score(context.Background(), nil, pod, n)
				scores[i] = framework.NodeScore{Name: n.Name, Score: s}
			}
			sp.ScoreExtensions().NormalizeScore(context.Background(), nil, pod, scores)
			var got []int64
			for _, s := range scores {
				got = append(got, s.Score)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("no preferences skips scoring", func(t *testing.T) {
		if s := p.(framework.PreScorePlugin).PreScore(context.Background(), nil, fixture.Pod("p", "", "", nil), nodes); !s.IsSkip() {
			t.Errorf("got %v, want Skip", s.Code())
		}
	})
}
