// This file holds the tests of impersonation and of SelfSubjectRulesReview.

package apiserver_test

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/identity"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// TestImpersonation: Kubernetes' user impersonation (kubectl --as): the
// caller must be allowed to impersonate the user, each group and the uid;
// the request then runs as that user; the audit log keeps both.
func TestImpersonation(t *testing.T) {
	conn, auditPath := startStack(t)
	az := authorizationv1.NewAuthorizationServiceClient(conn)
	whoCan := func(token string, kv ...string) (*authorizationv1.SubjectAccessReviewStatus, error) {
		ctx := metadata.AppendToOutgoingContext(withToken(t, token), kv...)
		r, err := az.CreateSelfSubjectAccessReview(ctx, &authorizationv1.CreateSelfSubjectAccessReviewRequest{SelfSubjectAccessReview: &authorizationv1.SelfSubjectAccessReview{
			Spec: &authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods", Namespace: "default"}}}})
		return r.GetSelfSubjectAccessReview().GetStatus(), err
	}
	for _, tc := range []struct {
		name       string
		token      string
		kv         []string
		wantReason apierrors.Reason
		allowed    bool
	}{
		{name: "admin as bob", token: "admintoken", kv: []string{identity.ActAsUserKey, "bob"}},
		{name: "admin as bob in system:masters", token: "admintoken", kv: []string{identity.ActAsUserKey, "bob", identity.ActAsGroupKey, "system:masters"}, allowed: true},
		{name: "admin as a service account", token: "admintoken", kv: []string{identity.ActAsUserKey, "system:serviceaccount:default:builder", identity.ActAsUIDKey, "42"}},
		{name: "bob as admin", token: "bobtoken", kv: []string{identity.ActAsUserKey, "admin"}, wantReason: apierrors.ReasonForbidden},
		{name: "groups without a user", token: "admintoken", kv: []string{identity.ActAsGroupKey, "system:masters"}, wantReason: apierrors.ReasonBadRequest},
		{name: "extras", token: "admintoken", kv: []string{identity.ActAsUserKey, "bob", identity.ActAsExtraKeyPrefix + "scopes", "x"}, wantReason: apierrors.ReasonBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := whoCan(tc.token, tc.kv...)
			if got := apierrors.ReasonOf(err); got != tc.wantReason {
				t.Fatalf("got %v, want reason %q", err, tc.wantReason)
			}
			if err == nil && st.GetAllowed() != tc.allowed {
				t.Errorf("allowed: got %v (%s), want %v", st.GetAllowed(), st.GetReason(), tc.allowed)
			}
		})
	}
	_, err := whoCan("bobtoken", identity.ActAsUserKey, "admin")
	if want := `users "admin" is forbidden: User "bob" cannot impersonate resource "users" in API group "" at the cluster scope`; apierrors.FromError(err).Message != want {
		t.Errorf("bob as admin: got %q, want %q", apierrors.FromError(err).Message, want)
	}

	// A real request as bob is refused as bob, and audited with both users.
	var hdr metadata.MD
	_, err = corev1.NewPodServiceClient(conn).ListPods(metadata.AppendToOutgoingContext(withToken(t, "admintoken"), identity.ActAsUserKey, "bob"),
		&corev1.ListPodsRequest{Namespace: "default"}, grpc.Header(&hdr))
	if want := `pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "default"`; apierrors.FromError(err).Message != want {
		t.Errorf("list as bob: got %v, want %q", err, want)
	}
	f, err := os.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	found := false
	for sc.Scan() {
		var ev struct {
			AuditID string `json:"auditID"`
			User    struct {
				Username string `json:"username"`
			} `json:"user"`
			ImpersonatedUser *struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"impersonatedUser"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(hdr.Get("audit-id"), ev.AuditID) {
			found = true
			if ev.User.Username != "admin" || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != "bob" ||
				!slices.Contains(ev.ImpersonatedUser.Groups, "system:authenticated") {
				t.Errorf("audit event: got %+v, want user admin impersonating bob", ev)
			}
		}
	}
	if !found {
		t.Error("no audit line for the impersonated list")
	}
}

// TestSelfSubjectRulesReview: kubectl auth can-i --list's review lists the
// caller's RBAC rules in a namespace; a node's list is incomplete.
func TestSelfSubjectRulesReview(t *testing.T) {
	conn, _ := startStack(t)
	az := authorizationv1.NewAuthorizationServiceClient(conn)
	rules := func(token, ns string) (*authorizationv1.SubjectRulesReviewStatus, error) {
		r, err := az.CreateSelfSubjectRulesReview(withToken(t, token), &authorizationv1.CreateSelfSubjectRulesReviewRequest{
			SelfSubjectRulesReview: &authorizationv1.SelfSubjectRulesReview{Spec: &authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}})
		return r.GetSelfSubjectRulesReview().GetStatus(), err
	}
	st, err := rules("admintoken", "default")
	if err != nil || st.GetIncomplete() || !slices.ContainsFunc(st.GetResourceRules(), func(r *authorizationv1.ResourceRule) bool {
		return slices.Equal(r.GetVerbs(), []string{"*"}) && slices.Equal(r.GetResources(), []string{"*"})
	}) {
		t.Errorf("admin: got %v, %v; want the cluster-admin rule", st, err)
	}
	st, err = rules("bobtoken", "default")
	if err != nil || st.GetIncomplete() || !slices.ContainsFunc(st.GetNonResourceRules(), func(r *authorizationv1.NonResourceRule) bool {
		return slices.Contains(r.GetNonResourceUrls(), "/healthz")
	}) || slices.ContainsFunc(st.GetResourceRules(), func(r *authorizationv1.ResourceRule) bool { return slices.Contains(r.GetResources(), "pods") }) {
		t.Errorf("bob: got %v, %v; want the discovery rules and nothing on pods", st, err)
	}
	if st, err = rules("nodeatoken", "default"); err != nil || !st.GetIncomplete() {
		t.Errorf("node: got %v, %v; want incomplete", st, err)
	}
	if _, err := rules("bobtoken", ""); apierrors.ReasonOf(err) != apierrors.ReasonBadRequest {
		t.Errorf("no namespace: got %v, want BadRequest", err)
	}
}
