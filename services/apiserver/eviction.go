// This file holds the pods/eviction subresource: not yet served.
package apiserver

import (
	"context"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	"github.com/kplane/kplane/services/apiserver/apierrors"
)

func (s *Server) evict(ctx context.Context, r *resourceInfo, ns, name string, ev *policyv1.Eviction, wo writeOptions) (*metav1.Status, error) {
	return nil, apierrors.NewMethodNotSupported("", "pods/eviction", "create")
}
