// This file holds RBAC's escalation prevention: the rule Kubernetes' RBAC
// storage applies to every write of a Role, ClusterRole, RoleBinding or
// ClusterRoleBinding, so that permission to write RBAC objects is never
// permission to grant more than the writer holds.

package authz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// RoleGetter finds the rules of the role a binding refers to, as they stand
// in the store. A missing role is the API's NotFound error.
type RoleGetter interface {
	// RoleRules is the rules of Role namespace/name.
	RoleRules(ctx context.Context, namespace, name string) ([]rbacv1.PolicyRule, error)
	// ClusterRoleRules is the effective rules of ClusterRole name: for one
	// with an aggregationRule, those it gathers too (see AggregatedRules).
	ClusterRoleRules(ctx context.Context, name string) ([]rbacv1.PolicyRule, error)
}

// RBACWrite is one write of an rbac object, as the escalation check sees it.
type RBACWrite struct {
	// User is who writes (after impersonation).
	User request.User
	// Namespace and Name are the request's: the namespace of a Role or
	// RoleBinding, "" for the cluster-scoped kinds; Name is empty on a
	// create, which names no object in its request (Kubernetes' POST to the
	// collection).
	Namespace, Name string
	// Object is the object to store and Old the stored one (nil on a
	// create): *rbacv1.Role, *rbacv1.ClusterRole, *rbacv1.RoleBinding or
	// *rbacv1.ClusterRoleBinding.
	Object, Old any
}

// Escalation decides whether an rbac write may be stored, as Kubernetes'
// RBAC storage decides:
//
//   - members of system:masters may write anything;
//   - a Role or ClusterRole may be written by a user the authorizer allows
//     to "escalate" it, or whose own rules (cluster-wide, plus those of the
//     Role's namespace) cover every rule it holds; an aggregationRule on a
//     ClusterRole (new or old) needs full authority (* on every resource and
//     every non-resource URL), since it can gather any rule;
//   - a RoleBinding or ClusterRoleBinding may be written by a user the
//     authorizer allows to "bind" the referenced role (in the binding's
//     namespace, "" for a ClusterRoleBinding), or who already holds every
//     rule of that role (resolved in the binding's namespace);
//   - an update that changes only what the garbage collector changes
//     (ownerReferences, finalizers) never escalates.
//
// The user's rules come from Authorizer's RulesFor when it implements
// RuleResolver; when it does not, the user is taken to hold no rules, so
// only masters, escalate and bind remain (it fails closed).
type Escalation struct {
	Authorizer Authorizer
	Roles      RoleGetter
	// Log records authorizer errors, which count as a refusal; nil discards.
	Log *slog.Logger
}

// fullAuthority is what setting an aggregationRule takes: everything.
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// aggregationNeedsAdmin is Kubernetes' refusal of an aggregationRule.
const aggregationNeedsAdmin = "must have cluster-admin privileges to use the aggregationRule"

// Check returns nil if w may be stored, a Forbidden StatusError with
// Kubernetes' message if it would grant what the user does not hold, or
// the error of looking up a binding's role (NotFound for a missing one).
func (e *Escalation) Check(ctx context.Context, w RBACWrite) error {
	if slices.Contains(w.User.Groups, request.MastersGroup) {
		return nil
	}
	switch o := w.Object.(type) {
	case *rbacv1.Role:
		return e.checkRole(ctx, w, "roles", o.Rules, false)
	case *rbacv1.ClusterRole:
		aggregates := HasAggregationRule(o)
		if old, ok := w.Old.(*rbacv1.ClusterRole); ok && HasAggregationRule(old) {
			aggregates = true
		}
		return e.checkRole(ctx, w, "clusterroles", o.Rules, aggregates)
	case *rbacv1.RoleBinding:
		return e.checkBinding(ctx, w, "rolebindings", o.RoleRef)
	case *rbacv1.ClusterRoleBinding:
		return e.checkBinding(ctx, w, "clusterrolebindings", o.RoleRef)
	}
	return apierrors.NewInternalError(fmt.Errorf("authz: escalation check of a %T", w.Object))
}

// checkRole is the rule for Roles and ClusterRoles; resource says which,
// and aggregates whether the write sets, keeps or drops an aggregationRule.
func (e *Escalation) checkRole(ctx context.Context, w RBACWrite, resource string, rules []rbacv1.PolicyRule, aggregates bool) error {
	if e.allowed(ctx, request.Attributes{User: w.User, Verb: "escalate", APIGroup: rbacv1.GroupName, APIVersion: "*",
		Resource: resource, Namespace: w.Namespace, Name: w.Name}) {
		return nil
	}
	if onlyGCFieldsChange(w.Object, w.Old) {
		return nil
	}
	name := objectName(w.Object)
	held, resolveErr := e.heldRules(ctx, w.User, w.Namespace)
	if err := notHeld(w.User, held, resolveErr, rules); err != nil {
		return apierrors.NewForbidden(rbacv1.GroupName, resource, name, err.Error())
	}
	if aggregates {
		if ok, _ := validation.Covers(held, fullAuthority); !ok {
			return apierrors.NewForbidden(rbacv1.GroupName, resource, name, aggregationNeedsAdmin)
		}
	}
	return nil
}

// checkBinding is the rule for RoleBindings and ClusterRoleBindings;
// resource says which.
func (e *Escalation) checkBinding(ctx context.Context, w RBACWrite, resource string, ref rbacv1.RoleRef) error {
	if onlyGCFieldsChange(w.Object, w.Old) {
		return nil
	}
	if e.bindAllowed(ctx, w.User, ref, w.Namespace) {
		return nil
	}
	rules, err := e.roleRefRules(ctx, ref, w.Namespace)
	if err != nil {
		return err
	}
	held, resolveErr := e.heldRules(ctx, w.User, w.Namespace)
	if err := notHeld(w.User, held, resolveErr, rules); err != nil {
		return apierrors.NewForbidden(rbacv1.GroupName, resource, objectName(w.Object), err.Error())
	}
	return nil
}

// bindAllowed asks the authorizer whether u may "bind" the role ref names,
// in the binding's namespace ("" for a ClusterRoleBinding): so a
// delegate may be let bind one ClusterRole in one namespace only.
func (e *Escalation) bindAllowed(ctx context.Context, u request.User, ref rbacv1.RoleRef, namespace string) bool {
	a := request.Attributes{User: u, Verb: "bind", APIGroup: ref.APIGroup, Name: ref.Name, Namespace: namespace}
	switch ref.Kind {
	case "ClusterRole":
		a.Resource = "clusterroles"
	case "Role":
		a.Resource = "roles"
	default:
		return false
	}
	return e.allowed(ctx, a)
}

// allowed asks the authorizer; an error counts as a refusal.
func (e *Escalation) allowed(ctx context.Context, a request.Attributes) bool {
	if e.Authorizer == nil {
		return false
	}
	d, err := e.Authorizer.Authorize(ctx, a)
	if err != nil {
		e.logger().Warn("authorizing an rbac write failed; refusing", "user", a.User.Name, "verb", a.Verb,
			"resource", a.Resource, "namespace", a.Namespace, "name", a.Name, "err", err)
		return false
	}
	return d.Allowed
}

func (e *Escalation) logger() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

// roleRefRules is the rules of the role ref names, a Role looked up in the
// binding's namespace.
func (e *Escalation) roleRefRules(ctx context.Context, ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "Role":
		return e.Roles.RoleRules(ctx, namespace, ref.Name)
	case "ClusterRole":
		return e.Roles.ClusterRoleRules(ctx, ref.Name)
	}
	return nil, apierrors.NewInternalError(fmt.Errorf("unsupported role reference kind: %q", ref.Kind))
}

// errCannotListRules is the resolution error when the authorizer cannot
// say which rules a user holds.
var errCannotListRules = errors.New("the authorizer cannot list the rules a user holds")

// heldRules is the rules u holds in namespace (cluster-wide ones included).
// A resolver error comes back beside the rules it could list; an
// authorizer that lists no rules holds none.
func (e *Escalation) heldRules(ctx context.Context, u request.User, namespace string) ([]rbacv1.PolicyRule, error) {
	rr, ok := e.Authorizer.(RuleResolver)
	if !ok {
		return nil, errCannotListRules
	}
	rules, _, err := rr.RulesFor(ctx, u, namespace)
	return rules, err
}

// notHeld returns nil if held covers every rule in granted, or else
// Kubernetes' refusal: the user, its groups, and each missing rule on its
// own line, rules that differ only in verbs merged, sorted, with the
// resolver's error last if there was one.
func notHeld(u request.User, held []rbacv1.PolicyRule, resolveErr error, granted []rbacv1.PolicyRule) error {
	ok, missing := validation.Covers(held, granted)
	if ok {
		return nil
	}
	var lines []string
	for _, r := range mergeVerbs(missing) {
		lines = append(lines, describeRule(r))
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s",
		u.Name, u.Groups, strings.Join(lines, "\n"))
	if resolveErr != nil {
		msg += fmt.Sprintf("; resolution errors: %v", []error{resolveErr})
	}
	return errors.New(msg)
}

// groupResource keys the rules mergeVerbs may merge.
type groupResource struct{ group, resource string }

// mergeVerbs joins rules naming exactly one API group and one resource and
// nothing else but verbs, when they name the same group and resource, into
// one rule with all their verbs; Covers reports missing rights one verb at a
// time, and a reader wants them together. Other rules pass through.
func mergeVerbs(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 0, len(rules))
	merged := map[groupResource]int{} // index in out
	for _, r := range rules {
		if len(r.APIGroups) != 1 || len(r.Resources) != 1 || len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			out = append(out, r)
			continue
		}
		key := groupResource{r.APIGroups[0], r.Resources[0]}
		if i, ok := merged[key]; ok {
			out[i].Verbs = append(out[i].Verbs, r.Verbs...)
			continue
		}
		merged[key] = len(out)
		out = append(out, rbacv1.PolicyRule{Verbs: slices.Clone(r.Verbs), APIGroups: r.APIGroups, Resources: r.Resources})
	}
	return out
}

// describeRule is the short form of a rule in Kubernetes' escalation
// message: the fields that are set, in the order APIGroups, Resources,
// NonResourceURLs, ResourceNames, Verbs, each a list of quoted strings, as
// in {APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}.
func describeRule(r rbacv1.PolicyRule) string {
	var parts []string
	for _, f := range []struct {
		name   string
		values []string
	}{
		{"APIGroups", r.APIGroups},
		{"Resources", r.Resources},
		{"NonResourceURLs", r.NonResourceURLs},
		{"ResourceNames", r.ResourceNames},
		{"Verbs", r.Verbs},
	} {
		if len(f.values) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", f.name, f.values))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// onlyGCFieldsChange reports whether an update changes nothing but what the
// garbage collector writes (ownerReferences and finalizers) and bookkeeping
// that grants nothing (managedFields, resourceVersion); such an update needs
// no escalation check, so that an object can always be released. On a
// create (old nil) it is false.
func onlyGCFieldsChange(obj, old any) bool {
	o, ok := obj.(runtime.Object)
	prev, prevOK := old.(runtime.Object)
	if !ok || !prevOK {
		return false
	}
	c := o.DeepCopyObject()
	cm, err := apimeta.Accessor(c)
	if err != nil {
		return false
	}
	pm, err := apimeta.Accessor(prev)
	if err != nil {
		return false
	}
	cm.SetOwnerReferences(pm.GetOwnerReferences())
	cm.SetFinalizers(pm.GetFinalizers())
	cm.SetManagedFields(pm.GetManagedFields())
	cm.SetResourceVersion(pm.GetResourceVersion())
	return equality.Semantic.DeepEqual(c, prev)
}

// objectName is the name of an rbac object, "" if it has none.
func objectName(obj any) string {
	if m, err := apimeta.Accessor(obj); err == nil {
		return m.GetName()
	}
	return ""
}
