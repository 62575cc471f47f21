// This file holds the framework's tests: how many feasible nodes to look
// for, profile construction, filtering that stops and rotates, fit errors,
// weighted and normalized scores, and random tie-breaking.

package framework_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
)

func TestNumFeasibleNodesToFind(t *testing.T) {
	tests := []struct {
		name       string
		percentage int32
		nodes      int
		want       int
	}{
		{name: "small cluster: all", nodes: 99, want: 99},
		{name: "100 nodes adaptive 50%, floor 100", nodes: 100, want: 100},
		{name: "1000 nodes adaptive 42%", nodes: 1000, want: 420},
		{name: "5000 nodes adaptive 10%", nodes: 5000, want: 500},
		{name: "10000 nodes adaptive floor 5%", nodes: 10000, want: 500},
		{name: "explicit 30%", percentage: 30, nodes: 1000, want: 300},
		{name: "explicit 100%", percentage: 100, nodes: 5000, want: 5000},
		{name: "explicit 1% floored at 100", percentage: 1, nodes: 5000, want: 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := framework.NumFeasibleNodesToFind(tc.percentage, tc.nodes); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

type handle struct{}

func (handle) Snapshot() framework.NodeLister       { return nil }
func (handle) ClientConn() grpc.ClientConnInterface { return nil }
func (handle) RunFilterPlugins(context.Context, *framework.CycleState, *framework.PodInfo, *framework.NodeInfo) *framework.Status {
	return nil
}
func (handle) EventRecorder() *client.Recorder { return nil }

// filterFunc, scoreFunc and binder are plugins made of functions.
type filterFunc struct {
	name  string
	calls atomic.Int64
	f     func(*framework.NodeInfo) *framework.Status
}

func (p *filterFunc) Name() string { return p.name }
func (p *filterFunc) Filter(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, n *framework.NodeInfo) *framework.Status {
	p.calls.Add(1)
	return p.f(n)
}

type scoreFunc struct {
	name      string
	f         func(*framework.NodeInfo) int64
	normalize bool
}

func (p *scoreFunc) Name() string { return p.name }
func (p *scoreFunc) Score(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, n *framework.NodeInfo) (int64, *framework.Status) {
	return p.f(n), nil
}
func (p *scoreFunc) ScoreExtensions() framework.ScoreExtensions {
	if p.normalize {
		return p
	}
	return nil
}
func (p *scoreFunc) NormalizeScore(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, s framework.NodeScoreList) *framework.Status {
	framework.DefaultNormalizeScore(framework.MaxNodeScore, false, s)
	return nil
}

type binder struct{}

func (binder) Name() string { return "Binder" }
func (binder) Bind(context.Context, *framework.CycleState, *framework.PodInfo, string) *framework.Status {
	return nil
}

func registry(ps ...framework.Plugin) framework.Registry {
	r := framework.Registry{"Binder": func([]byte, framework.Handle) (framework.Plugin, error) { return binder{}, nil }}
	for _, p := range ps {
		r[p.Name()] = func([]byte, framework.Handle) (framework.Plugin, error) { return p, nil }
	}
	return r
}

func nodes(n int) []*framework.NodeInfo {
	out := make([]*framework.NodeInfo, n)
	for i := range out {
		out[i] = fixture.Node(fmt.Sprintf("n%04d", i), "4", "8Gi", nil)
	}
	return out
}

func TestNew(t *testing.T) {
	f := &filterFunc{name: "F", f: func(*framework.NodeInfo) *framework.Status { return nil }}
	tests := []struct {
		name    string
		plugins []framework.PluginRef
		wantErr string
	}{
		{name: "ok", plugins: []framework.PluginRef{{Name: "F"}, {Name: "Binder"}}},
		{name: "unknown plugin", plugins: []framework.PluginRef{{Name: "Nope"}, {Name: "Binder"}}, wantErr: `no plugin named "Nope"`},
		{name: "twice", plugins: []framework.PluginRef{{Name: "F"}, {Name: "F"}, {Name: "Binder"}}, wantErr: "enabled twice"},
		{name: "no binder", plugins: []framework.PluginRef{{Name: "F"}}, wantErr: "no bind plugin"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := framework.New(registry(f), framework.Config{Plugins: tc.plugins}, handle{})
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("got %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestFindFeasibleStopsAndRotates(t *testing.T) {
	all := nodes(1000)
	f := &filterFunc{name: "F", f: func(*framework.NodeInfo) *framework.Status { return nil }}
	fw, err := framework.New(registry(f), framework.Config{Plugins: []framework.PluginRef{{Name: "F"}, {Name: "Binder"}}, Parallelism: 4}, handle{})
	if err != nil {
		t.Fatal(err)
	}
	pod := fixture.Pod("p", "", "", nil)
	got, statuses, err := fw.FindFeasible(context.Background(), framework.NewCycleState(), pod, all)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 420 || len(statuses) != 0 {
		t.Fatalf("got %d feasible, %d rejected; want 420 and 0", len(got), len(statuses))
	}
	// Workers may overshoot a little past the cancel, never far.
	if calls := f.calls.Load(); calls < 420 || calls > 420+64 {
		t.Errorf("filter calls: got %d, want about 420", calls)
	}
	second, _, _ := fw.FindFeasible(context.Background(), framework.NewCycleState(), pod, all)
	first := map[string]bool{}
	for _, n := range got {
		first[n.Name] = true
	}
	overlap := 0
	for _, n := range second {
		if first[n.Name] {
			overlap++
		}
	}
	if overlap > 64 {
		t.Errorf("second attempt re-examined %d of the first attempt's nodes, want it to start where the first stopped", overlap)
	}
}

func TestScheduleFitError(t *testing.T) {
	all := nodes(5)
	f := &filterFunc{name: "F", f: func(n *framework.NodeInfo) *framework.Status {
		if n.Name < "n0003" {
			return framework.NewStatus(framework.Unschedulable, "Insufficient cpu")
		}
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, "node(s) had untolerated taint {dedicated: gpu}")
	}}
	fw, err := framework.New(registry(f), framework.Config{Plugins: []framework.PluginRef{{Name: "F"}, {Name: "Binder"}}}, handle{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = fw.Schedule(context.Background(), framework.NewCycleState(), fixture.Pod("p", "", "", nil), all)
	want := "0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: gpu}."
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}

func TestScoreWeightsAndNormalize(t *testing.T) {
	all := nodes(3)
	// A prefers n0000 (raw 10/5/0 → normalized 100/50/0), B prefers n0002 (30/60/90).
	a := &scoreFunc{name: "A", normalize: true, f: func(n *framework.NodeInfo) int64 {
		return map[string]int64{"n0000": 10, "n0001": 5, "n0002": 0}[n.Name]
	}}
	b := &scoreFunc{name: "B", f: func(n *framework.NodeInfo) int64 {
		return map[string]int64{"n0000": 30, "n0001": 60, "n0002": 90}[n.Name]
	}}
	for _, tc := range []struct {
		name     string
		wA, wB   int64
		want     []int64
		wantHost string
	}{
		{name: "equal weights", wA: 1, wB: 1, want: []int64{130, 110, 90}, wantHost: "n0000"},
		{name: "B weighs 3", wA: 1, wB: 3, want: []int64{190, 230, 270}, wantHost: "n0002"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fw, err := framework.New(registry(a, b), framework.Config{Plugins: []framework.PluginRef{{Name: "A", Weight: tc.wA}, {Name: "B", Weight: tc.wB}, {Name: "Binder"}}}, handle{})
			if err != nil {
				t.Fatal(err)
			}
			scores, st := fw.RunScore(context.Background(), framework.NewCycleState(), fixture.Pod("p", "", "", nil), all)
			if !st.IsSuccess() {
				t.Fatal(st.AsError())
			}
			for i, s := range scores {
				if s.Score != tc.want[i] {
					t.Errorf("node %s: got %d, want %d", s.Name, s.Score, tc.want[i])
				}
			}
			if got := framework.SelectHost(scores, func(int) int { return 0 }); got != tc.wantHost {
				t.Errorf("host: got %s, want %s", got, tc.wantHost)
			}
		})
	}
}

func TestSelectHostBreaksTiesAtRandom(t *testing.T) {
	scores := []framework.NodeScore{{Name: "a", Score: 5}, {Name: "b", Score: 9}, {Name: "c", Score: 9}, {Name: "d", Score: 9}}
	tests := []struct {
		name string
		pick int // the value intn returns
		want string
	}{
		// Reservoir sampling: the k-th tie replaces the pick when intn(k) == 0.
		{name: "intn always 0 takes the last tie", pick: 0, want: "d"},
		{name: "intn never 0 keeps the first tie", pick: 1, want: "b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := framework.SelectHost(scores, func(int) int { return tc.pick }); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
