// This file holds the tests of the service with its production authorizers
// and admission: RBAC and the Node authorizer end to end, and the access
// reviews.

package apiserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/apierrors"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/apiserver/audit"
	"github.com/kplane/kplane/services/apiserver/internal/storetest"
)

// startStack runs the API service as `kplane apiserver` wires it: static
// tokens, RBAC fed from the service's own watch plus the Node authorizer,
// NodeRestriction, the bootstrap policy and the audit log.
func startStack(t *testing.T) (*grpc.ClientConn, string) {
	t.Helper()
	return startStackWith(t, nil)
}

// startStackWith is startStack with an audit Policy.
func startStackWith(t *testing.T, policy *audit.Policy) (*grpc.ClientConn, string) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(
		"admintoken,admin,1,system:masters\n"+
			"bobtoken,bob,2\n"+
			"nodeatoken,system:node:a,3,system:nodes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(dir, "audit.log")
	// The standard API service with authorization and NodeRestriction
	// only: no mutating plugins, no webhooks.
	w, err := apiserver.Wire(context.Background(), apiserver.Options{
		Config: apiserver.Config{StoreEndpoints: storetest.Start(t),
			SecurePort: apiserver.DefaultSecurePort, RequestTimeout: apiserver.DefaultRequestTimeout},
		InsecurePlaintext: true, TokenAuthFile: tokens,
		Audit:             apiserver.AuditOptions{Path: auditPath},
		DisabledAdmission: []string{"ServiceAccount", "DefaultTolerationSeconds", "MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	w.Config.AuditPolicy = policy
	srv, err := w.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-srv.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("not ready")
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, auditPath
}

func withToken(t *testing.T, token string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func pod(name, node string) *corev1.Pod {
	return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: &corev1.PodSpec{NodeName: node, Containers: []*corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}
}

func TestAuthorizationEndToEnd(t *testing.T) {
	conn, auditPath := startStack(t)
	pods, nodes := corev1.NewPodServiceClient(conn), corev1.NewNodeServiceClient(conn)
	rbac := rbacv1.NewRoleBindingServiceClient(conn)
	roles := rbacv1.NewRoleServiceClient(conn)

	var hdr metadata.MD
	_, err := pods.ListPods(withToken(t, ""), &corev1.ListPodsRequest{Namespace: "default"}, grpc.Header(&hdr))
	if got := apierrors.ReasonOf(err); got != apierrors.ReasonUnauthorized {
		t.Errorf("anonymous: got %v, want Unauthorized", err)
	}
	_, err = pods.ListPods(withToken(t, "bobtoken"), &corev1.ListPodsRequest{Namespace: "default"})
	if se := apierrors.FromError(err); se == nil || se.Reason != apierrors.ReasonForbidden {
		t.Fatalf("bob without a binding: got %v, want Forbidden", err)
	} else if want := `pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "default"`; se.Message != want {
		t.Errorf("message: got %q, want %q", se.Message, want)
	}

	// Grant bob a role; RBAC follows the store through the service's watch.
	admin := withToken(t, "admintoken")
	if _, err := roles.CreateRole(admin, &rbacv1.CreateRoleRequest{Namespace: "default", Role: &rbacv1.Role{
		Metadata: &metav1.ObjectMeta{Name: "pod-reader", Namespace: "default"},
		Rules:    []*rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, ApiGroups: []string{""}, Resources: []string{"pods"}}},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.CreateRoleBinding(admin, &rbacv1.CreateRoleBindingRequest{Namespace: "default", RoleBinding: &rbacv1.RoleBinding{
		Metadata: &metav1.ObjectMeta{Name: "bob-reads", Namespace: "default"},
		Subjects: []*rbacv1.Subject{{Kind: "User", ApiGroup: "rbac.authorization.k8s.io", Name: "bob"}},
		RoleRef:  &rbacv1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pod-reader"},
	}}); err != nil {
		t.Fatal(err)
	}
	var listErr error
	for range 100 { // the cache catches up asynchronously (bounded wait)
		if _, listErr = pods.ListPods(withToken(t, "bobtoken"), &corev1.ListPodsRequest{Namespace: "default"}); listErr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if listErr != nil {
		t.Fatalf("bob with a binding: %v", listErr)
	}

	// Node a: its own Node yes, node b's no; no binding; not b's pods' status.
	nodeA := withToken(t, "nodeatoken")
	if _, err := nodes.CreateNode(nodeA, &corev1.CreateNodeRequest{Node: &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "a"}}}); err != nil {
		t.Fatalf("node a creating itself: %v", err)
	}
	if _, err := nodes.CreateNode(admin, &corev1.CreateNodeRequest{Node: &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "b"}}}); err != nil {
		t.Fatal(err)
	}
	nb, err := nodes.GetNode(admin, &corev1.GetNodeRequest{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	n := nb.GetNode()
	n.Metadata.Labels = map[string]string{"x": "y"}
	_, err = nodes.UpdateNode(nodeA, &corev1.UpdateNodeRequest{Name: "b", Node: n})
	if apierrors.ReasonOf(err) != apierrors.ReasonForbidden {
		t.Errorf("node a updating node b: got %v, want Forbidden", err)
	}
	if _, err := pods.CreatePod(admin, &corev1.CreatePodRequest{Namespace: "default", Pod: pod("on-b", "b")}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.CreatePod(admin, &corev1.CreatePodRequest{Namespace: "default", Pod: pod("free", "")}); err != nil {
		t.Fatal(err)
	}
	_, err = pods.BindPod(nodeA, &corev1.BindPodRequest{Namespace: "default", Name: "free", Binding: &corev1.Binding{Target: &corev1.ObjectReference{Name: "a"}}})
	if apierrors.ReasonOf(err) != apierrors.ReasonForbidden {
		t.Errorf("node a binding a pod: got %v, want Forbidden", err)
	}
	p, err := pods.GetPod(admin, &corev1.GetPodRequest{Namespace: "default", Name: "on-b"})
	if err != nil {
		t.Fatal(err)
	}
	st := p.GetPod()
	st.Status.Phase = "Running"
	_, err = pods.UpdatePodStatus(nodeA, &corev1.UpdatePodStatusRequest{Namespace: "default", Name: "on-b", Pod: st})
	if apierrors.ReasonOf(err) != apierrors.ReasonForbidden {
		t.Errorf("node a writing the status of a pod on b: got %v, want Forbidden", err)
	}

	// The audit log has the anonymous request, with the ID sent as a header.
	ids := hdr.Get("audit-id")
	if len(ids) != 1 {
		t.Fatalf("audit-id header: got %v", ids)
	}
	f, err := os.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			AuditID        string `json:"auditID"`
			Verb           string `json:"verb"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if ev.AuditID == ids[0] {
			found = true
			if ev.ResponseStatus.Code != 401 || ev.Verb != "list" {
				t.Errorf("audit event for the anonymous list: got %+v", ev)
			}
		}
	}
	if !found {
		t.Errorf("no audit line with ID %s", ids[0])
	}
}

// TestAccessReviews: SelfSubjectAccessReview answers for the caller (what
// `kubectl auth can-i` asks), SubjectAccessReview for a named user and only
// to callers allowed to create it; both go through RBAC and the Node
// authorizer, resource and non-resource alike.
func TestAccessReviews(t *testing.T) {
	conn, _ := startStack(t)
	az := authorizationv1.NewAuthorizationServiceClient(conn)
	res := func(verb, resource, ns, name string) *authorizationv1.ResourceAttributes {
		return &authorizationv1.ResourceAttributes{Verb: verb, Resource: resource, Namespace: ns, Name: name}
	}
	self := func(token string, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) (*authorizationv1.SubjectAccessReviewStatus, error) {
		r, err := az.CreateSelfSubjectAccessReview(withToken(t, token), &authorizationv1.CreateSelfSubjectAccessReviewRequest{SelfSubjectAccessReview: &authorizationv1.SelfSubjectAccessReview{
			Spec: &authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: ra, NonResourceAttributes: nra}}})
		return r.GetSelfSubjectAccessReview().GetStatus(), err
	}
	for _, tc := range []struct {
		name  string
		token string
		ra    *authorizationv1.ResourceAttributes
		nra   *authorizationv1.NonResourceAttributes
		want  bool
	}{
		{name: "bob may not list pods", token: "bobtoken", ra: res("list", "pods", "default", "")},
		{name: "admin may list pods", token: "admintoken", ra: res("list", "pods", "default", ""), want: true},
		{name: "bob may get /healthz", token: "bobtoken", nra: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/healthz"}, want: true},
		{name: "bob may get /apis/apps", token: "bobtoken", nra: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/apis/apps"}, want: true},
		{name: "bob may not get /metrics", token: "bobtoken", nra: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/metrics"}},
		{name: "node a may update its node", token: "nodeatoken", ra: res("update", "nodes", "", "a"), want: true},
		{name: "node a may not update node b", token: "nodeatoken", ra: res("update", "nodes", "", "b")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := self(tc.token, tc.ra, tc.nra)
			if err != nil {
				t.Fatal(err)
			}
			if st.GetAllowed() != tc.want {
				t.Errorf("got allowed=%v (%q), want %v", st.GetAllowed(), st.GetReason(), tc.want)
			}
		})
	}
	t.Run("both attributes: Invalid", func(t *testing.T) {
		_, err := self("bobtoken", res("get", "pods", "default", "x"), &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/"})
		if se := apierrors.FromError(err); se.Reason != apierrors.ReasonInvalid || len(se.Causes) == 0 || se.Causes[0].Field != "spec.nonResourceAttributes" {
			t.Errorf("got %v, want Invalid on spec.nonResourceAttributes (as Kubernetes)", err)
		}
	})
	t.Run("anonymous: Unauthorized", func(t *testing.T) {
		_, err := self("", res("get", "pods", "default", "x"), nil)
		if apierrors.ReasonOf(err) != apierrors.ReasonUnauthorized {
			t.Errorf("got %v, want Unauthorized", err)
		}
	})
	sar := func(token, user string, groups []string, ra *authorizationv1.ResourceAttributes) (*authorizationv1.SubjectAccessReviewStatus, error) {
		r, err := az.CreateSubjectAccessReview(withToken(t, token), &authorizationv1.CreateSubjectAccessReviewRequest{SubjectAccessReview: &authorizationv1.SubjectAccessReview{
			Spec: &authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: ra}}})
		return r.GetSubjectAccessReview().GetStatus(), err
	}
	if _, err := sar("bobtoken", "admin", nil, res("get", "pods", "default", "")); apierrors.ReasonOf(err) != apierrors.ReasonForbidden {
		t.Errorf("bob's SubjectAccessReview: got %v, want Forbidden", err)
	}
	if st, err := sar("admintoken", "bob", []string{"system:authenticated"}, res("list", "pods", "default", "")); err != nil || st.GetAllowed() {
		t.Errorf("admin asks about bob listing pods: %v, %v; want not allowed", st, err)
	}
	if st, err := sar("admintoken", "carol", []string{"system:masters"}, res("delete", "nodes", "", "n1")); err != nil || !st.GetAllowed() {
		t.Errorf("admin asks about a system:masters member: %v, %v; want allowed", st, err)
	}
	if _, err := sar("admintoken", "", nil, res("get", "pods", "default", "")); apierrors.ReasonOf(err) != apierrors.ReasonInvalid {
		t.Errorf("no user or group: got %v, want Invalid", err)
	}
}
