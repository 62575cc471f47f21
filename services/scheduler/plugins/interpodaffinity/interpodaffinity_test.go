// This file holds the tests of inter-pod affinity: the filter's three
// rules with Kubernetes' reasons, namespaces and selectors, the correction
// for node copies preemption makes, and the score's normalization.

package interpodaffinity_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/interpodaffinity"
)

const (
	hostKey = "kubernetes.io/hostname"
	zoneKey = "topology.kubernetes.io/zone"
)

// node is a node labelled with its hostname and, unless "", its zone.
func node(name, zone string, pods ...*framework.PodInfo) *framework.NodeInfo {
	n := fixture.Node(name, "4", "8Gi", func(n *corev1.Node) {
		n.Metadata.Labels = map[string]string{hostKey: name}
		if zone != "" {
			n.Metadata.Labels[zoneKey] = zone
		}
	})
	return fixture.WithPods(n, pods...)
}

// pod is namespace/name with labels, changed by muts.
func pod(ns, name string, lbl map[string]string, muts ...func(*corev1.Pod)) *framework.PodInfo {
	return fixture.Pod(name, "", "", func(p *corev1.Pod) {
		p.Metadata.Namespace, p.Metadata.Labels = ns, lbl
		p.Spec.Affinity = &corev1.Affinity{}
		for _, m := range muts {
			m(p)
		}
	})
}

func term(key string, match map[string]string) *corev1.PodAffinityTerm {
	return &corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: match}}
}

func affinity(terms ...*corev1.PodAffinityTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}
	}
}

func anti(terms ...*corev1.PodAffinityTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}
	}
}

func preferred(weight int32, t *corev1.PodAffinityTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []*corev1.WeightedPodAffinityTerm{{Weight: weight, PodAffinityTerm: t}}}
	}
}

func preferredAnti(weight int32, t *corev1.PodAffinityTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []*corev1.WeightedPodAffinityTerm{{Weight: weight, PodAffinityTerm: t}}}
	}
}

var web = map[string]string{"app": "web"}

// filter runs PreFilter, then Filter on every node: "skip" when PreFilter
// skips, else each node's reason ("" when it fits).
func filter(t *testing.T, h *fixture.Handle, p *framework.PodInfo) map[string]string {
	t.Helper()
	pl, err := interpodaffinity.New(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	state := framework.NewCycleState()
	s := pl.(framework.PreFilterPlugin).PreFilter(context.Background(), state, p, h.Nodes)
	if s.IsSkip() {
		return map[string]string{"": "skip"}
	}
	if !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s.AsError())
	}
	out := map[string]string{}
	for _, n := range h.Nodes {
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
		rAnti = interpodaffinity.ReasonAntiAffinity
		rAff  = interpodaffinity.ReasonAffinity + " (unresolvable)"
		rEx   = interpodaffinity.ReasonExistingAntiRule
	)
	tests := []struct {
		name  string
		nodes []*framework.NodeInfo
		ns    map[string]map[string]string
		pod   *framework.PodInfo
		want  map[string]string
	}{
		{
			name:  "no terms and no placed anti-affinity: skipped",
			nodes: []*framework.NodeInfo{node("n1", "a", pod("default", "w", web))},
			pod:   pod("default", "p", web),
			want:  map[string]string{"": "skip"},
		},
		{
			name:  "required anti-affinity by hostname keeps the pod off the node of a match",
			nodes: []*framework.NodeInfo{node("n1", "a", pod("default", "w", web)), node("n2", "a"), node("n3", "b", pod("default", "x", map[string]string{"app": "db"}))},
			pod:   pod("default", "p", web, anti(term(hostKey, web))),
			want:  map[string]string{"n1": rAnti, "n2": "", "n3": ""},
		},
		{
			name:  "required anti-affinity by zone covers the whole zone",
			nodes: []*framework.NodeInfo{node("n1", "a", pod("default", "w", web)), node("n2", "a"), node("n3", "b")},
			pod:   pod("default", "p", web, anti(term(zoneKey, web))),
			want:  map[string]string{"n1": rAnti, "n2": rAnti, "n3": ""},
		},
		{
			name:  "a match in another namespace does not count",
			nodes: []*framework.NodeInfo{node("n1", "a", pod("other", "w", web)), node("n2", "b")},
			pod:   pod("default", "p", web, anti(term(hostKey, web))),
			want:  map[string]string{"n1": "", "n2": ""},
		},
		{
			name:  "namespaces lists the namespace",
			nodes: []*framework.NodeInfo{node("n1", "a", pod("other", "w", web)), node("n2", "b")},
			pod: pod("default", "p", web, anti(func() *corev1.PodAffinityTerm {
				t := term(hostKey, web)
				t.Namespaces = []string{"other"}
				return t
			}())),
			want: map[string]string{"n1": rAnti, "n2": ""},
		},
		{
			name:  "namespaceSelector selects namespaces by label",
			nodes: []*framework.NodeInfo{node("n1", "a", pod("team-a", "w", web)), node("n2", "b", pod("team-b", "w", web)), node("n3", "c")},
			ns:    map[string]map[string]string{"default": {}, "team-a": {"team": "a"}, "team-b": {"team": "b"}},
			pod: pod("default", "p", web, anti(func() *corev1.PodAffinityTerm {
				t := term(hostKey, web)
				t.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
				return t
			}())),
			want: map[string]string{"n1": rAnti, "n2": "", "n3": ""},
		},
		{
			name:  "an empty namespaceSelector selects every namespace",
			nodes: []*framework.NodeInfo{node("n1", "a", pod("team-a", "w", web)), node("n2", "b")},
			pod: pod("default", "p", web, anti(func() *corev1.PodAffinityTerm {
				t := term(hostKey, web)
				t.NamespaceSelector = &metav1.LabelSelector{}
				return t
			}())),
			want: map[string]string{"n1": rAnti, "n2": ""},
		},
		{
			name: "mismatchLabelKeys: only pods of other tenants repel",
			nodes: []*framework.NodeInfo{
				node("n1", "a", pod("default", "w", map[string]string{"app": "web", "tenant": "t1"})),
				node("n2", "b", pod("default", "x", map[string]string{"app": "web", "tenant": "t2"}))},
			pod: pod("default", "p", map[string]string{"app": "web", "tenant": "t1"}, anti(func() *corev1.PodAffinityTerm {
				t := term(hostKey, web)
				t.MismatchLabelKeys = []string{"tenant"}
				return t
			}())),
			want: map[string]string{"n1": "", "n2": rAnti},
		},
		{
			name:  "required affinity: only the zone of a match, and never a node without the key",
			nodes: []*framework.NodeInfo{node("n1", "a", pod("default", "w", web)), node("n2", "a"), node("n3", "b"), node("n4", "")},
			pod:   pod("default", "p", nil, affinity(term(zoneKey, web))),
			want:  map[string]string{"n1": "", "n2": "", "n3": rAff, "n4": rAff},
		},
		{
			name:  "matchLabelKeys narrows the affinity to the pod's own version",
			nodes: []*framework.NodeInfo{node("n1", "a", pod("default", "w", map[string]string{"app": "web", "v": "1"})), node("n2", "b", pod("default", "x", map[string]string{"app": "web", "v": "2"}))},
			pod: pod("default", "p", map[string]string{"v": "2"}, affinity(func() *corev1.PodAffinityTerm {
				t := term(zoneKey, web)
				t.MatchLabelKeys = []string{"v"}
				return t
			}())),
			want: map[string]string{"n1": rAff, "n2": ""},
		},
		{
			name:  "the first pod of a group that matches its own affinity may go anywhere with the key",
			nodes: []*framework.NodeInfo{node("n1", "a"), node("n2", "b"), node("n3", "")},
			pod:   pod("default", "p", web, affinity(term(zoneKey, web))),
			want:  map[string]string{"n1": "", "n2": "", "n3": rAff},
		},
		{
			name:  "a pod not matching its own affinity waits for a match",
			nodes: []*framework.NodeInfo{node("n1", "a"), node("n2", "b")},
			pod:   pod("default", "p", nil, affinity(term(zoneKey, web))),
			want:  map[string]string{"n1": rAff, "n2": rAff},
		},
		{
			name: "a placed pod's anti-affinity keeps the pod out of its zone",
			nodes: []*framework.NodeInfo{
				node("n1", "a", pod("default", "db", map[string]string{"app": "db"}, anti(term(zoneKey, web)))),
				node("n2", "a"), node("n3", "b")},
			pod:  pod("default", "p", web),
			want: map[string]string{"n1": rEx, "n2": rEx, "n3": ""},
		},
		{
			name: "a placed pod's anti-affinity for another namespace by namespaceSelector",
			nodes: []*framework.NodeInfo{
				node("n1", "a", pod("default", "db", nil, anti(func() *corev1.PodAffinityTerm {
					t := term(hostKey, web)
					t.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
					return t
				}()))),
				node("n2", "b")},
			ns:   map[string]map[string]string{"prod": {"env": "prod"}, "default": {}},
			pod:  pod("prod", "p", web),
			want: map[string]string{"n1": rEx, "n2": ""},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := filter(t, &fixture.Handle{Nodes: tc.nodes, Namespaces: tc.ns}, tc.pod)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reasons by node (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFilterOnChangedNode: a copy of a snapshot node with a pod removed
// (preemption's victim) or added (a nominated pod) is judged by its own pods.
func TestFilterOnChangedNode(t *testing.T) {
	victim := pod("default", "w", web)
	n1 := node("n1", "a", victim)
	h := &fixture.Handle{Nodes: []*framework.NodeInfo{n1, node("n2", "a")}}
	p := pod("default", "p", web, anti(term(zoneKey, web)))
	pl, _ := interpodaffinity.New(nil, h)
	state := framework.NewCycleState()
	if s := pl.(framework.PreFilterPlugin).PreFilter(context.Background(), state, p, h.Nodes); !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s.AsError())
	}
	f := pl.(framework.FilterPlugin)
	if s := f.Filter(context.Background(), state, p, n1); s.Message() != interpodaffinity.ReasonAntiAffinity {
		t.Fatalf("snapshot node: got %q, want %q", s.Message(), interpodaffinity.ReasonAntiAffinity)
	}
	without := n1.Clone()
	without.RemovePod(victim.Key)
	if s := f.Filter(context.Background(), state, p, without); !s.IsSuccess() {
		t.Errorf("node without the victim: got %q, want success", s.Message())
	}
	clean := node("n3", "b")
	h.Nodes = append(h.Nodes, clean)
	state = framework.NewCycleState()
	pl.(framework.PreFilterPlugin).PreFilter(context.Background(), state, p, h.Nodes)
	nominated := fixture.WithPods(clean.Clone(), pod("default", "nom", web))
	if s := f.Filter(context.Background(), state, p, nominated); s.Message() != interpodaffinity.ReasonAntiAffinity {
		t.Errorf("node with a nominated match: got %q, want %q", s.Message(), interpodaffinity.ReasonAntiAffinity)
	}
	if s := f.Filter(context.Background(), state, p, clean); !s.IsSuccess() {
		t.Errorf("snapshot node n3: got %q, want success (the copy must not change the state)", s.Message())
	}
}

func TestScore(t *testing.T) {
	db := map[string]string{"app": "db"}
	tests := []struct {
		name     string
		nodes    []*framework.NodeInfo
		pod      *framework.PodInfo
		args     []byte
		wantSkip bool
		want     map[string]int64
	}{
		{
			name:     "no terms anywhere: skipped",
			nodes:    []*framework.NodeInfo{node("n1", "a", pod("default", "w", web)), node("n2", "b")},
			pod:      pod("default", "p", web),
			wantSkip: true,
		},
		{
			name:  "preferred affinity: the zone of the matches scores 100",
			nodes: []*framework.NodeInfo{node("n1", "a", pod("default", "w", web)), node("n2", "a"), node("n3", "b")},
			pod:   pod("default", "p", nil, preferred(5, term(zoneKey, web))),
			want:  map[string]int64{"n1": 100, "n2": 100, "n3": 0},
		},
		{
			name: "preferred anti-affinity: more matches score lower, scaled between min and max",
			nodes: []*framework.NodeInfo{
				node("n1", "a", pod("default", "w1", web), pod("default", "w2", web)),
				node("n2", "b", pod("default", "w3", web)), node("n3", "c")},
			pod:  pod("default", "p", nil, preferredAnti(10, term(hostKey, web))),
			want: map[string]int64{"n1": 0, "n2": 50, "n3": 100},
		},
		{
			name: "symmetry: a placed pod's preferred affinity for the pod draws it",
			nodes: []*framework.NodeInfo{
				node("n1", "a", pod("default", "db", db, preferred(20, term(hostKey, web)))), node("n2", "b")},
			pod:  pod("default", "p", web),
			want: map[string]int64{"n1": 100, "n2": 0},
		},
		{
			name: "symmetry: a placed pod's required affinity counts hardPodAffinityWeight",
			nodes: []*framework.NodeInfo{
				node("n1", "a", pod("default", "db", db, affinity(term(hostKey, web)))), node("n2", "b")},
			pod:  pod("default", "p", web),
			want: map[string]int64{"n1": 100, "n2": 0},
		},
		{
			name: "hardPodAffinityWeight 0 ignores placed pods' required affinity",
			nodes: []*framework.NodeInfo{
				node("n1", "a", pod("default", "db", db, affinity(term(hostKey, web)))), node("n2", "b")},
			pod:      pod("default", "p", web),
			args:     []byte(`{"hardPodAffinityWeight":0}`),
			wantSkip: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &fixture.Handle{Nodes: tc.nodes}
			pl, err := interpodaffinity.New(tc.args, h)
			if err != nil {
				t.Fatal(err)
			}
			state := framework.NewCycleState()
			s := pl.(framework.PreScorePlugin).PreScore(context.Background(), state, tc.pod, tc.nodes)
			if s.IsSkip() != tc.wantSkip {
				t.Fatalf("PreScore: got %v, want skip=%v", s.Code(), tc.wantSkip)
			}
			if tc.wantSkip {
				return
			}
			sp := pl.(framework.ScorePlugin)
			scores := make(framework.NodeScoreList, len(tc.nodes))
			for i, n := range tc.nodes {
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

func TestArgs(t *testing.T) {
	for _, raw := range []string{`{"hardPodAffinityWeight":101}`, `{"hardPodAffinityWeight":-1}`, `{"bogus":true}`} {
		if _, err := interpodaffinity.New([]byte(raw), nil); err == nil {
			t.Errorf("args %s: got no error, want one", raw)
		}
	}
}
