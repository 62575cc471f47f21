// Package defaultbinder binds a pod through the API service's pods/binding
// subresource — the only way spec.nodeName gets set. The API service
// refuses a second bind with Conflict, which is what keeps two scheduler
// replicas from ever binding one pod twice.
package defaultbinder

import (
	"context"
	"errors"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "DefaultBinder"

// Plugin is the default binder.
type Plugin struct{ pods *client.Client[*corev1.Pod] }

var _ framework.BindPlugin = (*Plugin)(nil)

// New is the plugin's factory; it needs the Handle's ClientConn.
func New(_ []byte, h framework.Handle) (framework.Plugin, error) {
	conn := h.ClientConn()
	if conn == nil {
		return nil, errors.New("defaultbinder: no connection to the API service")
	}
	pods, err := client.New[*corev1.Pod](conn)
	if err != nil {
		return nil, err
	}
	return &Plugin{pods: pods}, nil
}

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Bind posts the binding. Errors keep their API status (Conflict when the
// pod is bound already, NotFound when it is gone).
func (p *Plugin) Bind(ctx context.Context, _ *framework.CycleState, pod *framework.PodInfo, node string) *framework.Status {
	m := pod.Pod.GetMetadata()
	return framework.AsStatus(p.pods.Bind(ctx, m.GetNamespace(), m.GetName(), node))
}
