// This file holds the test of preemption for inter-pod anti-affinity and
// topology spread: the filters judge the node without its victims by its
// own pods, and only the pods that break the rule are evicted.

package defaultpreemption_test

import (
	"context"
	"strings"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/defaultpreemption"
	"github.com/kplane/kplane/services/scheduler/plugins/interpodaffinity"
	"github.com/kplane/kplane/services/scheduler/plugins/podtopologyspread"
)

func TestCandidatesForAffinityAndSpread(t *testing.T) {
	web := map[string]string{"app": "web"}
	labelled := func(lbl map[string]string, muts ...func(*corev1.Pod)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Metadata.Labels = lbl
			for _, m := range muts {
				m(p)
			}
		}
	}
	sel := &metav1.LabelSelector{MatchLabels: web}
	antiWeb := func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{
			{TopologyKey: "kubernetes.io/hostname", LabelSelector: sel}}}}
	}
	spreadWeb := func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = []*corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
			WhenUnsatisfiable: "DoNotSchedule", LabelSelector: sel, MinDomains: new(int32(2))}}
	}
	host := func(name string, pods ...*framework.PodInfo) *framework.NodeInfo {
		return fixture.WithPods(fixture.Node(name, "4", "8Gi", func(n *corev1.Node) {
			n.Metadata.Labels = map[string]string{"kubernetes.io/hostname": name}
		}), pods...)
	}
	tests := []struct {
		name  string
		pod   *framework.PodInfo
		nodes []*framework.NodeInfo
		want  string // the chosen "node: victims", "" for none
	}{
		{
			name:  "the pod's anti-affinity: the lower-priority match goes, the other pod stays",
			pod:   fixture.Pod("p", "", "", labelled(web, prio(100), antiWeb)),
			nodes: []*framework.NodeInfo{host("n1", fixture.Pod("low-web", "", "", labelled(web, prio(1))), fixture.Pod("low-db", "", "", labelled(nil, prio(1))))},
			want:  "n1: low-web",
		},
		{
			name:  "a placed pod's anti-affinity: the pod holding it goes",
			pod:   fixture.Pod("p", "", "", labelled(web, prio(100))),
			nodes: []*framework.NodeInfo{host("n1", fixture.Pod("low-guard", "", "", labelled(nil, prio(1), antiWeb)))},
			want:  "n1: low-guard",
		},
		{
			name:  "a match of higher priority cannot be evicted",
			pod:   fixture.Pod("p", "", "", labelled(web, prio(100), antiWeb)),
			nodes: []*framework.NodeInfo{host("n1", fixture.Pod("high-web", "", "", labelled(web, prio(1000))))},
			want:  "",
		},
		{
			name: "spread by hostname with minDomains 2 on the one node: the match goes, the other pod stays",
			pod:  fixture.Pod("p", "", "", labelled(web, prio(100), spreadWeb)),
			nodes: []*framework.NodeInfo{
				host("n1", fixture.Pod("w1", "", "", labelled(web, prio(1))), fixture.Pod("x", "", "", labelled(nil, prio(1))))},
			want: "n1: w1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &fixture.Handle{Nodes: tc.nodes}
			ipa, _ := interpodaffinity.New(nil, h)
			pts, _ := podtopologyspread.New(nil, h)
			h.Filters = []framework.FilterPlugin{ipa.(framework.FilterPlugin), pts.(framework.FilterPlugin)}
			ctx := context.Background()
			state := framework.NewCycleState()
			statuses := framework.NodeToStatus{}
			for _, pl := range []framework.PreFilterPlugin{ipa.(framework.PreFilterPlugin), pts.(framework.PreFilterPlugin)} {
				if s := pl.PreFilter(ctx, state, tc.pod, tc.nodes); s.IsSkip() {
					state.SkipFilter[pl.Name()] = true
				}
			}
			active := slicesWithout(h.Filters, state.SkipFilter)
			h.Filters = active
			for _, n := range tc.nodes {
				if s := h.RunFilterPlugins(ctx, state, tc.pod, n); !s.IsSuccess() {
					statuses[n.Name] = s
				}
			}
			cands, err := defaultpreemption.FindCandidates(ctx, h, state, tc.pod, statuses)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if best := defaultpreemption.PickCandidate(cands); best != nil {
				var names []string
				for _, v := range best.Victims {
					names = append(names, v.Pod.GetMetadata().GetName())
				}
				got = best.Node + ": " + strings.Join(names, ",")
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func slicesWithout(fs []framework.FilterPlugin, skip map[string]bool) []framework.FilterPlugin {
	var out []framework.FilterPlugin
	for _, f := range fs {
		if !skip[f.Name()] {
			out = append(out, f)
		}
	}
	return out
}
