// This file holds the Authorizer interface, the union that asks authorizers
// in turn (Node, then RBAC, in production), and the Forbidden error worded
// as Kubernetes words it.

package authz

import (
	"context"
	"errors"
	"strings"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// Authorizer is what this package's authorizers implement (the apiserver
// declares the same method set where it uses it).
type Authorizer interface {
	Authorize(ctx context.Context, a request.Attributes) (request.Decision, error)
}

// Union asks each authorizer in turn: the first that allows wins. If none
// allows, the request is denied with the denials' reasons joined; if one
// failed and none allowed, Union returns the error (the request must then be
// refused, never allowed).
type Union []Authorizer

var _ Authorizer = Union(nil)

// NewDefault is the apiserver's production authorizer: Node, then RBAC.
// pods, fed with every pod, limits nodes to the ConfigMaps and Secrets of
// their own pods; nil lets a node get any (tests of other parts only).
func NewDefault(rbac *RBAC, pods *PodIndex) Union {
	cfg := NodeConfig{}
	if pods != nil {
		cfg.RelatedToNode = RelatedByPods(pods.PodsOnNode, pods.ClaimVolume)
	}
	return Union{NewNode(cfg), rbac}
}

// Authorize implements Authorizer.
func (u Union) Authorize(ctx context.Context, a request.Attributes) (request.Decision, error) {
	var reasons []string
	var errs []error
	for _, az := range u {
		d, err := az.Authorize(ctx, a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if d.Allowed {
			return d, nil
		}
		if d.Reason != "" {
			reasons = append(reasons, d.Reason)
		}
	}
	if len(errs) > 0 {
		return request.Decision{}, errors.Join(errs...)
	}
	return request.Decision{Reason: strings.Join(reasons, ", ")}, nil
}

// Forbidden is the error for a denied request, worded as Kubernetes words it:
// `pods "web" is forbidden: User "bob" cannot get resource "pods" in API group "" in the namespace "default"`.
func Forbidden(a request.Attributes, d request.Decision) *apierrors.StatusError {
	return apierrors.NewForbidden(a.APIGroup, a.Resource, a.Name, ForbiddenMessage(a, d.Reason))
}
