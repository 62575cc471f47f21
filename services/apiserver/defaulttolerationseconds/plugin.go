// Package defaulttolerationseconds is Kubernetes' DefaultTolerationSeconds
// admission plugin: a new pod that does not tolerate the NoExecute taints
// node.kubernetes.io/not-ready and node.kubernetes.io/unreachable gets a
// toleration of each for a bounded time (300 s by default, as
// kube-apiserver's --default-not-ready-toleration-seconds and
// --default-unreachable-toleration-seconds), so the node lifecycle
// controller evicts it that long after its node fails.
package defaulttolerationseconds

import (
	"context"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// The taints the plugin adds tolerations for, and Kubernetes' default.
const (
	TaintNotReady    = "node.kubernetes.io/not-ready"
	TaintUnreachable = "node.kubernetes.io/unreachable"
	DefaultSeconds   = 300
)

// Plugin is the admission plugin; it implements apiserver.MutatingAdmission.
type Plugin struct {
	notReady, unreachable int64
}

// New returns the plugin with the tolerationSeconds given to each taint.
func New(notReadySeconds, unreachableSeconds int64) *Plugin {
	return &Plugin{notReady: notReadySeconds, unreachable: unreachableSeconds}
}

// Admit adds the missing tolerations to a pod being created; other
// requests pass untouched.
func (p *Plugin) Admit(_ context.Context, a *request.Admission) error {
	if a.Operation != request.Create || a.APIGroup != "" || a.Resource != "pods" || a.Subresource != "" {
		return nil
	}
	pod, ok := a.Object.(*corev1.Pod)
	if !ok {
		return nil
	}
	if pod.Spec == nil {
		pod.Spec = &corev1.PodSpec{}
	}
	notReady, unreachable := false, false
	for _, t := range pod.Spec.Tolerations {
		// An empty key or effect matches every key or effect.
		if t.GetEffect() != "" && t.GetEffect() != "NoExecute" {
			continue
		}
		notReady = notReady || t.GetKey() == "" || t.GetKey() == TaintNotReady
		unreachable = unreachable || t.GetKey() == "" || t.GetKey() == TaintUnreachable
	}
	if !notReady {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, toleration(TaintNotReady, p.notReady))
	}
	if !unreachable {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, toleration(TaintUnreachable, p.unreachable))
	}
	return nil
}

func toleration(key string, seconds int64) *corev1.Toleration {
	return &corev1.Toleration{Key: key, Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(seconds)}
}
