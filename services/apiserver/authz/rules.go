// This file holds the rule resolvers behind SelfSubjectRulesReview: the RBAC
// rules that apply to a user in a namespace, for each authorizer and their
// union.

package authz

import (
	"context"
	"maps"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/kplane/kplane/services/apiserver/request"
)

// RuleResolver lists the rules that apply to a user in a namespace, for
// SelfSubjectRulesReview. incomplete says the list may miss rules the
// resolver cannot express as rules (an authorizer deciding by other means).
type RuleResolver interface {
	RulesFor(ctx context.Context, u request.User, namespace string) (rules []rbacv1.PolicyRule, incomplete bool, err error)
}

var (
	_ RuleResolver = (*RBAC)(nil)
	_ RuleResolver = (*Node)(nil)
	_ RuleResolver = Union(nil)
)

// RulesFor returns the rules of every ClusterRoleBinding naming u and, when
// namespace is set, of every RoleBinding in namespace naming u, as
// Kubernetes' RBAC rule resolver does, in a stable order (cluster bindings,
// then namespace bindings, each by name). It is never incomplete.
func (r *RBAC) RulesFor(_ context.Context, u request.User, namespace string) ([]rbacv1.PolicyRule, bool, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var rules []rbacv1.PolicyRule
	for _, name := range slices.Sorted(maps.Keys(r.clusterRoleBindings)) {
		b := r.clusterRoleBindings[name]
		if b.RoleRef.Kind != "ClusterRole" || !anySubjectMatches(b.Subjects, u, "") {
			continue
		}
		if cr := r.clusterRoles[b.RoleRef.Name]; cr != nil {
			rules = append(rules, r.clusterRoleRules(cr)...)
		}
	}
	if namespace == "" {
		return rules, false, nil
	}
	bindings := r.roleBindings[namespace]
	for _, name := range slices.Sorted(maps.Keys(bindings)) {
		b := bindings[name]
		if !anySubjectMatches(b.Subjects, u, b.Namespace) {
			continue
		}
		switch b.RoleRef.Kind {
		case "Role":
			if role := r.roles[b.Namespace+"/"+b.RoleRef.Name]; role != nil {
				rules = append(rules, role.Rules...)
			}
		case "ClusterRole":
			if cr := r.clusterRoles[b.RoleRef.Name]; cr != nil {
				rules = append(rules, r.clusterRoleRules(cr)...)
			}
		}
	}
	return rules, false, nil
}

// RulesFor lists nothing: what the Node authorizer allows depends on the
// objects asked about, so for a node user the list is incomplete (as
// Kubernetes' Node authorizer answers).
func (n *Node) RulesFor(_ context.Context, u request.User, _ string) ([]rbacv1.PolicyRule, bool, error) {
	_, isNode := NodeName(u)
	return nil, isNode, nil
}

// RulesFor joins the rules of every member; a member that is no
// RuleResolver, or that failed, makes the answer incomplete. The first
// error is returned with the rules the others listed.
func (u Union) RulesFor(ctx context.Context, user request.User, namespace string) ([]rbacv1.PolicyRule, bool, error) {
	var rules []rbacv1.PolicyRule
	incomplete := false
	var firstErr error
	for _, az := range u {
		rr, ok := az.(RuleResolver)
		if !ok {
			incomplete = true
			continue
		}
		rs, inc, err := rr.RulesFor(ctx, user, namespace)
		if err != nil {
			incomplete = true
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		rules = append(rules, rs...)
		incomplete = incomplete || inc
	}
	return rules, incomplete, firstErr
}
