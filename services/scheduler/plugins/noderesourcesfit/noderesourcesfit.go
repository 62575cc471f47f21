// Package noderesourcesfit filters out nodes without room for a pod's
// requests: cpu, memory and the pod count, against the node's allocatable
// minus what the pods already on it (bound or assumed) request.
package noderesourcesfit

import (
	"context"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeResourcesFit"

// User-facing reasons, as Kubernetes words them.
const (
	ReasonCPU    = "Insufficient cpu"
	ReasonMemory = "Insufficient memory"
	ReasonPods   = "Too many pods"
)

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
	if len(reasons) > 0 {
		return framework.NewStatus(framework.Unschedulable, reasons...)
	}
	return nil
}
