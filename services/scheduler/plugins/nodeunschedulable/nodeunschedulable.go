// Package nodeunschedulable filters out nodes marked spec.unschedulable
// (cordoned), unless the pod tolerates the unschedulable taint.
package nodeunschedulable

import (
	"context"

	"github.com/kplane/kplane/internal/placement"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeUnschedulable"

// Reason is the user-facing rejection.
const Reason = "node(s) were unschedulable"

var unschedulableTaint = &corev1.Taint{Key: "node.kubernetes.io/unschedulable", Effect: "NoSchedule"}

// Plugin is the NodeUnschedulable filter.
type Plugin struct{}

var _ framework.FilterPlugin = (*Plugin)(nil)

// New is the plugin's factory.
func New([]byte, framework.Handle) (framework.Plugin, error) { return &Plugin{}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Filter rejects cordoned nodes.
func (*Plugin) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	if !node.Unschedulable {
		return nil
	}
	if placement.TaintTolerated(pod.Pod.GetSpec().GetTolerations(), unschedulableTaint) {
		return nil
	}
	return framework.NewStatus(framework.UnschedulableAndUnresolvable, Reason)
}
