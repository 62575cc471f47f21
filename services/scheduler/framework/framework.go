// This file holds the Framework: a profile's plugins, built from a Registry
// and a Config, and the code that runs each extension point.
package framework

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// PluginRef enables one plugin in a profile.
type PluginRef struct {
	Name string `json:"name"`
	// Weight multiplies the plugin's normalized score (default 1; score plugins only).
	Weight int64 `json:"weight,omitempty"`
	// Args is the plugin's own configuration, passed to its factory as JSON.
	Args map[string]any `json:"args,omitempty"`
}

// Config is a scheduling profile: the enabled plugins, in the order they
// run at each extension point, and how much of the cluster to look at.
type Config struct {
	// Plugins are the enabled plugins, in order. Empty means DefaultPlugins
	// (supplied by the caller that knows the registry).
	Plugins []PluginRef `json:"plugins,omitempty"`
	// PercentageOfNodesToScore: 0 means Kubernetes' adaptive default
	// (50% minus 1% per 125 nodes, at least 5%); 100 means every node.
	PercentageOfNodesToScore int32 `json:"percentageOfNodesToScore,omitempty"`
	// Parallelism bounds the goroutines used for Filter and Score (default
	// GOMAXPROCS: more workers than cores only add switching).
	Parallelism int `json:"parallelism,omitempty"`
}

// Framework runs one profile's plugins. Its Run* methods may be called from
// one scheduling goroutine at a time (RunReserve/RunUnreserve/RunBind also
// from binding goroutines: plugins must make those safe).
type Framework struct {
	preFilter   []PreFilterPlugin
	filter      []FilterPlugin
	postFilter  []PostFilterPlugin
	preScore    []PreScorePlugin
	score       []ScorePlugin
	weights     map[string]int64
	reserve     []ReservePlugin
	bind        []BindPlugin
	percentage  int32
	parallelism int
	nextStart   int // rotation of the first node examined; scheduling goroutine only
}

// New builds the plugins named by cfg from reg.
func New(reg Registry, cfg Config, h Handle) (*Framework, error) {
	f := &Framework{weights: map[string]int64{}, percentage: cfg.PercentageOfNodesToScore, parallelism: cfg.Parallelism}
	if f.parallelism <= 0 {
		f.parallelism = runtime.GOMAXPROCS(0)
	}
	if f.percentage < 0 || f.percentage > 100 {
		return nil, fmt.Errorf("framework: percentageOfNodesToScore %d not in [0, 100]", f.percentage)
	}
	seen := map[string]bool{}
	for _, ref := range cfg.Plugins {
		if seen[ref.Name] {
			return nil, fmt.Errorf("framework: plugin %q enabled twice", ref.Name)
		}
		seen[ref.Name] = true
		factory, ok := reg[ref.Name]
		if !ok {
			return nil, fmt.Errorf("framework: no plugin named %q", ref.Name)
		}
		var args []byte
		if ref.Args != nil {
			var err error
			if args, err = marshalArgs(ref.Args); err != nil {
				return nil, fmt.Errorf("framework: args of %s: %w", ref.Name, err)
			}
		}
		p, err := factory(args, h)
		if err != nil {
			return nil, fmt.Errorf("framework: plugin %s: %w", ref.Name, err)
		}
		if p.Name() != ref.Name {
			return nil, fmt.Errorf("framework: factory for %q built %q", ref.Name, p.Name())
		}
		if x, ok := p.(PreFilterPlugin); ok {
			f.preFilter = append(f.preFilter, x)
		}
		if x, ok := p.(FilterPlugin); ok {
			f.filter = append(f.filter, x)
		}
		if x, ok := p.(PostFilterPlugin); ok {
			f.postFilter = append(f.postFilter, x)
		}
		if x, ok := p.(PreScorePlugin); ok {
			f.preScore = append(f.preScore, x)
		}
		if x, ok := p.(ScorePlugin); ok {
			f.score = append(f.score, x)
			w := ref.Weight
			if w == 0 {
				w = 1
			}
			if w < 0 {
				return nil, fmt.Errorf("framework: plugin %s: negative weight %d", ref.Name, w)
			}
			f.weights[ref.Name] = w
		}
		if x, ok := p.(ReservePlugin); ok {
			f.reserve = append(f.reserve, x)
		}
		if x, ok := p.(BindPlugin); ok {
			f.bind = append(f.bind, x)
		}
	}
	if len(f.bind) == 0 {
		return nil, errors.New("framework: no bind plugin enabled")
	}
	return f, nil
}

// Weight is the weight of score plugin name (0 if not a score plugin).
func (f *Framework) Weight(name string) int64 { return f.weights[name] }

// RunPreFilter runs every PreFilter; the first non-success, non-skip
// status ends it.
func (f *Framework) RunPreFilter(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo) *Status {
	for _, p := range f.preFilter {
		s := p.PreFilter(ctx, state, pod, nodes)
		switch {
		case s.IsSkip():
			state.SkipFilter[p.Name()] = true
		case !s.IsSuccess():
			return s.WithPlugin(p.Name())
		}
	}
	return nil
}

// RunFilter runs the filters on one node, stopping at the first rejection.
func (f *Framework) RunFilter(ctx context.Context, state *CycleState, pod *PodInfo, node *NodeInfo) *Status {
	return runFilters(ctx, f.activeFilters(state), state, pod, node)
}

// activeFilters are the filters whose PreFilter did not say Skip, worked
// out once per cycle rather than per node.
func (f *Framework) activeFilters(state *CycleState) []FilterPlugin {
	if len(state.SkipFilter) == 0 {
		return f.filter
	}
	return slices.DeleteFunc(slices.Clone(f.filter), func(p FilterPlugin) bool { return state.SkipFilter[p.Name()] })
}

// runFilters runs filters for pod on node. When pods are nominated to the
// node (state.Nominated), it runs them first on a copy of the node with
// those pods added, then, as Kubernetes does, on the node as it is: the
// pod must fit both ways.
func runFilters(ctx context.Context, filters []FilterPlugin, state *CycleState, pod *PodInfo, node *NodeInfo) *Status {
	if nominated := state.Nominated[node.Name]; len(nominated) > 0 {
		n := node.Clone()
		for _, p := range nominated {
			n.AddPod(p)
		}
		if s := runFiltersOnce(ctx, filters, state, pod, n); !s.IsSuccess() {
			return s
		}
	}
	return runFiltersOnce(ctx, filters, state, pod, node)
}

func runFiltersOnce(ctx context.Context, filters []FilterPlugin, state *CycleState, pod *PodInfo, node *NodeInfo) *Status {
	for _, p := range filters {
		if s := p.Filter(ctx, state, pod, node); !s.IsSuccess() {
			return s.WithPlugin(p.Name())
		}
	}
	return nil
}

// NumFeasibleNodesToFind is how many feasible nodes to look for before
// scoring, as Kubernetes computes it: every node in clusters under 100
// nodes; otherwise percentage of them (adaptive when 0: 50% minus 1% per
// 125 nodes, not under 5%), but never fewer than 100.
func NumFeasibleNodesToFind(percentage int32, numAllNodes int) int {
	const minFeasible, minPercentage = 100, 5
	if numAllNodes < minFeasible || percentage >= 100 {
		return numAllNodes
	}
	p := int(percentage)
	if p == 0 {
		p = max(50-numAllNodes/125, minPercentage)
	}
	n := numAllNodes * p / 100
	if n < minFeasible {
		return minFeasible
	}
	return n
}

// FindFeasible filters nodes in parallel (bounded by Parallelism), starting
// where the previous attempt stopped so every node gets its turn, and
// stops once NumFeasibleNodesToFind nodes fit. It returns the feasible
// nodes and the status of every node that was rejected.
func (f *Framework) FindFeasible(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo) ([]*NodeInfo, NodeToStatus, error) {
	all := len(nodes)
	statuses := NodeToStatus{}
	if all == 0 {
		return nil, statuses, nil
	}
	want := NumFeasibleNodesToFind(f.percentage, all)
	filters := f.activeFilters(state)
	if len(filters) == 0 {
		out := make([]*NodeInfo, 0, want)
		for i := range want {
			out = append(out, nodes[(f.nextStart+i)%all])
		}
		f.nextStart = (f.nextStart + want) % all
		return out, statuses, nil
	}
	feasible := make([]*NodeInfo, want)
	var found atomic.Int32
	var mu sync.Mutex
	var firstErr error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var processed atomic.Int32
	start := f.nextStart
	Parallelize(ctx, f.parallelism, all, func(i int) {
		n := nodes[(start+i)%all]
		s := runFilters(ctx, filters, state, pod, n)
		processed.Add(1)
		if s.IsSuccess() {
			k := found.Add(1)
			if int(k) > want {
				cancel()
				found.Add(-1)
				processed.Add(-1)
				return
			}
			feasible[k-1] = n
			return
		}
		mu.Lock()
		if s.Code() == Error && firstErr == nil {
			firstErr = s.AsError()
		}
		statuses[n.Name] = s
		mu.Unlock()
	})
	if firstErr != nil {
		return nil, nil, firstErr
	}
	f.nextStart = (start + int(processed.Load())) % all
	return feasible[:found.Load()], statuses, nil
}

// Parallelize calls work(i) for i in [0, n) on up to workers goroutines,
// and stops handing out work once ctx is done. Small n runs inline.
func Parallelize(ctx context.Context, workers, n int, work func(i int)) {
	if n <= 32 || workers <= 1 {
		for i := range n {
			if ctx.Err() != nil {
				return
			}
			work(i)
		}
		return
	}
	workers = min(workers, n/32+1)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				work(i)
			}
		}()
	}
	wg.Wait()
}

// RunPostFilter runs PostFilter plugins until one succeeds.
func (f *Framework) RunPostFilter(ctx context.Context, state *CycleState, pod *PodInfo, statuses NodeToStatus) (string, *Status) {
	last := NewStatus(Unschedulable)
	for _, p := range f.postFilter {
		node, s := p.PostFilter(ctx, state, pod, statuses)
		if s.IsSuccess() {
			return node, nil
		}
		last = s.WithPlugin(p.Name())
		if s.Code() == Error {
			return "", last
		}
	}
	return "", last
}

// RunScore runs PreScore, then every Score plugin over nodes, normalizes
// and weighs each plugin's scores, and returns the totals in node order.
func (f *Framework) RunScore(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo) ([]NodeScore, *Status) {
	for _, p := range f.preScore {
		s := p.PreScore(ctx, state, pod, nodes)
		switch {
		case s.IsSkip():
			state.SkipScore[p.Name()] = true
		case !s.IsSuccess():
			return nil, s.WithPlugin(p.Name())
		}
	}
	total := make([]NodeScore, len(nodes))
	for i, n := range nodes {
		total[i].Name = n.Name
	}
	plugins := slices.DeleteFunc(slices.Clone(f.score), func(p ScorePlugin) bool { return state.SkipScore[p.Name()] })
	if len(plugins) == 0 {
		return total, nil
	}
	scores := make([]NodeScoreList, len(plugins))
	for j := range plugins {
		scores[j] = make(NodeScoreList, len(nodes))
	}
	var mu sync.Mutex
	var firstErr *Status
	Parallelize(ctx, f.parallelism, len(nodes), func(i int) {
		for j, p := range plugins {
			s, st := p.Score(ctx, state, pod, nodes[i])
			if !st.IsSuccess() {
				mu.Lock()
				if firstErr == nil {
					firstErr = st.WithPlugin(p.Name())
				}
				mu.Unlock()
				return
			}
			scores[j][i] = NodeScore{Name: nodes[i].Name, Score: s}
		}
	})
	if firstErr != nil {
		return nil, firstErr
	}
	for j, p := range plugins {
		if ext := p.ScoreExtensions(); ext != nil {
			if s := ext.NormalizeScore(ctx, state, pod, scores[j]); !s.IsSuccess() {
				return nil, s.WithPlugin(p.Name())
			}
		}
		w := f.weights[p.Name()]
		for i := range nodes {
			sc := scores[j][i].Score
			if sc < MinNodeScore || sc > MaxNodeScore {
				return nil, NewStatus(Error, fmt.Sprintf("plugin %s scored node %s %d, outside [%d, %d]", p.Name(), nodes[i].Name, sc, MinNodeScore, MaxNodeScore)).WithPlugin(p.Name())
			}
			total[i].Score += sc * w
		}
	}
	return total, nil
}

// RunReserve runs Reserve on every reserve plugin; on a failure it
// unreserves those already reserved (in reverse) and returns the status.
func (f *Framework) RunReserve(ctx context.Context, state *CycleState, pod *PodInfo, node string) *Status {
	for i, p := range f.reserve {
		if s := p.Reserve(ctx, state, pod, node); !s.IsSuccess() {
			for j := i - 1; j >= 0; j-- {
				f.reserve[j].Unreserve(ctx, state, pod, node)
			}
			return s.WithPlugin(p.Name())
		}
	}
	return nil
}

// RunUnreserve undoes every Reserve, in reverse order.
func (f *Framework) RunUnreserve(ctx context.Context, state *CycleState, pod *PodInfo, node string) {
	for i := len(f.reserve) - 1; i >= 0; i-- {
		f.reserve[i].Unreserve(ctx, state, pod, node)
	}
}

// RunBind asks bind plugins in order until one does not Skip.
func (f *Framework) RunBind(ctx context.Context, state *CycleState, pod *PodInfo, node string) *Status {
	for _, p := range f.bind {
		s := p.Bind(ctx, state, pod, node)
		if s.IsSkip() {
			continue
		}
		return s.WithPlugin(p.Name())
	}
	return NewStatus(Error, "no bind plugin bound the pod")
}
