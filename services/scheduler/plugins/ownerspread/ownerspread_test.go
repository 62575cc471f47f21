// This file holds the test of the owner-spread score: nodes with fewer pods
// of the same owner score higher.

package ownerspread_test

import (
	"context"
	"slices"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/ownerspread"
)

func owned(name, owner string) *framework.PodInfo {
	return fixture.Pod(name, "", "", func(p *corev1.Pod) {
		if owner != "" {
			p.Metadata.OwnerReferences = []*metav1.OwnerReference{{Kind: "ReplicaSet", Name: owner, Uid: owner, Controller: new(true)}}
		}
	})
}

func TestScore(t *testing.T) {
	nodes := []*framework.NodeInfo{
		fixture.WithPods(fixture.Node("two", "4", "8Gi", nil), owned("a", "rs1"), owned("b", "rs1")),
		fixture.WithPods(fixture.Node("one", "4", "8Gi", nil), owned("c", "rs1"), owned("x", "rs2")),
		fixture.WithPods(fixture.Node("none", "4", "8Gi", nil), owned("y", "rs2")),
	}
	tests := []struct {
		name     string
		pod      *framework.PodInfo
		wantSkip bool
		want     []int64
	}{
		{name: "fewest replicas of the owner wins", pod: owned("p", "rs1"), want: []int64{0, 50, 100}},
		{name: "other owner", pod: owned("p", "rs2"), want: []int64{100, 0, 0}},
		{name: "no owner skips", pod: owned("p", ""), wantSkip: true},
		{name: "topologySpreadConstraints leave it to PodTopologySpread", pod: framework.NewPodInfo(func() *corev1.Pod {
			p := owned("p", "rs1").Pod
			p.Spec.TopologySpreadConstraints = []*corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: "ScheduleAnyway"}}
			return p
		}()), wantSkip: true},
	}
	p, _ := ownerspread.New(nil, nil)
	sp := p.(framework.ScorePlugin)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := p.(framework.PreScorePlugin).PreScore(context.Background(), nil, tc.pod, nodes)
			if s.IsSkip() != tc.wantSkip {
				t.Fatalf("PreScore: got %v, want skip=%v", s.Code(), tc.wantSkip)
			}
			if tc.wantSkip {
				return
			}
			scores := make(framework.NodeScoreList, len(nodes))
			for i, n := range nodes {
				v, _ := sp.Score(context.Background(), nil, tc.pod, n)
				scores[i] = framework.NodeScore{Name: n.Name, Score: v}
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
