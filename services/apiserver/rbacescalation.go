// This file holds the service's side of RBAC escalation prevention: every
// create or update of a Role, ClusterRole, RoleBinding or ClusterRoleBinding
// that reaches validation (update, patch and server-side apply included,
// since the gateway turns those into updates and creates) is checked by
// authz.Escalation, whatever authorizer or admission plugins are configured.
// Kubernetes applies the same rule in its RBAC storage rather than as an
// admission plugin, so no deployment can leave it out.

package apiserver

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"
	k8srbacv1 "k8s.io/api/rbac/v1"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/authz"
)

// rbacGroup is the API group of the four resources the check covers.
const rbacGroup = k8srbacv1.GroupName

// newEscalation is the escalation check of s: its own authorizer, and the
// roles bindings refer to read from its store.
func newEscalation(s *Server) *authz.Escalation {
	return &authz.Escalation{Authorizer: s.cfg.Authorizer, Roles: storeRoles{s: s}, Log: s.log.With("component", "rbac-escalation")}
}

// preventEscalation refuses a write of an rbac object that grants more than
// the writer holds (see authz.Escalation); other resources pass. old is
// nil on a create. It runs before schema validation, where Kubernetes' RBAC
// storage runs it.
func (s *Server) preventEscalation(ctx context.Context, c *call, r *resourceInfo, obj, old proto.Message) error {
	if r.Group != rbacGroup || c.attrs.Subresource != "" {
		return nil
	}
	w := authz.RBACWrite{User: c.attrs.User, Namespace: c.attrs.Namespace}
	var err error
	if w.Object, err = authz.ToK8s(obj); err != nil {
		return apierrors.NewInternalError(err)
	}
	if old != nil {
		// A create names no object in its request; an update does.
		w.Name = c.attrs.Name
		if w.Old, err = authz.ToK8s(old); err != nil {
			return apierrors.NewInternalError(err)
		}
	}
	return s.escalation.Check(ctx, w)
}

// storeRoles reads the role a binding refers to with a linearizable read of
// the store, as Kubernetes reads it from storage: a role created just
// before its binding is found, whatever the caches have seen.
type storeRoles struct{ s *Server }

var _ authz.RoleGetter = storeRoles{}

// RoleRules implements authz.RoleGetter.
func (g storeRoles) RoleRules(ctx context.Context, namespace, name string) ([]k8srbacv1.PolicyRule, error) {
	obj, err := g.s.store.get(ctx, g.s.resources["roles"], namespace, name)
	if err != nil {
		return nil, err
	}
	role, err := toK8sAs[*k8srbacv1.Role](obj)
	if err != nil {
		return nil, err
	}
	return role.Rules, nil
}

// ClusterRoleRules implements authz.RoleGetter. For a ClusterRole with an
// aggregationRule the rules it gathers come from the watch cache's
// ClusterRoles (the objects the RBAC authorizer aggregates), once the cache
// holds every ClusterRole the store holds now, so that one labelled to be
// gathered just before the binding is written counts.
func (g storeRoles) ClusterRoleRules(ctx context.Context, name string) ([]k8srbacv1.PolicyRule, error) {
	r := g.s.resources["clusterroles"]
	obj, err := g.s.store.get(ctx, r, "", name)
	if err != nil {
		return nil, err
	}
	cr, err := toK8sAs[*k8srbacv1.ClusterRole](obj)
	if err != nil {
		return nil, err
	}
	if !authz.HasAggregationRule(cr) {
		return cr.Rules, nil
	}
	last, err := g.s.store.lastModRevision(ctx, r)
	if err != nil {
		return nil, err
	}
	ch := g.s.cachers[r.Resource]
	if err := ch.waitFor(ctx, last); err != nil {
		return nil, err
	}
	items, _ := ch.snapshot(nil)
	all := make([]*k8srbacv1.ClusterRole, 0, len(items))
	for _, it := range items {
		other, err := toK8sAs[*k8srbacv1.ClusterRole](it)
		if err != nil {
			return nil, err
		}
		all = append(all, other)
	}
	rules, err := authz.AggregatedRules(cr, slices.Values(all))
	if err != nil {
		// A selector that does not parse gathers nothing, as for the
		// authorizer.
		g.s.log.Warn("aggregating a clusterrole", "clusterrole", name, "err", err)
	}
	return rules, nil
}

// toK8sAs converts a stored rbac object to its k8s.io/api type T.
func toK8sAs[T any](obj proto.Message) (T, error) {
	var zero T
	k, err := authz.ToK8s(obj)
	if err != nil {
		return zero, apierrors.NewInternalError(err)
	}
	t, ok := k.(T)
	if !ok {
		return zero, apierrors.NewInternalError(fmt.Errorf("rbac: got a %T, want a %T", k, zero))
	}
	return t, nil
}
