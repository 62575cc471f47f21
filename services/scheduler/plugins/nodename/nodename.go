// Package nodename filters out every node but the one a pod names in
// spec.nodeName, if it names one.
package nodename

import (
	"context"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeName"

// Reason is the user-facing rejection.
const Reason = "node(s) didn't match the requested node name"

// Plugin is the NodeName filter.
type Plugin struct{}

var _ framework.FilterPlugin = (*Plugin)(nil)

// New is the plugin's factory.
func New([]byte, framework.Handle) (framework.Plugin, error) { return &Plugin{}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Filter rejects nodes other than spec.nodeName.
func (*Plugin) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	if want := pod.Pod.GetSpec().GetNodeName(); want != "" && want != node.Name {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, Reason)
	}
	return nil
}
