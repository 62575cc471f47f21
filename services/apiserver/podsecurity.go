// This file wires the PodSecurity admission plugin (package podsecurity)
// into the write path: the namespaces and pods it reads from the watch
// caches, and its warnings and audit annotations back on the request.

package apiserver

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/podsecurity"
	"github.com/kplane/kplane/services/apiserver/request"
)

// podSecurityCluster is the plugin's view of the cluster.
type podSecurityCluster struct{ s *Server }

var _ podsecurity.Cluster = podSecurityCluster{}

// Namespace reads the watch cache first, as Kubernetes' plugin reads its
// informer, and the store for a namespace the cache has not seen yet.
func (c podSecurityCluster) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	obj, err := c.s.cachedOrStored(ctx, c.s.resources["namespaces"], "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Namespace), nil
}

func (c podSecurityCluster) Pods(ctx context.Context, namespace string) ([]*corev1.Pod, error) {
	ch := c.s.cachers["pods"]
	if err := ch.waitReady(ctx); err != nil {
		return nil, err
	}
	items, _ := ch.snapshot(func(m proto.Message) bool { return meta(m).GetNamespace() == namespace })
	out := make([]*corev1.Pod, len(items))
	for i, it := range items {
		out[i] = it.(*corev1.Pod)
	}
	return out, nil
}

// admitPodSecurity runs the PodSecurity plugin on a request it applies to:
// warnings go to the client as Warning headers, annotations to the audit
// event, and a refusal is returned.
func (s *Server) admitPodSecurity(ctx context.Context, c *call, a *request.Admission) error {
	res, err := s.podSecurity.Validate(ctx, a)
	for _, w := range res.Warnings {
		_ = grpc.SetHeader(ctx, metadata.Pairs(apierrors.WarningHeader, apierrors.WarningValue(w)))
	}
	if len(res.Annotations) > 0 {
		if c.ev.Annotations == nil {
			c.ev.Annotations = map[string]string{}
		}
		for k, v := range res.Annotations {
			c.ev.Annotations[k] = v
		}
	}
	return err
}
