// This file holds the benchmark of what InterPodAffinity and
// PodTopologySpread add to one scheduling cycle over 5,000 nodes holding
// 10,000 pods: for a pod without terms (PreFilter and PreScore only, which
// say Skip) and for a pod with required anti-affinity by hostname.

package interpodaffinity_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/interpodaffinity"
	"github.com/kplane/kplane/services/scheduler/plugins/podtopologyspread"
)

func BenchmarkCycle(b *testing.B) {
	nodes := make([]*framework.NodeInfo, 5000)
	for i := range nodes {
		nodes[i] = node(fmt.Sprintf("n%04d", i), fmt.Sprintf("z%d", i%3))
		for j := range 2 {
			rs := fmt.Sprintf("rs-%d", (i*2+j)%100)
			nodes[i].AddPod(pod("default", fmt.Sprintf("p%04d-%d", i, j), map[string]string{"rs": rs}))
		}
	}
	h := &fixture.Handle{Nodes: nodes}
	ipa, _ := interpodaffinity.New(nil, h)
	pts, _ := podtopologyspread.New(nil, h)
	plugins := []framework.Plugin{ipa, pts}
	cases := []struct {
		name string
		pod  *framework.PodInfo
	}{
		{name: "no terms", pod: fixture.Pod("p", "", "", func(p *corev1.Pod) { p.Metadata.Labels = map[string]string{"rs": "rs-1"} })},
		{name: "anti-affinity by hostname", pod: pod("default", "p", map[string]string{"rs": "rs-1"}, anti(term(hostKey, map[string]string{"rs": "rs-1"})))},
	}
	ctx := context.Background()
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				state := framework.NewCycleState()
				for _, p := range plugins {
					if s := p.(framework.PreFilterPlugin).PreFilter(ctx, state, tc.pod, nodes); s.IsSkip() {
						continue
					}
					for _, n := range nodes {
						p.(framework.FilterPlugin).Filter(ctx, state, tc.pod, n)
					}
				}
				for _, p := range plugins {
					if s := p.(framework.PreScorePlugin).PreScore(ctx, state, tc.pod, nodes); s.IsSkip() {
						continue
					}
					for _, n := range nodes {
						p.(framework.ScorePlugin).Score(ctx, state, tc.pod, n)
					}
				}
			}
		})
	}
}
