// Package framework holds the scheduler's extension points — one small
// interface per point, as kube-scheduler's framework has them — the Status
// every plugin returns, the per-cycle state, the node and pod information
// plugins read, and the Framework that runs a profile of plugins.
package framework

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/services/client"
)

// Code is the outcome of a plugin call.
type Code int

const (
	// Success: the plugin allows it (a nil *Status also means Success).
	Success Code = iota
	// Error: something went wrong inside the plugin; the pod is retried
	// with back-off, the node is not judged.
	Error
	// Unschedulable: the pod does not fit this node (Filter) or anywhere
	// right now (PreFilter); another cluster event could change that.
	Unschedulable
	// UnschedulableAndUnresolvable: like Unschedulable, but preemption on
	// this node could not help either.
	UnschedulableAndUnresolvable
	// Skip: from PreFilter/PreScore — this plugin has nothing to do for the
	// pod, so its Filter/Score is not called.
	Skip
)

func (c Code) String() string {
	switch c {
	case Success:
		return "Success"
	case Error:
		return "Error"
	case Unschedulable:
		return "Unschedulable"
	case UnschedulableAndUnresolvable:
		return "UnschedulableAndUnresolvable"
	case Skip:
		return "Skip"
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// Status is a plugin's answer. A nil *Status is Success. Reasons are the
// user-facing explanations that end up, counted over nodes, in the
// FailedScheduling event ("Insufficient cpu").
type Status struct {
	code    Code
	reasons []string
	err     error
	plugin  string
}

// NewStatus returns a Status with code and reasons.
func NewStatus(code Code, reasons ...string) *Status {
	return &Status{code: code, reasons: reasons}
}

// AsStatus wraps an internal error (code Error); nil gives nil.
func AsStatus(err error) *Status {
	if err == nil {
		return nil
	}
	return &Status{code: Error, err: err, reasons: []string{err.Error()}}
}

// Code is s's code; Success for nil.
func (s *Status) Code() Code {
	if s == nil {
		return Success
	}
	return s.code
}

// IsSuccess reports whether s is nil or Success.
func (s *Status) IsSuccess() bool { return s.Code() == Success }

// IsSkip reports whether s is Skip.
func (s *Status) IsSkip() bool { return s.Code() == Skip }

// IsRejected reports whether s says the pod does not fit.
func (s *Status) IsRejected() bool {
	c := s.Code()
	return c == Unschedulable || c == UnschedulableAndUnresolvable
}

// Reasons are the user-facing reasons.
func (s *Status) Reasons() []string {
	if s == nil {
		return nil
	}
	return s.reasons
}

// Plugin is the name of the plugin that returned s (set by the Framework).
func (s *Status) Plugin() string {
	if s == nil {
		return ""
	}
	return s.plugin
}

// WithPlugin records the plugin that returned s and returns s.
func (s *Status) WithPlugin(name string) *Status {
	if s != nil {
		s.plugin = name
	}
	return s
}

// AsError is s as an error (nil for success).
func (s *Status) AsError() error {
	if s.IsSuccess() || s.IsSkip() {
		return nil
	}
	if s.err != nil {
		return s.err
	}
	return fmt.Errorf("%s: %s", s.code, strings.Join(s.reasons, ", "))
}

// Message joins the reasons.
func (s *Status) Message() string {
	if s == nil {
		return ""
	}
	return strings.Join(s.reasons, ", ")
}

// Plugin is what every plugin is.
type Plugin interface {
	Name() string
}

// PreFilterPlugin runs once per scheduling attempt before any Filter. It
// may compute state for Filter (kept in CycleState) or reject the pod at
// once (Unschedulable), or return Skip so its Filter is not called.
type PreFilterPlugin interface {
	Plugin
	PreFilter(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo) *Status
}

// FilterPlugin decides whether pod may run on one node. Filter is called
// concurrently for different nodes and must only read state and node.
type FilterPlugin interface {
	Plugin
	Filter(ctx context.Context, state *CycleState, pod *PodInfo, node *NodeInfo) *Status
}

// PostFilterPlugin runs when no node passed the filters (preemption's
// place). It may return a nominated node name with Success.
type PostFilterPlugin interface {
	Plugin
	PostFilter(ctx context.Context, state *CycleState, pod *PodInfo, statuses NodeToStatus) (nominatedNode string, s *Status)
}

// PreScorePlugin runs once before Score over the feasible nodes.
type PreScorePlugin interface {
	Plugin
	PreScore(ctx context.Context, state *CycleState, pod *PodInfo, nodes []*NodeInfo) *Status
}

// MaxNodeScore and MinNodeScore bound what Score (after NormalizeScore)
// returns, as in Kubernetes.
const (
	MaxNodeScore int64 = 100
	MinNodeScore int64 = 0
)

// ScorePlugin ranks one feasible node. Score is called concurrently for
// different nodes.
type ScorePlugin interface {
	Plugin
	Score(ctx context.Context, state *CycleState, pod *PodInfo, node *NodeInfo) (int64, *Status)
	// ScoreExtensions returns the NormalizeScore hook, or nil.
	ScoreExtensions() ScoreExtensions
}

// ScoreExtensions normalizes one plugin's scores over every feasible node
// to [MinNodeScore, MaxNodeScore] before weights are applied.
type ScoreExtensions interface {
	NormalizeScore(ctx context.Context, state *CycleState, pod *PodInfo, scores NodeScoreList) *Status
}

// ReservePlugin is told when a node has been chosen (Reserve) and when that
// choice is abandoned (Unreserve, which must undo Reserve and not fail).
type ReservePlugin interface {
	Plugin
	Reserve(ctx context.Context, state *CycleState, pod *PodInfo, nodeName string) *Status
	Unreserve(ctx context.Context, state *CycleState, pod *PodInfo, nodeName string)
}

// BindPlugin binds pod to nodeName. It returns Skip to let the next bind
// plugin do it.
type BindPlugin interface {
	Plugin
	Bind(ctx context.Context, state *CycleState, pod *PodInfo, nodeName string) *Status
}

// NodeScore is one node's score.
type NodeScore struct {
	Name  string
	Score int64
}

// NodeScoreList is one plugin's scores, in the order of the feasible nodes.
type NodeScoreList []NodeScore

// NodeToStatus maps node name to the status that rejected it.
type NodeToStatus map[string]*Status

// Handle is what plugins may use from the framework at construction.
type Handle interface {
	// Snapshot reads the nodes as of the current scheduling cycle. Only
	// valid during a cycle (PreFilter to Score).
	Snapshot() NodeLister
	// ClientConn is the connection to the API service (nil in unit tests).
	ClientConn() grpc.ClientConnInterface
	// RunFilterPlugins runs the profile's filters (those not skipped in
	// state) for pod on node, which the caller may have changed (a clone
	// without some pods, for preemption).
	RunFilterPlugins(ctx context.Context, state *CycleState, pod *PodInfo, node *NodeInfo) *Status
	// EventRecorder records events as the scheduler (nil in unit tests).
	EventRecorder() *client.Recorder
}

// NodeLister reads the nodes of the current cycle's snapshot.
type NodeLister interface {
	List() []*NodeInfo
	Get(name string) (*NodeInfo, bool)
	// NumNodesWithImage is how many nodes report the (normalized) image.
	NumNodesWithImage(image string) int
	// HavePodsWithAffinity are the nodes with pods that have inter-pod
	// affinity or anti-affinity terms, HavePodsWithRequiredAntiAffinity
	// those with pods that have required anti-affinity terms: kept with
	// the snapshot, so a pod without terms of its own looks at no other
	// node.
	HavePodsWithAffinity() []*NodeInfo
	HavePodsWithRequiredAntiAffinity() []*NodeInfo
}

// Factory builds a plugin; args is the plugin's raw config (may be nil).
type Factory func(args []byte, h Handle) (Plugin, error)

// Registry maps plugin names to factories.
type Registry map[string]Factory

// NamespaceLister reads namespaces for inter-pod affinity's
// namespaceSelector. The scheduler's Handle implements it; plugins given a
// Handle without it treat every namespace as unlabelled.
type NamespaceLister interface {
	// NamespaceLabels is the labels of namespace name (nil if unknown).
	NamespaceLabels(name string) map[string]string
	// NamespacesMatching is the names of the namespaces sel selects.
	NamespacesMatching(sel labels.Selector) []string
}
