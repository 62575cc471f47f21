// This file holds the test of preemption candidates: which lower-priority
// pods are victims, as few and as unimportant as possible, on which node,
// and when no eviction would do.

package defaultpreemption_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/defaultpreemption"
	"github.com/kplane/kplane/services/scheduler/plugins/noderesourcesfit"
)

// nodes is a snapshot of fixture nodes.
type nodes map[string]*framework.NodeInfo

func (n nodes) List() []*framework.NodeInfo {
	var out []*framework.NodeInfo
	for _, ni := range n {
		out = append(out, ni)
	}
	return out
}
func (n nodes) Get(name string) (*framework.NodeInfo, bool)           { ni, ok := n[name]; return ni, ok }
func (nodes) NumNodesWithImage(string) int                            { return 0 }
func (nodes) HavePodsWithAffinity() []*framework.NodeInfo             { return nil }
func (nodes) HavePodsWithRequiredAntiAffinity() []*framework.NodeInfo { return nil }

// handle runs the real NodeResourcesFit filter over the fixture nodes.
type handle struct {
	nodes nodes
	fit   framework.FilterPlugin
}

func (h handle) Snapshot() framework.NodeLister     { return h.nodes }
func (handle) ClientConn() grpc.ClientConnInterface { return nil }
func (h handle) RunFilterPlugins(ctx context.Context, state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	return h.fit.Filter(ctx, state, pod, node)
}
func (handle) EventRecorder() *client.Recorder { return nil }

func prio(n int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Priority = proto.Int32(n) }
}

// fake makes the pod request n of example.com/fakecpu, then applies mut.
func fake(n string, mut func(*corev1.Pod)) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests["example.com/fakecpu"] = n
		mut(p)
	}
}

// fakeAlloc gives the node n of example.com/fakecpu.
func fakeAlloc(n string) func(*corev1.Node) {
	return func(node *corev1.Node) { node.Status.Allocatable["example.com/fakecpu"] = n }
}

func TestCandidates(t *testing.T) {
	tests := []struct {
		name  string
		pod   *framework.PodInfo
		nodes []*framework.NodeInfo
		// want: "node: victim,victim" for the chosen candidate, "" if none.
		want string
		// wantCandidates: every candidate, as above.
		wantCandidates []string
	}{
		{
			name: "one low-priority pod in the way",
			pod:  fixture.Pod("hi", "1", "", prio(100)),
			nodes: []*framework.NodeInfo{
				fixture.WithPods(fixture.Node("n1", "2", "8Gi", nil), fixture.Pod("lo", "1500m", "", prio(0))),
			},
			want: "n1: lo", wantCandidates: []string{"n1: lo"},
		},
		{
			name: "equal or higher priority is never a victim",
			pod:  fixture.Pod("hi", "1", "", prio(100)),
			nodes: []*framework.NodeInfo{
				fixture.WithPods(fixture.Node("n1", "2", "8Gi", nil), fixture.Pod("same", "1500m", "", prio(100))),
				fixture.WithPods(fixture.Node("n2", "2", "8Gi", nil), fixture.Pod("higher", "1500m", "", prio(1000))),
			},
			want: "",
		},
		{
			name: "only as many victims as needed, the less important first",
			pod:  fixture.Pod("hi", "2", "", prio(100)),
			nodes: []*framework.NodeInfo{
				fixture.WithPods(fixture.Node("n1", "4", "8Gi", nil),
					fixture.Pod("a", "1", "", prio(10)), fixture.Pod("b", "1", "", prio(20)), fixture.Pod("c", "1", "", prio(30)), fixture.Pod("d", "1", "", prio(40))),
			},
			want: "n1: a,b", wantCandidates: []string{"n1: a,b"},
		},
		{
			name: "the node whose victims matter least",
			pod:  fixture.Pod("hi", "1", "", prio(100)),
			nodes: []*framework.NodeInfo{
				fixture.WithPods(fixture.Node("n1", "1", "8Gi", nil), fixture.Pod("x", "1", "", prio(50))),
				fixture.WithPods(fixture.Node("n2", "1", "8Gi", nil), fixture.Pod("y", "500m", "", prio(5)), fixture.Pod("z", "500m", "", prio(5))),
				fixture.WithPods(fixture.Node("n3", "1", "8Gi", nil), fixture.Pod("w", "1", "", prio(5))),
			},
			want: "n3: w", wantCandidates: []string{"n1: x", "n2: y,z", "n3: w"},
		},
		{
			name: "the low-priority pod holding the extended resource is the victim",
			pod:  fixture.Pod("hi", "", "", fake("2", prio(1000))),
			nodes: []*framework.NodeInfo{
				fixture.WithPods(fixture.Node("n1", "4", "8Gi", fakeAlloc("5")),
					fixture.Pod("lo", "", "", fake("2", prio(1))), fixture.Pod("mid", "", "", fake("2", prio(100)))),
				fixture.WithPods(fixture.Node("n2", "4", "8Gi", fakeAlloc("5")),
					fixture.Pod("mid2", "", "", fake("2", prio(100))), fixture.Pod("mid3", "", "", fake("2", prio(100)))),
			},
			want: "n1: lo", wantCandidates: []string{"n1: lo", "n2: mid3"},
		},
		{
			name: "freed extended resource: only the victims needed, by reprieve order",
			pod:  fixture.Pod("p4", "", "", fake("500", prio(4))),
			nodes: []*framework.NodeInfo{
				fixture.WithPods(fixture.Node("n1", "4", "8Gi", fakeAlloc("1000")),
					fixture.Pod("p1", "", "", fake("200", prio(1))), fixture.Pod("p2", "", "", fake("300", prio(2))), fixture.Pod("p3", "", "", fake("450", prio(3)))),
			},
			want: "n1: p1,p2", wantCandidates: []string{"n1: p1,p2"},
		},
		{
			name: "a node without the extended resource is no candidate",
			pod:  fixture.Pod("hi", "", "", fake("1", prio(1000))),
			nodes: []*framework.NodeInfo{
				fixture.WithPods(fixture.Node("n1", "4", "8Gi", nil), fixture.Pod("lo", "", "", prio(1))),
			},
			want: "",
		},
		{
			name: "evicting everything would not be enough",
			pod:  fixture.Pod("hi", "4", "", prio(100)),
			nodes: []*framework.NodeInfo{
				fixture.WithPods(fixture.Node("n1", "2", "8Gi", nil), fixture.Pod("lo", "1", "", prio(0))),
			},
			want: "",
		},
	}
	fit, _ := noderesourcesfit.New(nil, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := handle{nodes: nodes{}, fit: fit.(framework.FilterPlugin)}
			statuses := framework.NodeToStatus{}
			for _, n := range tc.nodes {
				h.nodes[n.Name] = n
				statuses[n.Name] = h.RunFilterPlugins(context.Background(), framework.NewCycleState(), tc.pod, n)
			}
			cands, err := defaultpreemption.FindCandidates(context.Background(), h, framework.NewCycleState(), tc.pod, statuses)
			if err != nil {
				t.Fatal(err)
			}
			show := func(c defaultpreemption.Candidate) string {
				var v []string
				for _, p := range c.Victims {
					v = append(v, p.Pod.GetMetadata().GetName())
				}
				slices.Sort(v)
				return fmt.Sprintf("%s: %s", c.Node, strings.Join(v, ","))
			}
			var got []string
			for _, c := range cands {
				got = append(got, show(c))
			}
			if !slices.Equal(got, tc.wantCandidates) {
				t.Errorf("got candidates %q, want %q", got, tc.wantCandidates)
			}
			best := ""
			if c := defaultpreemption.PickCandidate(cands); c != nil {
				best = show(*c)
			}
			if best != tc.want {
				t.Errorf("got choice %q, want %q", best, tc.want)
			}
		})
	}
}
