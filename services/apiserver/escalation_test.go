// This file holds the end-to-end tests of RBAC escalation prevention
// through the real API service (tokens, RBAC fed from its watch, bootstrap
// policy).

package apiserver_test

import (
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/proto/apierrors"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
)

const rbacGroup = "rbac.authorization.k8s.io"

func userSubjects(name string) []*rbacv1.Subject {
	return []*rbacv1.Subject{{Kind: "User", ApiGroup: rbacGroup, Name: name}}
}

// grantCluster binds a new ClusterRole with rules to user cluster-wide, as
// admin.
func grantCluster(t *testing.T, conn *grpc.ClientConn, name, user string, rules ...*rbacv1.PolicyRule) {
	t.Helper()
	admin := withToken(t, "admintoken")
	if _, err := rbacv1.NewClusterRoleServiceClient(conn).CreateClusterRole(admin, &rbacv1.CreateClusterRoleRequest{ClusterRole: &rbacv1.ClusterRole{
		Metadata: &metav1.ObjectMeta{Name: name}, Rules: rules}}); err != nil {
		t.Fatalf("create clusterrole %s: %v", name, err)
	}
	if _, err := rbacv1.NewClusterRoleBindingServiceClient(conn).CreateClusterRoleBinding(admin, &rbacv1.CreateClusterRoleBindingRequest{ClusterRoleBinding: &rbacv1.ClusterRoleBinding{
		Metadata: &metav1.ObjectMeta{Name: name}, Subjects: userSubjects(user),
		RoleRef: &rbacv1.RoleRef{ApiGroup: rbacGroup, Kind: "ClusterRole", Name: name}}}); err != nil {
		t.Fatalf("create clusterrolebinding %s: %v", name, err)
	}
}

// grantNamespace binds a new Role with rules to user in namespace ns, as
// admin.
func grantNamespace(t *testing.T, conn *grpc.ClientConn, ns, name, user string, rules ...*rbacv1.PolicyRule) {
	t.Helper()
	admin := withToken(t, "admintoken")
	if _, err := rbacv1.NewRoleServiceClient(conn).CreateRole(admin, &rbacv1.CreateRoleRequest{Namespace: ns, Role: &rbacv1.Role{
		Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}}); err != nil {
		t.Fatalf("create role %s: %v", name, err)
	}
	if _, err := rbacv1.NewRoleBindingServiceClient(conn).CreateRoleBinding(admin, &rbacv1.CreateRoleBindingRequest{Namespace: ns, RoleBinding: &rbacv1.RoleBinding{
		Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name}, Subjects: userSubjects(user),
		RoleRef: &rbacv1.RoleRef{ApiGroup: rbacGroup, Kind: "Role", Name: name}}}); err != nil {
		t.Fatalf("create rolebinding %s: %v", name, err)
	}
}

// waitAllowed waits until the RBAC cache, which follows the store
// asynchronously, lets token's user do ra (bounded).
func waitAllowed(t *testing.T, conn *grpc.ClientConn, token string, ra *authorizationv1.ResourceAttributes) {
	t.Helper()
	az := authorizationv1.NewAuthorizationServiceClient(conn)
	for range 100 {
		r, err := az.CreateSelfSubjectAccessReview(withToken(t, token), &authorizationv1.CreateSelfSubjectAccessReviewRequest{SelfSubjectAccessReview: &authorizationv1.SelfSubjectAccessReview{
			Spec: &authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: ra}}})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetSelfSubjectAccessReview().GetStatus().GetAllowed() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s is still not allowed %v", token, ra)
}

func wantForbiddenMessage(t *testing.T, what string, err error, want string) {
	t.Helper()
	se := apierrors.FromError(err)
	if err == nil || se.Reason != apierrors.ReasonForbidden || se.Code != 403 {
		t.Fatalf("%s: got %v, want 403 Forbidden", what, err)
	}
	if se.Message != want {
		t.Errorf("%s: message\ngot  %q\nwant %q", what, se.Message, want)
	}
}

// TestBindingClusterAdminNeedsBind is the probe: a user who may only create
// clusterrolebindings cannot bind cluster-admin to itself (and so cannot
// read Secrets), until it is allowed to bind that ClusterRole.
func TestBindingClusterAdminNeedsBind(t *testing.T) {
	conn, _ := startStack(t)
	crbs := rbacv1.NewClusterRoleBindingServiceClient(conn)
	grantCluster(t, conn, "crb-creator", "bob",
		&rbacv1.PolicyRule{Verbs: []string{"create"}, ApiGroups: []string{rbacGroup}, Resources: []string{"clusterrolebindings"}})
	waitAllowed(t, conn, "bobtoken", &authorizationv1.ResourceAttributes{Verb: "create", Group: rbacGroup, Resource: "clusterrolebindings"})

	bob := withToken(t, "bobtoken")
	pwn := &rbacv1.ClusterRoleBinding{Metadata: &metav1.ObjectMeta{Name: "bob-admin"}, Subjects: userSubjects("bob"),
		RoleRef: &rbacv1.RoleRef{ApiGroup: rbacGroup, Kind: "ClusterRole", Name: "cluster-admin"}}
	_, err := crbs.CreateClusterRoleBinding(bob, &rbacv1.CreateClusterRoleBindingRequest{ClusterRoleBinding: pwn})
	wantForbiddenMessage(t, "bob binding cluster-admin", err,
		`clusterrolebindings.rbac.authorization.k8s.io "bob-admin" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:`+"\n"+
			`{APIGroups:["*"], Resources:["*"], Verbs:["*"]}`+"\n"+
			`{NonResourceURLs:["*"], Verbs:["*"]}`)
	if _, err := crbs.GetClusterRoleBinding(withToken(t, "admintoken"), &rbacv1.GetClusterRoleBindingRequest{Name: "bob-admin"}); apierrors.ReasonOf(err) != apierrors.ReasonNotFound {
		t.Fatalf("the refused binding: got %v, want NotFound (nothing stored)", err)
	}
	if _, err := corev1.NewSecretServiceClient(conn).ListSecrets(bob, &corev1.ListSecretsRequest{Namespace: "kube-system"}); apierrors.ReasonOf(err) != apierrors.ReasonForbidden {
		t.Fatalf("bob listing secrets: got %v, want Forbidden", err)
	}
	// A dry run is checked too.
	_, err = crbs.CreateClusterRoleBinding(bob, &rbacv1.CreateClusterRoleBindingRequest{ClusterRoleBinding: pwn, DryRun: []string{"All"}})
	if apierrors.ReasonOf(err) != apierrors.ReasonForbidden {
		t.Errorf("dry run: got %v, want Forbidden", err)
	}

	// An aggregated ClusterRole grants what it gathers, though it has no
	// rules of its own.
	admin := withToken(t, "admintoken")
	clusterRoles := rbacv1.NewClusterRoleServiceClient(conn)
	for _, cr := range []*rbacv1.ClusterRole{
		{Metadata: &metav1.ObjectMeta{Name: "gathers-secrets"}, AggregationRule: &rbacv1.AggregationRule{
			ClusterRoleSelectors: []*metav1.LabelSelector{{MatchLabels: map[string]string{"example.com/secrets": "true"}}}}},
		{Metadata: &metav1.ObjectMeta{Name: "secret-reader", Labels: map[string]string{"example.com/secrets": "true"}},
			Rules: []*rbacv1.PolicyRule{{Verbs: []string{"get"}, ApiGroups: []string{""}, Resources: []string{"secrets"}}}},
	} {
		if _, err := clusterRoles.CreateClusterRole(admin, &rbacv1.CreateClusterRoleRequest{ClusterRole: cr}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = crbs.CreateClusterRoleBinding(bob, &rbacv1.CreateClusterRoleBindingRequest{ClusterRoleBinding: &rbacv1.ClusterRoleBinding{
		Metadata: &metav1.ObjectMeta{Name: "bob-secrets"}, Subjects: userSubjects("bob"),
		RoleRef: &rbacv1.RoleRef{ApiGroup: rbacGroup, Kind: "ClusterRole", Name: "gathers-secrets"}}})
	wantForbiddenMessage(t, "bob binding an aggregated clusterrole", err,
		`clusterrolebindings.rbac.authorization.k8s.io "bob-secrets" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:`+"\n"+
			`{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`)

	grantCluster(t, conn, "bind-cluster-admin", "bob",
		&rbacv1.PolicyRule{Verbs: []string{"bind"}, ApiGroups: []string{rbacGroup}, Resources: []string{"clusterroles"}, ResourceNames: []string{"cluster-admin"}})
	waitAllowed(t, conn, "bobtoken", &authorizationv1.ResourceAttributes{Verb: "bind", Group: rbacGroup, Resource: "clusterroles", Name: "cluster-admin"})
	if _, err := crbs.CreateClusterRoleBinding(bob, &rbacv1.CreateClusterRoleBindingRequest{ClusterRoleBinding: pwn}); err != nil {
		t.Fatalf("bob with bind on cluster-admin: %v", err)
	}
}

// TestRoleUpdateCannotEscalate: a user who may write Roles in a namespace
// may write one with rules it holds, but neither an update nor an
// unconditional update (what the gateway sends for a patch or an apply)
// may add rules it does not hold; a RoleBinding in another namespace to a
// ClusterRole it holds only here is refused too.
func TestRoleUpdateCannotEscalate(t *testing.T) {
	conn, _ := startStack(t)
	roles := rbacv1.NewRoleServiceClient(conn)
	grantNamespace(t, conn, "default", "role-writer", "bob",
		&rbacv1.PolicyRule{Verbs: []string{"get", "create", "update", "patch"}, ApiGroups: []string{rbacGroup}, Resources: []string{"roles", "rolebindings"}},
		&rbacv1.PolicyRule{Verbs: []string{"get", "list"}, ApiGroups: []string{""}, Resources: []string{"pods"}})
	waitAllowed(t, conn, "bobtoken", &authorizationv1.ResourceAttributes{Verb: "create", Group: rbacGroup, Resource: "roles", Namespace: "default"})

	bob := withToken(t, "bobtoken")
	podsRule := &rbacv1.PolicyRule{Verbs: []string{"get"}, ApiGroups: []string{""}, Resources: []string{"pods"}}
	created, err := roles.CreateRole(bob, &rbacv1.CreateRoleRequest{Namespace: "default", Role: &rbacv1.Role{
		Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "mine"}, Rules: []*rbacv1.PolicyRule{podsRule}}})
	if err != nil {
		t.Fatalf("bob creating a role with rules it holds: %v", err)
	}
	const notHeld = `roles.rbac.authorization.k8s.io "mine" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n" +
		`{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}`
	escalated := created.GetRole()
	escalated.Rules = append(escalated.Rules, &rbacv1.PolicyRule{Verbs: []string{"get", "list"}, ApiGroups: []string{""}, Resources: []string{"secrets"}})
	for _, tc := range []struct {
		name string
		rv   string
	}{
		{name: "update", rv: escalated.GetMetadata().GetResourceVersion()},
		{name: "unconditional update", rv: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &rbacv1.Role{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "mine", ResourceVersion: tc.rv}, Rules: escalated.GetRules()}
			_, err := roles.UpdateRole(bob, &rbacv1.UpdateRoleRequest{Namespace: "default", Name: "mine", Role: r})
			wantForbiddenMessage(t, tc.name, err, notHeld)
		})
	}
	got, err := roles.GetRole(withToken(t, "admintoken"), &rbacv1.GetRoleRequest{Namespace: "default", Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.GetRole().GetRules()); n != 1 {
		t.Errorf("stored role has %d rules, want 1 (the refused updates stored nothing)", n)
	}

	// The same ClusterRole bound in another namespace: bob holds its rules
	// in default only.
	if _, err := rbacv1.NewClusterRoleServiceClient(conn).CreateClusterRole(withToken(t, "admintoken"), &rbacv1.CreateClusterRoleRequest{ClusterRole: &rbacv1.ClusterRole{
		Metadata: &metav1.ObjectMeta{Name: "pod-getter"}, Rules: []*rbacv1.PolicyRule{podsRule}}}); err != nil {
		t.Fatal(err)
	}
	bindings := rbacv1.NewRoleBindingServiceClient(conn)
	rb := func(ns string) *rbacv1.CreateRoleBindingRequest {
		return &rbacv1.CreateRoleBindingRequest{Namespace: ns, RoleBinding: &rbacv1.RoleBinding{
			Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "carol-gets-pods"}, Subjects: userSubjects("carol"),
			RoleRef: &rbacv1.RoleRef{ApiGroup: rbacGroup, Kind: "ClusterRole", Name: "pod-getter"}}}
	}
	if _, err := bindings.CreateRoleBinding(bob, rb("default")); err != nil {
		t.Fatalf("bob binding a clusterrole it holds in default: %v", err)
	}
	grantNamespace(t, conn, "kube-public", "binding-writer", "bob",
		&rbacv1.PolicyRule{Verbs: []string{"create"}, ApiGroups: []string{rbacGroup}, Resources: []string{"rolebindings"}})
	waitAllowed(t, conn, "bobtoken", &authorizationv1.ResourceAttributes{Verb: "create", Group: rbacGroup, Resource: "rolebindings", Namespace: "kube-public"})
	_, err = bindings.CreateRoleBinding(bob, rb("kube-public"))
	wantForbiddenMessage(t, "bob binding it in kube-public", err,
		`rolebindings.rbac.authorization.k8s.io "carol-gets-pods" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:`+"\n"+
			`{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`)
}
