// Package noderesourcesfit filters out nodes without room for a pod's
// requests: cpu, memory, ephemeral-storage, extended resources and
// hugepages, and the pod count, against the node's allocatable minus what
// the pods already on it (bound or assumed) request. A resource the node
// does not report has nothing allocatable.
package noderesourcesfit

import (
	"context"
	"slices"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeResourcesFit"

// User-facing reasons, as Kubernetes words them.
const (
	ReasonCPU    = "Insufficient cpu"
	ReasonMemory = "Insufficient memory"
	ReasonPods   = "Too many pods"
	// ReasonEphemeralStorage; other resources are "Insufficient " + name.
	ReasonEphemeralStorage = "Insufficient ephemeral-storage"
)

// Reason is the reason given when a node lacks the resource called name.
func Reason(name string) string { return "Insufficient " + name }

// Plugin is the NodeResourcesFit filter.
type Plugin struct{}

var _ framework.FilterPlugin = (*Plugin)(nil)

// New is the plugin's factory.
func New([]byte, framework.Handle) (framework.Plugin, error) { return &Plugin{}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Filter rejects a node where a request exceeds what is left. A node that
// reports no "pods" allocatable is not limited in pod count.
func (*Plugin) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	var reasons []string
	alloc, used, req := node.Allocatable, node.Requested, pod.Requests
	if alloc.Pods > 0 && used.Pods+1 > alloc.Pods {
		reasons = append(reasons, ReasonPods)
	}
	if req.MilliCPU > 0 && used.MilliCPU+req.MilliCPU > alloc.MilliCPU {
		reasons = append(reasons, ReasonCPU)
	}
	if req.Memory > 0 && used.Memory+req.Memory > alloc.Memory {
		reasons = append(reasons, ReasonMemory)
	}
	if req.EphemeralStorage > 0 && used.EphemeralStorage+req.EphemeralStorage > alloc.EphemeralStorage {
		reasons = append(reasons, ReasonEphemeralStorage)
	}
	if len(req.Scalar) > 0 {
		reasons = scalarReasons(reasons, req.Scalar, used.Scalar, alloc.Scalar)
	}
	if len(reasons) > 0 {
		return framework.NewStatus(framework.Unschedulable, reasons...)
	}
	return nil
}

// scalarReasons appends a reason for every scalar resource whose request
// exceeds what is left, in name order (Kubernetes walks a map, so its
// order varies; a fixed one keeps messages stable).
func scalarReasons(reasons []string, req, used, alloc map[string]int64) []string {
	var short []string
	for name, q := range req {
		if q > 0 && used[name]+q > alloc[name] {
			short = append(short, name)
		}
	}
	slices.Sort(short)
	for _, name := range short {
		reasons = append(reasons, Reason(name))
	}
	return reasons
}
