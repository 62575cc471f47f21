// This file adapts the API service to the interfaces Kubernetes' policy code
// asks for: a namespace lister (and the client it falls back to), and an
// authorizer for CEL's authorizer library.

package policy

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	k8serrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// namespaces reads namespaces through Config.Namespace for one request. It
// is the NamespaceLister of Kubernetes' matcher; its client (which the
// matcher asks when the lister has no such namespace) answers the same.
// It holds the request's ctx because the lister interface takes none; it
// lives only for that request (Policies.Validate).
type namespaces struct {
	ctx context.Context
	p   *Policies
}

var _ listersv1.NamespaceLister = (*namespaces)(nil)

// Get returns the namespace, or a Kubernetes NotFound.
func (n *namespaces) Get(name string) (*corev1.Namespace, error) {
	return n.GetNamespace(name)
}

// GetNamespace is Get.
func (n *namespaces) GetNamespace(name string) (*corev1.Namespace, error) {
	if n.p.cfg.Namespace == nil {
		return nil, k8serrors.NewNotFound(corev1.Resource("namespaces"), name)
	}
	m, err := n.p.cfg.Namespace(n.ctx, name)
	if apierrors.IsNotFound(err) {
		return nil, k8serrors.NewNotFound(corev1.Resource("namespaces"), name)
	}
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{}
	if err := convert(m, ns); err != nil {
		return nil, err
	}
	return ns, nil
}

// List is not used by the matcher.
func (n *namespaces) List(labels.Selector) ([]*corev1.Namespace, error) {
	return nil, errors.New("policy: listing namespaces is not supported")
}

// client is the fallback client Kubernetes' namespace matcher requires.
func (n *namespaces) client() kubernetes.Interface {
	return nsClientset{ns: n}
}

// nsClientset implements only CoreV1().Namespaces().Get, the one call the
// matcher makes; other methods would panic through the nil embedded
// interfaces.
type nsClientset struct {
	kubernetes.Interface
	ns *namespaces
}

func (c nsClientset) CoreV1() typedcorev1.CoreV1Interface { return nsCoreV1{ns: c.ns} }

type nsCoreV1 struct {
	typedcorev1.CoreV1Interface
	ns *namespaces
}

func (c nsCoreV1) Namespaces() typedcorev1.NamespaceInterface { return nsGetter{ns: c.ns} }

type nsGetter struct {
	typedcorev1.NamespaceInterface
	ns *namespaces
}

func (g nsGetter) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Namespace, error) {
	return g.ns.GetNamespace(name)
}

// authorizerAdapter answers Kubernetes' authorizer with Config.Authorize.
type authorizerAdapter struct {
	authorize func(ctx context.Context, a request.Attributes) (request.Decision, error)
}

var _ authorizer.Authorizer = (*authorizerAdapter)(nil)

// Authorize allows what kplane's authorizer allows and has no opinion on
// the rest, as RBAC.
func (z *authorizerAdapter) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if z.authorize == nil {
		return authorizer.DecisionNoOpinion, "no authorizer", nil
	}
	var u request.User
	if a.GetUser() != nil {
		u = request.User{Name: a.GetUser().GetName(), UID: a.GetUser().GetUID(), Groups: a.GetUser().GetGroups(), Extra: a.GetUser().GetExtra()}
	}
	attrs := request.Attributes{User: u, Verb: a.GetVerb(), Namespace: a.GetNamespace(), Name: a.GetName()}
	if a.IsResourceRequest() {
		attrs.APIGroup, attrs.APIVersion, attrs.Resource, attrs.Subresource = a.GetAPIGroup(), a.GetAPIVersion(), a.GetResource(), a.GetSubresource()
	} else {
		attrs.Path = a.GetPath()
	}
	d, err := z.authorize(ctx, attrs)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", fmt.Errorf("policy: authorizer: %w", err)
	}
	if d.Allowed {
		return authorizer.DecisionAllow, d.Reason, nil
	}
	return authorizer.DecisionNoOpinion, d.Reason, nil
}
