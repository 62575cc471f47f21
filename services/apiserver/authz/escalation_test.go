// This file holds the tests of RBAC escalation prevention's decision.

package authz

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

// staticRoles is a RoleGetter over fixed roles, standing in for the store.
type staticRoles struct {
	roles        map[string]*rbacv1.Role // namespace/name
	clusterRoles map[string]*rbacv1.ClusterRole
}

func (s staticRoles) RoleRules(_ context.Context, namespace, name string) ([]rbacv1.PolicyRule, error) {
	if r, ok := s.roles[namespace+"/"+name]; ok {
		return r.Rules, nil
	}
	return nil, apierrors.NewNotFound(rbacv1.GroupName, "roles", name)
}

func (s staticRoles) ClusterRoleRules(_ context.Context, name string) ([]rbacv1.PolicyRule, error) {
	if r, ok := s.clusterRoles[name]; ok {
		return r.Rules, nil
	}
	return nil, apierrors.NewNotFound(rbacv1.GroupName, "clusterroles", name)
}

// authorizeOnly hides RulesFor: an authorizer that cannot list rules.
type authorizeOnly struct{ Authorizer }

func k8sRule(verbs, groups, resources []string, names ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources, ResourceNames: names}
}

func objMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "7", UID: "u"}
}

func userSubject(name string) []rbacv1.Subject {
	return []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}
}

func clusterRef(name string) rbacv1.RoleRef {
	return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}
}

// escalationFixture is an RBAC authorizer and the roles it knows:
//
//   - mallory may only create clusterrolebindings;
//   - binder may create clusterrolebindings and bind ClusterRole cluster-admin;
//   - alice holds everything on pods in team-a, and pod-reader cluster-wide
//     nowhere (only through a RoleBinding in team-a);
//   - escalator may escalate roles in team-b and clusterroles;
//   - carl may escalate Role team-c/named only;
//   - coreadmin holds everything in the core group and every non-resource
//     URL cluster-wide, but nothing in other groups.
func escalationFixture(t *testing.T) (*RBAC, staticRoles) {
	t.Helper()
	clusterRoles := []*rbacv1.ClusterRole{
		{ObjectMeta: objMeta("", "cluster-admin"), Rules: []rbacv1.PolicyRule{
			k8sRule(ss("*"), ss("*"), ss("*")), {Verbs: ss("*"), NonResourceURLs: ss("*")}}},
		{ObjectMeta: objMeta("", "crb-creator"), Rules: []rbacv1.PolicyRule{
			k8sRule(ss("create"), ss(rbacv1.GroupName), ss("clusterrolebindings"))}},
		{ObjectMeta: objMeta("", "bind-admin"), Rules: []rbacv1.PolicyRule{
			k8sRule(ss("bind"), ss(rbacv1.GroupName), ss("clusterroles"), "cluster-admin")}},
		{ObjectMeta: objMeta("", "pod-reader"), Rules: []rbacv1.PolicyRule{
			k8sRule(ss("get", "list", "watch"), ss(""), ss("pods"))}},
		{ObjectMeta: objMeta("", "secret-reader"), Rules: []rbacv1.PolicyRule{
			k8sRule(ss("get", "list"), ss(""), ss("secrets"))}},
		{ObjectMeta: objMeta("", "escalate-clusterroles"), Rules: []rbacv1.PolicyRule{
			k8sRule(ss("escalate"), ss(rbacv1.GroupName), ss("clusterroles"))}},
		{ObjectMeta: objMeta("", "core-admin"), Rules: []rbacv1.PolicyRule{
			k8sRule(ss("*"), ss(""), ss("*")), {Verbs: ss("*"), NonResourceURLs: ss("*")}}},
	}
	roles := []*rbacv1.Role{
		{ObjectMeta: objMeta("team-a", "pod-admin"), Rules: []rbacv1.PolicyRule{k8sRule(ss("*"), ss(""), ss("pods"))}},
		{ObjectMeta: objMeta("team-b", "escalate-roles"), Rules: []rbacv1.PolicyRule{
			k8sRule(ss("escalate"), ss(rbacv1.GroupName), ss("roles"))}},
		{ObjectMeta: objMeta("team-c", "escalate-one"), Rules: []rbacv1.PolicyRule{
			k8sRule(ss("escalate"), ss(rbacv1.GroupName), ss("roles"), "named")}},
	}
	objs := []any{
		&rbacv1.ClusterRoleBinding{ObjectMeta: objMeta("", "mallory"), Subjects: userSubject("mallory"), RoleRef: clusterRef("crb-creator")},
		&rbacv1.ClusterRoleBinding{ObjectMeta: objMeta("", "binder-create"), Subjects: userSubject("binder"), RoleRef: clusterRef("crb-creator")},
		&rbacv1.ClusterRoleBinding{ObjectMeta: objMeta("", "binder-bind"), Subjects: userSubject("binder"), RoleRef: clusterRef("bind-admin")},
		&rbacv1.RoleBinding{ObjectMeta: objMeta("team-a", "alice-pods"), Subjects: userSubject("alice"),
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-admin"}},
		&rbacv1.RoleBinding{ObjectMeta: objMeta("team-b", "escalator"), Subjects: userSubject("escalator"),
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "escalate-roles"}},
		&rbacv1.RoleBinding{ObjectMeta: objMeta("team-c", "carl"), Subjects: userSubject("carl"),
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "escalate-one"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: objMeta("", "escalator"), Subjects: userSubject("escalator"), RoleRef: clusterRef("escalate-clusterroles")},
		&rbacv1.ClusterRoleBinding{ObjectMeta: objMeta("", "coreadmin"), Subjects: userSubject("coreadmin"), RoleRef: clusterRef("core-admin")},
	}
	r := NewRBAC(nil)
	st := staticRoles{roles: map[string]*rbacv1.Role{}, clusterRoles: map[string]*rbacv1.ClusterRole{}}
	for _, cr := range clusterRoles {
		objs = append(objs, cr)
		st.clusterRoles[cr.Name] = cr
	}
	for _, role := range roles {
		objs = append(objs, role)
		st.roles[role.Namespace+"/"+role.Name] = role
	}
	for _, o := range objs {
		if err := r.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	return r, st
}

func TestEscalationCheck(t *testing.T) {
	rbac, roles := escalationFixture(t)
	u := func(name string, groups ...string) request.User {
		return request.User{Name: name, Groups: append(groups, request.AuthenticatedGroup)}
	}
	role := func(ns, name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
		return &rbacv1.Role{ObjectMeta: objMeta(ns, name), Rules: rules}
	}
	withFinalizer := func(r *rbacv1.Role) *rbacv1.Role {
		r = r.DeepCopy()
		r.Finalizers = []string{"example.com/hold"}
		return r
	}
	aggregated := &rbacv1.ClusterRole{ObjectMeta: objMeta("", "agg"),
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"x": "y"}}}}}
	secretsRole := role("team-a", "r", k8sRule(ss("get"), ss(""), ss("secrets")))
	const notHeldPrefix = ` is forbidden: user "alice" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n"

	tests := []struct {
		name       string
		authorizer Authorizer // default: the fixture's RBAC
		w          RBACWrite
		// wantReason "" means allowed; otherwise wantMessage, if set, is the
		// exact message.
		wantReason  apierrors.Reason
		wantMessage string
	}{
		{name: "system:masters binds cluster-admin",
			w: RBACWrite{User: u("root", request.MastersGroup),
				Object: &rbacv1.ClusterRoleBinding{ObjectMeta: objMeta("", "root"), Subjects: userSubject("root"), RoleRef: clusterRef("cluster-admin")}}},
		{name: "create clusterrolebindings alone does not bind cluster-admin",
			w: RBACWrite{User: u("mallory"),
				Object: &rbacv1.ClusterRoleBinding{ObjectMeta: objMeta("", "pwn"), Subjects: userSubject("mallory"), RoleRef: clusterRef("cluster-admin")}},
			wantReason: apierrors.ReasonForbidden,
			wantMessage: `clusterrolebindings.rbac.authorization.k8s.io "pwn" is forbidden: user "mallory" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n" +
				`{APIGroups:["*"], Resources:["*"], Verbs:["*"]}` + "\n" + `{NonResourceURLs:["*"], Verbs:["*"]}`},
		{name: "bind on cluster-admin allows binding it",
			w: RBACWrite{User: u("binder"),
				Object: &rbacv1.ClusterRoleBinding{ObjectMeta: objMeta("", "ok"), Subjects: userSubject("binder"), RoleRef: clusterRef("cluster-admin")}}},
		{name: "bind on cluster-admin does not reach another role",
			w: RBACWrite{User: u("binder"),
				Object: &rbacv1.ClusterRoleBinding{ObjectMeta: objMeta("", "s"), Subjects: userSubject("binder"), RoleRef: clusterRef("secret-reader")}},
			wantReason: apierrors.ReasonForbidden,
			wantMessage: `clusterrolebindings.rbac.authorization.k8s.io "s" is forbidden: user "binder" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n" +
				`{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}`},
		{name: "escalate allows a role with rules not held",
			w: RBACWrite{User: u("escalator"), Namespace: "team-b", Object: role("team-b", "r", k8sRule(ss("*"), ss(""), ss("secrets")))}},
		{name: "escalate in one namespace does not reach another",
			w:          RBACWrite{User: u("escalator"), Namespace: "team-a", Object: role("team-a", "r", k8sRule(ss("*"), ss(""), ss("secrets")))},
			wantReason: apierrors.ReasonForbidden},
		{name: "escalate on one role name allows updating it",
			w: RBACWrite{User: u("carl"), Namespace: "team-c", Name: "named",
				Object: role("team-c", "named", k8sRule(ss("*"), ss(""), ss("secrets"))), Old: role("team-c", "named")}},
		{name: "escalate on one role name does not apply to a create, which names no object",
			w:          RBACWrite{User: u("carl"), Namespace: "team-c", Object: role("team-c", "named", k8sRule(ss("*"), ss(""), ss("secrets")))},
			wantReason: apierrors.ReasonForbidden},
		{name: "escalate on clusterroles allows an aggregationRule",
			w: RBACWrite{User: u("escalator"), Object: aggregated}},
		{name: "covered rules are allowed",
			w: RBACWrite{User: u("alice"), Namespace: "team-a", Object: role("team-a", "r", k8sRule(ss("get", "delete"), ss(""), ss("pods")))}},
		{name: "partial coverage lists each missing rule",
			w: RBACWrite{User: u("alice"), Namespace: "team-a", Object: role("team-a", "r",
				k8sRule(ss("get", "list"), ss(""), ss("pods", "secrets")),
				k8sRule(ss("get"), ss(""), ss("configmaps"), "settings"),
				rbacv1.PolicyRule{Verbs: ss("get"), NonResourceURLs: ss("/metrics")})},
			wantReason: apierrors.ReasonForbidden,
			wantMessage: `roles.rbac.authorization.k8s.io "r"` + notHeldPrefix +
				`{APIGroups:[""], Resources:["configmaps"], ResourceNames:["settings"], Verbs:["get"]}` + "\n" +
				`{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}` + "\n" +
				`{NonResourceURLs:["/metrics"], Verbs:["get"]}`},
		{name: "rules held in team-a do not cover a role in team-b",
			w:          RBACWrite{User: u("alice"), Namespace: "team-b", Object: role("team-b", "r", k8sRule(ss("get"), ss(""), ss("pods")))},
			wantReason: apierrors.ReasonForbidden,
			wantMessage: `roles.rbac.authorization.k8s.io "r"` + notHeldPrefix +
				`{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`},
		{name: "namespaced rules do not cover a clusterrole",
			w: RBACWrite{User: u("alice"),
				Object: &rbacv1.ClusterRole{ObjectMeta: objMeta("", "c"), Rules: []rbacv1.PolicyRule{k8sRule(ss("get"), ss(""), ss("pods"))}}},
			wantReason: apierrors.ReasonForbidden},
		{name: "rolebinding to a clusterrole is resolved in the binding's namespace",
			w: RBACWrite{User: u("alice"), Namespace: "team-a",
				Object: &rbacv1.RoleBinding{ObjectMeta: objMeta("team-a", "b"), Subjects: userSubject("bob"), RoleRef: clusterRef("pod-reader")}}},
		{name: "rolebinding to a clusterrole in a namespace where it is not held",
			w: RBACWrite{User: u("alice"), Namespace: "team-b",
				Object: &rbacv1.RoleBinding{ObjectMeta: objMeta("team-b", "b"), Subjects: userSubject("bob"), RoleRef: clusterRef("pod-reader")}},
			wantReason: apierrors.ReasonForbidden,
			wantMessage: `rolebindings.rbac.authorization.k8s.io "b"` + notHeldPrefix +
				`{APIGroups:[""], Resources:["pods"], Verbs:["get" "list" "watch"]}`},
		{name: "rolebinding to a role of its own namespace",
			w: RBACWrite{User: u("alice"), Namespace: "team-a",
				Object: &rbacv1.RoleBinding{ObjectMeta: objMeta("team-a", "b"), Subjects: userSubject("bob"),
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-admin"}}}},
		{name: "a role is looked up in the binding's namespace only",
			w: RBACWrite{User: u("alice"), Namespace: "team-b",
				Object: &rbacv1.RoleBinding{ObjectMeta: objMeta("team-b", "b"), Subjects: userSubject("bob"),
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-admin"}}},
			wantReason: apierrors.ReasonNotFound, wantMessage: `roles.rbac.authorization.k8s.io "pod-admin" not found`},
		{name: "an aggregationRule needs full authority",
			w:           RBACWrite{User: u("coreadmin"), Object: aggregated},
			wantReason:  apierrors.ReasonForbidden,
			wantMessage: `clusterroles.rbac.authorization.k8s.io "agg" is forbidden: must have cluster-admin privileges to use the aggregationRule`},
		{name: "the same user may write a clusterrole without one",
			w: RBACWrite{User: u("coreadmin"),
				Object: &rbacv1.ClusterRole{ObjectMeta: objMeta("", "c"), Rules: []rbacv1.PolicyRule{k8sRule(ss("get"), ss(""), ss("secrets"))}}}},
		{name: "removing an aggregationRule needs full authority",
			w: RBACWrite{User: u("coreadmin"), Name: "agg",
				Object: &rbacv1.ClusterRole{ObjectMeta: objMeta("", "agg"), Rules: []rbacv1.PolicyRule{k8sRule(ss("get"), ss(""), ss("pods"))}},
				Old:    aggregated},
			wantReason: apierrors.ReasonForbidden},
		{name: "an update of finalizers only needs no rights",
			w: RBACWrite{User: u("alice"), Namespace: "team-a", Name: "r", Object: withFinalizer(secretsRole), Old: secretsRole}},
		{name: "an update of the rules is checked",
			w: RBACWrite{User: u("alice"), Namespace: "team-a", Name: "r",
				Object: role("team-a", "r", k8sRule(ss("get", "list"), ss(""), ss("secrets"))), Old: secretsRole},
			wantReason: apierrors.ReasonForbidden},
		{name: "an authorizer that lists no rules fails closed",
			authorizer: authorizeOnly{rbac},
			w:          RBACWrite{User: u("alice"), Namespace: "team-a", Object: role("team-a", "r", k8sRule(ss("get"), ss(""), ss("pods")))},
			wantReason: apierrors.ReasonForbidden,
			wantMessage: `roles.rbac.authorization.k8s.io "r"` + notHeldPrefix +
				`{APIGroups:[""], Resources:["pods"], Verbs:["get"]}; resolution errors: [the authorizer cannot list the rules a user holds]`},
		{name: "an authorizer that lists no rules still answers bind",
			authorizer: authorizeOnly{rbac},
			w: RBACWrite{User: u("binder"),
				Object: &rbacv1.ClusterRoleBinding{ObjectMeta: objMeta("", "ok"), Subjects: userSubject("binder"), RoleRef: clusterRef("cluster-admin")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Escalation{Authorizer: rbac, Roles: roles}
			if tt.authorizer != nil {
				e.Authorizer = tt.authorizer
			}
			err := e.Check(context.Background(), tt.w)
			if tt.wantReason == "" {
				if err != nil {
					t.Fatalf("got %v, want allowed", err)
				}
				return
			}
			se := apierrors.FromError(err)
			if err == nil || se.Reason != tt.wantReason {
				t.Fatalf("got %v, want %s", err, tt.wantReason)
			}
			if tt.wantMessage != "" && se.Message != tt.wantMessage {
				t.Errorf("message:\ngot  %q\nwant %q", se.Message, tt.wantMessage)
			}
		})
	}
}

func TestDescribeRule(t *testing.T) {
	tests := []struct {
		name string
		rule rbacv1.PolicyRule
		want string
	}{
		{name: "resource rule", rule: k8sRule(ss("get", "list"), ss("", "apps"), ss("pods")),
			want: `{APIGroups:["" "apps"], Resources:["pods"], Verbs:["get" "list"]}`},
		{name: "resource names", rule: k8sRule(ss("get"), ss(""), ss("configmaps"), "a", "b"),
			want: `{APIGroups:[""], Resources:["configmaps"], ResourceNames:["a" "b"], Verbs:["get"]}`},
		{name: "non-resource URLs", rule: rbacv1.PolicyRule{Verbs: ss("get"), NonResourceURLs: ss("/healthz", "/version")},
			want: `{NonResourceURLs:["/healthz" "/version"], Verbs:["get"]}`},
		{name: "empty", want: `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describeRule(tt.rule); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
