// This file holds the gateway's test of pods/eviction and
// PodDisruptionBudgets over HTTP, with client-go and raw requests: the
// discovery entry kubectl drain looks for, and the Status bodies and HTTP
// codes kube-apiserver v1.33.13 answered for the same requests (recorded
// from it).
package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	policyv1beta1 "k8s.io/api/policy/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
)

func TestEvictionOverHTTP(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	gw, err := gateway.New(gateway.Config{Conn: env.Dial(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: apiservertest.AdminToken})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+apiservertest.AdminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, b)
		}
		return resp.StatusCode, m
	}

	// kubectl drain evicts only if /api/v1 lists pods/eviction as
	// policy/v1 Eviction.
	res, err := cs.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range res.APIResources {
		if r.Name == "pods/eviction" {
			found = r.Group == "policy" && r.Version == "v1" && r.Kind == "Eviction" && cmp.Equal(r.Verbs, metav1.Verbs{"create"})
		}
	}
	if !found {
		t.Errorf("/api/v1 lacks pods/eviction as policy/v1 Eviction: %v", res.APIResources)
	}

	pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "one"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	const evict = `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"p1"}}`
	for _, tc := range []struct {
		name, path, body string
		code             int
		want             map[string]any
	}{
		{name: "blocked", path: "/api/v1/namespaces/default/pods/p1/eviction", body: evict, code: 429, want: map[string]any{
			"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Failure",
			"message": "Cannot evict pod as it would violate the pod's disruption budget.", "reason": "TooManyRequests",
			"details": map[string]any{"causes": []any{map[string]any{"reason": "DisruptionBudget",
				"message": "The disruption budget one needs 1 healthy pods and has 1 currently"}}},
			"code": 429.0}},
		{name: "wrong version", path: "/api/v1/namespaces/default/pods/p1/eviction", body: `{"apiVersion":"v1","kind":"Eviction","metadata":{"name":"p1"}}`, code: 400, want: map[string]any{
			"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Failure",
			"message": `Eviction in version "v1" cannot be handled as a Eviction: no kind "Eviction" is registered for version "v1" in scheme "pkg/runtime/scheme.go:110"`,
			"reason":  "BadRequest", "code": 400.0}},
		{name: "wrong name", path: "/api/v1/namespaces/default/pods/p1/eviction", body: `{"apiVersion":"policy/v1beta1","kind":"Eviction","metadata":{"name":"p2"}}`, code: 400, want: map[string]any{
			"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Failure",
			"message": "name in URL does not match name in Eviction object", "reason": "BadRequest", "code": 400.0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, got := post(tc.path, tc.body)
			if code != tc.code {
				t.Errorf("code: got %d, want %d", code, tc.code)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("body (-kube-apiserver +kplane):\n%s", d)
			}
		})
	}

	// Two budgets: 500 without a reason, as kube-apiserver.
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "two"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, got := post("/api/v1/namespaces/default/pods/p1/eviction", evict)
	want := map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Failure",
		"message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.", "code": 500.0}
	if d := cmp.Diff(want, got); code != 500 || d != "" {
		t.Errorf("two budgets: got %d, body (-kube-apiserver +kplane):\n%s", code, d)
	}
	for _, name := range []string{"one", "two"} {
		if err := cs.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// No budget, dryRun: 201 Success, the pod stays.
	code, got = post("/api/v1/namespaces/default/pods/p1/eviction?dryRun=All", evict)
	want = map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Success", "code": 201.0}
	if d := cmp.Diff(want, got); code != 201 || d != "" {
		t.Errorf("dry run: got %d, body (-kube-apiserver +kplane):\n%s", code, d)
	}
	// client-go's policy/v1beta1 Eviction, which kube-apiserver 1.33 still
	// takes: the pod goes (grace period 0).
	zero := int64(0)
	if err := cs.PolicyV1beta1().Evictions("default").Evict(ctx, &policyv1beta1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "default"},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &zero}}); err != nil {
		t.Fatalf("policy/v1beta1 eviction: %v", err)
	}
	if _, err := cs.CoreV1().Pods("default").Get(ctx, "p1", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("pod after eviction: got %v, want not found", err)
	}
}
