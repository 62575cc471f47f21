// Package defaultbinder binds a pod through the API service's pods/binding
// subresource — the only way spec.nodeName gets set. The binding carries
// the pod's uid as a precondition, so a pod deleted and re-created under
// the same name is never bound by a decision made for its predecessor. The
// API service refuses a second bind with Conflict, which is what keeps two
// scheduler replicas from ever binding one pod twice.
package defaultbinder

import (
	"context"
	"errors"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "DefaultBinder"

// Plugin is the default binder. It calls the generated PodService client
// directly (rather than client.Client.Bind) because it needs the uid
// precondition, which client.Bind does not take.
type Plugin struct{ pods corev1.PodServiceClient }

var _ framework.BindPlugin = (*Plugin)(nil)

// New is the plugin's factory; it needs the Handle's ClientConn.
func New(_ []byte, h framework.Handle) (framework.Plugin, error) {
	conn := h.ClientConn()
	if conn == nil {
		return nil, errors.New("defaultbinder: no connection to the API service")
	}
	return &Plugin{pods: corev1.NewPodServiceClient(conn)}, nil
}

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Bind posts the binding. Errors keep their API status (Conflict when the
// pod is bound already or its uid changed, NotFound when it is gone).
func (p *Plugin) Bind(ctx context.Context, _ *framework.CycleState, pod *framework.PodInfo, node string) *framework.Status {
	m := pod.Pod.GetMetadata()
	_, err := p.pods.BindPod(ctx, &corev1.BindPodRequest{
		Namespace: m.GetNamespace(),
		Name:      m.GetName(),
		Binding: &corev1.Binding{
			Metadata: &metav1.ObjectMeta{Namespace: m.GetNamespace(), Name: m.GetName(), Uid: m.GetUid()},
			Target:   &corev1.ObjectReference{Kind: "Node", Name: node},
		},
	})
	if err != nil {
		return framework.AsStatus(apierrors.FromError(err))
	}
	return nil
}
