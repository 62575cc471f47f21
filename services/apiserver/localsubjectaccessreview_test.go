// This file holds the LocalSubjectAccessReview tests on the API service:
// who may create one (admin of the namespace, not a plain user), the
// namespace checks and validation Kubernetes makes, and the answer.
package apiserver_test

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
)

func TestLocalSubjectAccessReview(t *testing.T) {
	conn, _ := startStack(t)
	az := authorizationv1.NewAuthorizationServiceClient(conn)
	admin := withToken(t, "admintoken")
	if _, err := corev1.NewNamespaceServiceClient(conn).CreateNamespace(admin, &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{
		Metadata: &metav1.ObjectMeta{Name: "team"}}}); err != nil {
		t.Fatal(err)
	}
	// bob is admin of team (the bootstrap ClusterRole, through a
	// RoleBinding), nothing in default.
	if _, err := rbacv1.NewRoleBindingServiceClient(conn).CreateRoleBinding(admin, &rbacv1.CreateRoleBindingRequest{Namespace: "team", RoleBinding: &rbacv1.RoleBinding{
		Metadata: &metav1.ObjectMeta{Namespace: "team", Name: "bob-admin"}, Subjects: userSubjects("bob"),
		RoleRef: &rbacv1.RoleRef{ApiGroup: rbacGroup, Kind: "ClusterRole", Name: "admin"}}}); err != nil {
		t.Fatal(err)
	}
	waitAllowed(t, conn, "bobtoken", &authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews", Namespace: "team"})

	lsar := func(ns, metaNS string, spec *authorizationv1.SubjectAccessReviewSpec) *authorizationv1.CreateLocalSubjectAccessReviewRequest {
		return &authorizationv1.CreateLocalSubjectAccessReviewRequest{Namespace: ns, LocalSubjectAccessReview: &authorizationv1.LocalSubjectAccessReview{
			Metadata: &metav1.ObjectMeta{Namespace: metaNS}, Spec: spec}}
	}
	bobDeletes := func(ns string) *authorizationv1.SubjectAccessReviewSpec {
		return &authorizationv1.SubjectAccessReviewSpec{User: "bob", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete", Resource: "pods", Namespace: ns}}
	}

	for _, tc := range []struct {
		name, token string
		req         *authorizationv1.CreateLocalSubjectAccessReviewRequest
		wantAllowed bool
	}{
		{name: "admin asks about bob in team", token: "admintoken", req: lsar("team", "team", bobDeletes("team")), wantAllowed: true},
		{name: "admin asks about bob in default", token: "admintoken", req: lsar("default", "default", bobDeletes("default"))},
		{name: "bob, admin of team, asks in team", token: "bobtoken", req: lsar("team", "team", bobDeletes("team")), wantAllowed: true},
		{name: "empty metadata.namespace takes the request's", token: "admintoken", req: lsar("team", "", bobDeletes("team")), wantAllowed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := az.CreateLocalSubjectAccessReview(withToken(t, tc.token), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			got := r.GetLocalSubjectAccessReview()
			if got.GetStatus().GetAllowed() != tc.wantAllowed {
				t.Errorf("allowed: got %v (%q), want %v", got.GetStatus().GetAllowed(), got.GetStatus().GetReason(), tc.wantAllowed)
			}
			if got.GetKind() != "LocalSubjectAccessReview" || got.GetApiVersion() != "authorization.k8s.io/v1" || got.GetMetadata().GetNamespace() != tc.req.GetNamespace() {
				t.Errorf("review: got %s %s in %q, want LocalSubjectAccessReview authorization.k8s.io/v1 in %q", got.GetKind(), got.GetApiVersion(), got.GetMetadata().GetNamespace(), tc.req.GetNamespace())
			}
			if !proto.Equal(got.GetSpec(), tc.req.GetLocalSubjectAccessReview().GetSpec()) {
				t.Errorf("spec: got %v, want it as sent", got.GetSpec())
			}
		})
	}

	for _, tc := range []struct {
		name, token string
		req         *authorizationv1.CreateLocalSubjectAccessReviewRequest
		wantReason  apierrors.Reason
		wantMessage string
		wantFields  []string
	}{
		{name: "bob outside his namespace: Forbidden", token: "bobtoken", req: lsar("default", "default", bobDeletes("default")), wantReason: apierrors.ReasonForbidden,
			wantMessage: `localsubjectaccessreviews.authorization.k8s.io is forbidden: User "bob" cannot create resource "localsubjectaccessreviews" in API group "authorization.k8s.io" in the namespace "default"`},
		{name: "metadata.namespace differs: Bad Request", token: "admintoken", req: lsar("team", "default", bobDeletes("team")), wantReason: apierrors.ReasonBadRequest,
			wantMessage: "the namespace of the provided object does not match the namespace sent on the request"},
		{name: "no namespace: Bad Request", token: "admintoken", req: lsar("", "", bobDeletes("")), wantReason: apierrors.ReasonBadRequest},
		{name: "resourceAttributes.namespace differs: Invalid", token: "admintoken", req: lsar("team", "team", bobDeletes("default")), wantReason: apierrors.ReasonInvalid,
			wantMessage: `LocalSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes.namespace: Invalid value: "default": must match metadata.namespace`,
			wantFields:  []string{"spec.resourceAttributes.namespace"}},
		{name: "non-resource attributes: Invalid", token: "admintoken", req: lsar("team", "team", &authorizationv1.SubjectAccessReviewSpec{User: "bob",
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/healthz"}}), wantReason: apierrors.ReasonInvalid,
			wantFields: []string{"spec.nonResourceAttributes"}},
		{name: "no user or group: Invalid", token: "admintoken", req: lsar("team", "team", &authorizationv1.SubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: "team"}}), wantReason: apierrors.ReasonInvalid,
			wantFields: []string{"spec.user"}},
		{name: "metadata beyond the namespace: Invalid", token: "admintoken", req: &authorizationv1.CreateLocalSubjectAccessReviewRequest{Namespace: "team",
			LocalSubjectAccessReview: &authorizationv1.LocalSubjectAccessReview{Metadata: &metav1.ObjectMeta{Namespace: "team", Name: "x"}, Spec: bobDeletes("team")}},
			wantReason: apierrors.ReasonInvalid, wantFields: []string{"metadata"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := az.CreateLocalSubjectAccessReview(withToken(t, tc.token), tc.req)
			se := apierrors.FromError(err)
			if se.Reason != tc.wantReason {
				t.Fatalf("got %v, want %s", err, tc.wantReason)
			}
			if tc.wantMessage != "" && se.Message != tc.wantMessage {
				t.Errorf("message: got %q, want %q", se.Message, tc.wantMessage)
			}
			var fields []string
			for _, c := range se.Causes {
				fields = append(fields, c.Field)
			}
			if len(tc.wantFields) > 0 && !slices.Equal(fields, tc.wantFields) {
				t.Errorf("fields: got %v, want %v", fields, tc.wantFields)
			}
		})
	}
}
