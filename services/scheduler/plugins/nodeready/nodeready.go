// Package nodeready filters out nodes whose Ready condition is False (not
// ready) or Unknown (unreachable: its agent stopped reporting), unless the
// pod tolerates the matching node.kubernetes.io taint with NoSchedule. A
// node with no Ready condition yet is not judged here.
package nodeready

import (
	"context"

	"github.com/kplane/kplane/internal/placement"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeReady"

// User-facing reasons, worded as the not-ready/unreachable taints would be.
const (
	ReasonNotReady    = "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
	ReasonUnreachable = "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"
)

var (
	notReadyTaint    = &corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: "NoSchedule"}
	unreachableTaint = &corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: "NoSchedule"}
)

// Plugin is the NodeReady filter.
type Plugin struct{}

var _ framework.FilterPlugin = (*Plugin)(nil)

// New is the plugin's factory.
func New([]byte, framework.Handle) (framework.Plugin, error) { return &Plugin{}, nil }

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Filter rejects not-ready and unreachable nodes.
func (*Plugin) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	tols := pod.Pod.GetSpec().GetTolerations()
	switch node.Ready {
	case "False":
		if !placement.TaintTolerated(tols, notReadyTaint) {
			return framework.NewStatus(framework.Unschedulable, ReasonNotReady)
		}
	case "Unknown":
		if !placement.TaintTolerated(tols, unreachableTaint) {
			return framework.NewStatus(framework.Unschedulable, ReasonUnreachable)
		}
	}
	return nil
}
