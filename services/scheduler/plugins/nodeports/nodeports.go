// Package nodeports filters out nodes where a hostPort the pod asks for is
// already taken by a pod there (same protocol and port, and the same host
// IP or either of them the wildcard 0.0.0.0).
package nodeports

import (
	"context"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodePorts"

// Reason is the user-facing rejection.
const Reason = "node(s) didn't have free ports for the requested pod ports"

// Plugin is the NodePorts filter.
type Plugin struct{}

var (
	_ framework.PreFilterPlugin = (*Plugin)(nil)
	_ framework.FilterPlugin    = (*Plugin)(nil)
)

// New is the plugin's factory.
func New([]byte, framework.Handle) (framework.Plugin, error) { return &Plugin{}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// PreFilter skips the filter for pods without host ports.
func (*Plugin) PreFilter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	if len(pod.HostPorts) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	return nil
}

// Filter rejects a node where a wanted host port is in use.
func (*Plugin) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	for _, want := range pod.HostPorts {
		for used := range node.UsedPorts {
			if Conflict(want, used) {
				return framework.NewStatus(framework.Unschedulable, Reason)
			}
		}
	}
	return nil
}

// Conflict reports whether two host ports cannot both be bound.
func Conflict(a, b framework.HostPort) bool {
	if a.Port != b.Port || a.Protocol != b.Protocol {
		return false
	}
	return a.IP == b.IP || a.IP == "0.0.0.0" || b.IP == "0.0.0.0"
}
