// This file holds the tests of topology spread: the DoNotSchedule filter
// (maxSkew, minDomains, the node inclusion policies, matchLabelKeys, a
// node without the key), the correction for node copies, and the
// ScheduleAnyway score.

package podtopologyspread_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/podtopologyspread"
)

const (
	hostKey = "kubernetes.io/hostname"
	zoneKey = "topology.kubernetes.io/zone"
)

var web = map[string]string{"app": "web"}

// node is a node labelled with its hostname and, unless "", its zone,
// holding n pods labelled app=web, changed by mut.
func node(name, zone string, n int, mut func(*corev1.Node)) *framework.NodeInfo {
	ni := fixture.Node(name, "4", "8Gi", func(nd *corev1.Node) {
		nd.Metadata.Labels = map[string]string{hostKey: name}
		if zone != "" {
			nd.Metadata.Labels[zoneKey] = zone
		}
		if mut != nil {
			mut(nd)
		}
	})
	for i := range n {
		fixture.WithPods(ni, pod(fmt.Sprintf("%s-w%d", name, i), web))
	}
	return ni
}

func pod(name string, lbl map[string]string, cs ...*corev1.TopologySpreadConstraint) *framework.PodInfo {
	return fixture.Pod(name, "", "", func(p *corev1.Pod) {
		p.Metadata.Labels = lbl
		p.Spec.TopologySpreadConstraints = cs
	})
}

func spread(key string, maxSkew int32, when string, mut func(*corev1.TopologySpreadConstraint)) *corev1.TopologySpreadConstraint {
	c := &corev1.TopologySpreadConstraint{TopologyKey: key, MaxSkew: maxSkew, WhenUnsatisfiable: when,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
	if mut != nil {
		mut(c)
	}
	return c
}

func filter(t *testing.T, nodes []*framework.NodeInfo, p *framework.PodInfo) map[string]string {
	t.Helper()
	h := &fixture.Handle{Nodes: nodes}
	pl, _ := podtopologyspread.New(nil, h)
	state := framework.NewCycleState()
	s := pl.(framework.PreFilterPlugin).PreFilter(context.Background(), state, p, nodes)
	if s.IsSkip() {
		return map[string]string{"": "skip"}
	}
	if !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s.AsError())
	}
	out := map[string]string{}
	for _, n := range nodes {
		st := pl.(framework.FilterPlugin).Filter(context.Background(), state, p, n)
		out[n.Name] = st.Message()
		if st.Code() == framework.UnschedulableAndUnresolvable {
			out[n.Name] += " (unresolvable)"
		}
	}
	return out
}

func TestFilter(t *testing.T) {
	const (
		skew    = podtopologyspread.ReasonConstraints
		noLabel = podtopologyspread.ReasonMissingLabel + " (unresolvable)"
	)
	tainted := func(n *corev1.Node) {
		n.Spec.Taints = []*corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}}
	}
	gpu := func(n *corev1.Node) { n.Metadata.Labels["gpu"] = "true" }
	onGPU := func(p *framework.PodInfo) *framework.PodInfo {
		p.Pod.Spec.NodeSelector = map[string]string{"gpu": "true"}
		return framework.NewPodInfo(p.Pod)
	}
	tests := []struct {
		name  string
		nodes []*framework.NodeInfo
		pod   *framework.PodInfo
		want  map[string]string
	}{
		{
			name:  "no constraints: skipped",
			nodes: []*framework.NodeInfo{node("n1", "a", 0, nil)},
			pod:   pod("p", web),
			want:  map[string]string{"": "skip"},
		},
		{
			name:  "ScheduleAnyway only: the filter is skipped",
			nodes: []*framework.NodeInfo{node("n1", "a", 0, nil)},
			pod:   pod("p", web, spread(zoneKey, 1, "ScheduleAnyway", nil)),
			want:  map[string]string{"": "skip"},
		},
		{
			name:  "maxSkew 1 over zones 2/1/1: only the less loaded zones",
			nodes: []*framework.NodeInfo{node("n1", "a", 2, nil), node("n2", "b", 1, nil), node("n3", "c", 1, nil)},
			pod:   pod("p", web, spread(zoneKey, 1, "DoNotSchedule", nil)),
			want:  map[string]string{"n1": skew, "n2": "", "n3": ""},
		},
		{
			name:  "maxSkew 2 tolerates the zone one ahead",
			nodes: []*framework.NodeInfo{node("n1", "a", 2, nil), node("n2", "b", 1, nil)},
			pod:   pod("p", web, spread(zoneKey, 2, "DoNotSchedule", nil)),
			want:  map[string]string{"n1": "", "n2": ""},
		},
		{
			name:  "a pod the selector does not match adds nothing to the skew",
			nodes: []*framework.NodeInfo{node("n1", "a", 2, nil), node("n2", "b", 1, nil)},
			pod:   pod("p", nil, spread(zoneKey, 1, "DoNotSchedule", nil)),
			want:  map[string]string{"n1": "", "n2": ""},
		},
		{
			name:  "a node without the topology key is unresolvable",
			nodes: []*framework.NodeInfo{node("n1", "a", 0, nil), node("n2", "", 0, nil)},
			pod:   pod("p", web, spread(zoneKey, 1, "DoNotSchedule", nil)),
			want:  map[string]string{"n1": "", "n2": noLabel},
		},
		{
			name:  "minDomains above the domains present: the minimum is 0",
			nodes: []*framework.NodeInfo{node("n1", "a", 1, nil), node("n2", "b", 1, nil)},
			pod:   pod("p", web, spread(zoneKey, 1, "DoNotSchedule", func(c *corev1.TopologySpreadConstraint) { c.MinDomains = new(int32(3)) })),
			want:  map[string]string{"n1": skew, "n2": skew},
		},
		{
			name:  "nodeAffinityPolicy Honor (default): a node the pod may not use is no domain",
			nodes: []*framework.NodeInfo{node("n1", "a", 2, gpu), node("n2", "b", 0, nil)},
			pod:   onGPU(pod("p", web, spread(zoneKey, 1, "DoNotSchedule", nil))),
			want:  map[string]string{"n1": "", "n2": ""},
		},
		{
			name:  "nodeAffinityPolicy Ignore: every node's domain counts",
			nodes: []*framework.NodeInfo{node("n1", "a", 2, gpu), node("n2", "b", 0, nil)},
			pod:   onGPU(pod("p", web, spread(zoneKey, 1, "DoNotSchedule", func(c *corev1.TopologySpreadConstraint) { c.NodeAffinityPolicy = new("Ignore") }))),
			want:  map[string]string{"n1": skew, "n2": ""},
		},
		{
			name:  "nodeTaintsPolicy Ignore (default): a tainted node's domain counts",
			nodes: []*framework.NodeInfo{node("n1", "a", 1, nil), node("n2", "b", 0, tainted)},
			pod:   pod("p", web, spread(zoneKey, 1, "DoNotSchedule", nil)),
			want:  map[string]string{"n1": skew, "n2": ""},
		},
		{
			name:  "nodeTaintsPolicy Honor: an untolerated taint's domain does not",
			nodes: []*framework.NodeInfo{node("n1", "a", 1, nil), node("n2", "b", 0, tainted)},
			pod:   pod("p", web, spread(zoneKey, 1, "DoNotSchedule", func(c *corev1.TopologySpreadConstraint) { c.NodeTaintsPolicy = new("Honor") })),
			want:  map[string]string{"n1": "", "n2": ""},
		},
		{
			name: "matchLabelKeys counts only the pod's own revision",
			nodes: []*framework.NodeInfo{
				fixture.WithPods(node("n1", "a", 0, nil), pod("old1", map[string]string{"app": "web", "rev": "1"}), pod("old2", map[string]string{"app": "web", "rev": "1"})),
				node("n2", "b", 0, nil)},
			pod:  pod("p", map[string]string{"app": "web", "rev": "2"}, spread(zoneKey, 1, "DoNotSchedule", func(c *corev1.TopologySpreadConstraint) { c.MatchLabelKeys = []string{"rev"} })),
			want: map[string]string{"n1": "", "n2": ""},
		},
		{
			name:  "two constraints: zones are even, so the host constraint decides",
			nodes: []*framework.NodeInfo{node("n1", "a", 1, nil), node("n2", "a", 0, nil), node("n3", "b", 1, nil), node("n4", "b", 0, nil)},
			pod:   pod("p", web, spread(zoneKey, 1, "DoNotSchedule", nil), spread(hostKey, 1, "DoNotSchedule", nil)),
			want:  map[string]string{"n1": skew, "n2": "", "n3": skew, "n4": ""},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, filter(t, tc.nodes, tc.pod)); diff != "" {
				t.Errorf("reasons by node (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFilterOnChangedNode: preemption's copy of a node without a victim
// is judged with one pod fewer in its domain.
func TestFilterOnChangedNode(t *testing.T) {
	n1, n2 := node("n1", "a", 2, nil), node("n2", "b", 1, nil)
	nodes := []*framework.NodeInfo{n1, n2}
	h := &fixture.Handle{Nodes: nodes}
	pl, _ := podtopologyspread.New(nil, h)
	p := pod("p", web, spread(zoneKey, 1, "DoNotSchedule", nil))
	state := framework.NewCycleState()
	pl.(framework.PreFilterPlugin).PreFilter(context.Background(), state, p, nodes)
	f := pl.(framework.FilterPlugin)
	if s := f.Filter(context.Background(), state, p, n1); s.IsSuccess() {
		t.Fatal("snapshot n1: got success, want a skew rejection")
	}
	c := n1.Clone()
	c.RemovePod("default/n1-w0")
	if s := f.Filter(context.Background(), state, p, c); !s.IsSuccess() {
		t.Errorf("n1 without a victim: got %q, want success", s.Message())
	}
	if s := f.Filter(context.Background(), state, p, n1); s.IsSuccess() {
		t.Error("snapshot n1 after the copy: got success, want a skew rejection")
	}
}

func TestScore(t *testing.T) {
	tests := []struct {
		name     string
		nodes    []*framework.NodeInfo
		feasible int // the first feasible nodes are scored
		pod      *framework.PodInfo
		wantSkip bool
		want     map[string]int64
	}{
		{
			name:     "no ScheduleAnyway constraint: skipped",
			nodes:    []*framework.NodeInfo{node("n1", "a", 0, nil)},
			pod:      pod("p", web, spread(zoneKey, 1, "DoNotSchedule", nil)),
			wantSkip: true,
		},
		{
			name:  "by hostname: fewer matching pods score higher",
			nodes: []*framework.NodeInfo{node("n1", "a", 2, nil), node("n2", "a", 1, nil), node("n3", "a", 0, nil)},
			pod:   pod("p", web, spread(hostKey, 1, "ScheduleAnyway", nil)),
			// weight log(5); raw 3, 2, 0 → 100*(3+0-s)/3
			want: map[string]int64{"n1": 0, "n2": 33, "n3": 100},
		},
		{
			name:  "by zone: counts over every node of the zone, a node without the key scores 0",
			nodes: []*framework.NodeInfo{node("n1", "a", 1, nil), node("n2", "a", 1, nil), node("n3", "b", 0, nil), node("n4", "", 0, nil)},
			pod:   pod("p", web, spread(zoneKey, 1, "ScheduleAnyway", nil)),
			// weight log(4)=1.386; raw a: round(2*1.386)=3, b: 0
			want: map[string]int64{"n1": 0, "n2": 0, "n3": 100, "n4": 0},
		},
		{
			name:  "all equal: every node scores 100",
			nodes: []*framework.NodeInfo{node("n1", "a", 0, nil), node("n2", "b", 0, nil)},
			pod:   pod("p", web, spread(zoneKey, 1, "ScheduleAnyway", nil)),
			want:  map[string]int64{"n1": 100, "n2": 100},
		},
		{
			name:     "pods on nodes that are not feasible still count in a feasible node's zone",
			nodes:    []*framework.NodeInfo{node("n2", "a", 0, nil), node("n3", "b", 0, nil), node("n1", "a", 3, nil)},
			feasible: 2,
			pod:      pod("p", web, spread(zoneKey, 1, "ScheduleAnyway", nil)),
			want:     map[string]int64{"n2": 0, "n3": 100},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &fixture.Handle{Nodes: tc.nodes}
			pl, _ := podtopologyspread.New(nil, h)
			feasible := tc.nodes
			if tc.feasible > 0 {
				feasible = tc.nodes[:tc.feasible]
			}
			state := framework.NewCycleState()
			s := pl.(framework.PreScorePlugin).PreScore(context.Background(), state, tc.pod, feasible)
			if s.IsSkip() != tc.wantSkip {
				t.Fatalf("PreScore: got %v, want skip=%v", s.Code(), tc.wantSkip)
			}
			if tc.wantSkip {
				return
			}
			sp := pl.(framework.ScorePlugin)
			scores := make(framework.NodeScoreList, len(feasible))
			for i, n := range feasible {
				v, st := sp.Score(context.Background(), state, tc.pod, n)
				if !st.IsSuccess() {
					t.Fatal(st.AsError())
				}
				scores[i] = framework.NodeScore{Name: n.Name, Score: v}
			}
			sp.ScoreExtensions().NormalizeScore(context.Background(), state, tc.pod, scores)
			got := map[string]int64{}
			for _, s := range scores {
				got[s.Name] = s.Score
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}
