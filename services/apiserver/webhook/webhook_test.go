// This file holds the tests of admission webhooks: mutating patches in
// order, denials, failure policy, service references and CA bundles,
// matching, dry run, reinvocation, and their spans.

package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	k8sarv1 "k8s.io/api/admissionregistration/v1"
	metav1k "k8s.io/apimachinery/pkg/apis/meta/v1"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	arv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// hookServer is a real HTTPS admission webhook server on loopback, with a
// certificate for 127.0.0.1 and hook.webhooks.svc from its own CA.
type hookServer struct {
	srv      *httptest.Server
	caPEM    []byte
	mu       sync.Mutex
	requests map[string][]*admissionv1.AdmissionRequest // by path
	release  chan struct{}                              // closed at cleanup: frees slow handlers
}

func newHookServer(t testing.TB) *hookServer {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hook-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "hook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"hook.webhooks.svc"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	h := &hookServer{
		caPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		requests: map[string][]*admissionv1.AdmissionRequest{},
		release:  make(chan struct{}),
	}
	h.srv = httptest.NewUnstartedServer(http.HandlerFunc(h.serve))
	h.srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	h.srv.StartTLS()
	t.Cleanup(func() {
		close(h.release)
		h.srv.Close()
	})
	return h
}

func (h *hookServer) url(path string) string { return h.srv.URL + path }

func (h *hookServer) seen(path string) []*admissionv1.AdmissionRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests[path]
}

// serve answers by path:
//
//	/annotate-first   adds metadata.annotations {"first": "1"}
//	/annotate-second  adds metadata.annotations.second = "2" (fails unless /annotate-first ran before)
//	/allow            allows
//	/deny             denies with a message
//	/slow             answers only after the request is abandoned
//	/broken           answers HTTP 500
func (h *hookServer) serve(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.requests[r.URL.Path] = append(h.requests[r.URL.Path], review.Request)
	h.mu.Unlock()
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	jp := admissionv1.PatchTypeJSONPatch
	switch r.URL.Path {
	case "/annotate-first":
		resp.Patch = []byte(`[{"op":"add","path":"/metadata/annotations","value":{"first":"1"}}]`)
		resp.PatchType = &jp
	case "/annotate-second":
		resp.Patch = []byte(`[{"op":"add","path":"/metadata/annotations/second","value":"2"},{"op":"replace","path":"/spec/containers/0/image","value":"nginx:1.27"}]`)
		resp.PatchType = &jp
	case "/see-b":
		var obj struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(review.Request.Object.Raw, &obj)
		saw := "no"
		if _, ok := obj.Metadata.Annotations["b"]; ok {
			saw = "yes"
		}
		resp.Patch = []byte(`[{"op":"add","path":"/metadata/annotations/a-saw-b","value":"` + saw + `"}]`)
		resp.PatchType = &jp
	case "/add-b":
		resp.Patch = []byte(`[{"op":"add","path":"/metadata/annotations/b","value":"1"}]`)
		resp.PatchType = &jp
	case "/deny":
		resp.Allowed = false
		resp.Result = &metav1k.Status{Message: "pods may not be named forbidden", Code: 403}
	case "/slow":
		select {
		case <-r.Context().Done():
		case <-h.release:
		case <-time.After(20 * time.Second):
		}
		// Never answer: drop the connection, so no response can race the
		// caller's timeout.
		panic(http.ErrAbortHandler)
	case "/broken":
		http.Error(w, "boom", http.StatusInternalServerError)
		return
	}
	_ = json.NewEncoder(w).Encode(&admissionv1.AdmissionReview{
		TypeMeta: metav1k.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: resp,
	})
}

func ptr[T any](v T) *T { return &v }

func podRule() []*arv1.RuleWithOperations {
	return []*arv1.RuleWithOperations{{Operations: []string{"CREATE", "UPDATE"}, Rule: &arv1.Rule{ApiGroups: []string{""}, ApiVersions: []string{"v1"}, Resources: []string{"pods"}}}}
}

func mutatingConfig(name string, hooks ...*arv1.MutatingWebhook) *arv1.MutatingWebhookConfiguration {
	return &arv1.MutatingWebhookConfiguration{Metadata: &metav1.ObjectMeta{Name: name}, Webhooks: hooks}
}

func validatingConfig(name string, hooks ...*arv1.ValidatingWebhook) *arv1.ValidatingWebhookConfiguration {
	return &arv1.ValidatingWebhookConfiguration{Metadata: &metav1.ObjectMeta{Name: name}, Webhooks: hooks}
}

func newPod() *corev1.Pod {
	return &corev1.Pod{
		Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "web", Labels: map[string]string{"app": "web"}},
		Spec:     &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}},
	}
}

func createPod(pod *corev1.Pod) *request.Admission {
	return &request.Admission{
		Attributes: request.Attributes{
			User: request.User{Name: "bob", UID: "7", Groups: []string{"dev", request.AuthenticatedGroup}},
			Verb: "create", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: pod.GetMetadata().GetName(),
		},
		Operation: request.Create,
		Object:    pod,
	}
}

func TestMutatingPatchesAppliedInOrder(t *testing.T) {
	hs := newHookServer(t)
	w := New(Config{})
	// Configurations run in name order: "a-..." before "b-...", whatever the
	// order they arrive in.
	w.Upsert(mutatingConfig("b-second", &arv1.MutatingWebhook{Name: "second.example.com", Rules: podRule(),
		ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url("/annotate-second")), CaBundle: hs.caPEM}, SideEffects: ptr("None")}))
	w.Upsert(mutatingConfig("a-first", &arv1.MutatingWebhook{Name: "first.example.com", Rules: podRule(),
		ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url("/annotate-first")), CaBundle: hs.caPEM}, SideEffects: ptr("None")}))

	pod := newPod()
	a := createPod(pod)
	if err := w.Admit(context.Background(), a); err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if got, want := pod.GetMetadata().GetAnnotations(), map[string]string{"first": "1", "second": "2"}; !equalMaps(got, want) {
		t.Errorf("got annotations %v, want %v", got, want)
	}
	if got := pod.GetSpec().GetContainers()[0].GetImage(); got != "nginx:1.27" {
		t.Errorf("got image %q, want nginx:1.27", got)
	}
	if got := pod.GetMetadata().GetLabels()["app"]; got != "web" {
		t.Errorf("got label app=%q after patching, want web (untouched fields kept)", got)
	}
	// The second webhook saw the first one's patch, and a proper request.
	reqs := hs.seen("/annotate-second")
	if len(reqs) != 1 {
		t.Fatalf("second webhook got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	var seen map[string]any
	if err := json.Unmarshal(r.Object.Raw, &seen); err != nil {
		t.Fatal(err)
	}
	if ann, _ := seen["metadata"].(map[string]any)["annotations"].(map[string]any); ann["first"] != "1" {
		t.Errorf("second webhook saw annotations %v, want first=1", ann)
	}
	if seen["apiVersion"] != "v1" || seen["kind"] != "Pod" {
		t.Errorf("object sent with apiVersion/kind %v/%v, want v1/Pod", seen["apiVersion"], seen["kind"])
	}
	if r.Kind.Kind != "Pod" || r.Kind.Version != "v1" || r.Resource.Resource != "pods" || r.Operation != admissionv1.Create ||
		r.Namespace != "default" || r.Name != "web" || r.UserInfo.Username != "bob" || r.UID == "" || r.DryRun == nil || *r.DryRun {
		t.Errorf("unexpected AdmissionRequest: %+v", r)
	}
}

func TestValidatingDenialReachesCallerWithMessage(t *testing.T) {
	hs := newHookServer(t)
	w := New(Config{})
	w.Upsert(validatingConfig("policy",
		&arv1.ValidatingWebhook{Name: "allow.example.com", Rules: podRule(),
			ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url("/allow")), CaBundle: hs.caPEM}},
		&arv1.ValidatingWebhook{Name: "deny.example.com", Rules: podRule(),
			ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url("/deny")), CaBundle: hs.caPEM}},
	))
	err := w.Validate(context.Background(), createPod(newPod()))
	want := `admission webhook "deny.example.com" denied the request: pods may not be named forbidden`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	// As a gRPC client receives it.
	se := apierrors.FromError(status.Convert(apierrors.FromError(err).GRPCStatus().Err()).Err())
	if se.Reason != apierrors.ReasonForbidden || se.Message != want || se.Code != 403 {
		t.Errorf("over gRPC: got %+v, want Forbidden 403 %q", se, want)
	}
	if n := len(hs.seen("/allow")); n != 1 {
		t.Errorf("allowing webhook got %d requests, want 1", n)
	}
}

func TestFailurePolicy(t *testing.T) {
	hs := newHookServer(t)
	tests := []struct {
		name    string
		path    string
		policy  *string
		wantErr string // substring; "" means admitted
	}{
		{name: "timeout, Ignore", path: "/slow", policy: ptr("Ignore")},
		{name: "timeout, Fail", path: "/slow", policy: ptr("Fail"), wantErr: `Internal error occurred: failed calling webhook "hook.example.com": failed to call webhook: `},
		{name: "timeout, default is Fail", path: "/slow", wantErr: `failed calling webhook "hook.example.com"`},
		{name: "HTTP 500, Ignore", path: "/broken", policy: ptr("Ignore")},
		{name: "HTTP 500, Fail", path: "/broken", policy: ptr("Fail"), wantErr: `failed calling webhook "hook.example.com": webhook answered HTTP 500`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := New(Config{})
			w.Upsert(validatingConfig("cfg", &arv1.ValidatingWebhook{Name: "hook.example.com", Rules: podRule(), FailurePolicy: tt.policy,
				TimeoutSeconds: ptr[int32](1), ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url(tt.path)), CaBundle: hs.caPEM}}))
			err := w.Validate(context.Background(), createPod(newPod()))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v, want admitted", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "Internal error occurred: ") || apierrors.ReasonOf(err) != apierrors.ReasonInternalError {
				t.Errorf("got %v (reason %q), want an InternalError", err, apierrors.ReasonOf(err))
			}
		})
	}
}

func TestServiceReferenceAndCABundle(t *testing.T) {
	hs := newHookServer(t)
	addr := strings.TrimPrefix(hs.srv.URL, "https://")
	var resolved []string
	var mu sync.Mutex
	w := New(Config{ResolveService: func(_ context.Context, ns, name string, port int32) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		resolved = append(resolved, ns+"/"+name)
		return addr, nil
	}})
	w.Upsert(validatingConfig("svc", &arv1.ValidatingWebhook{Name: "svc.example.com", Rules: podRule(),
		ClientConfig: &arv1.WebhookClientConfig{
			Service:  &arv1.ServiceReference{Namespace: "webhooks", Name: "hook", Path: ptr("/deny"), Port: ptr[int32](8443)},
			CaBundle: hs.caPEM}}))
	err := w.Validate(context.Background(), createPod(newPod()))
	if err == nil || !strings.HasPrefix(err.Error(), `admission webhook "svc.example.com" denied the request`) {
		t.Fatalf("got %v, want the service-backed webhook's denial", err)
	}
	if len(resolved) != 1 || resolved[0] != "webhooks/hook" {
		t.Errorf("resolver saw %v, want [webhooks/hook]", resolved)
	}

	// A caBundle that does not hold the server's CA: the handshake fails.
	other := newHookServer(t)
	w.Upsert(validatingConfig("svc", &arv1.ValidatingWebhook{Name: "svc.example.com", Rules: podRule(),
		ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url("/allow")), CaBundle: other.caPEM}}))
	err = w.Validate(context.Background(), createPod(newPod()))
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("got %v, want a certificate verification failure", err)
	}
}

func TestMatching(t *testing.T) {
	nsLabels := map[string]map[string]string{"prod": {"env": "prod"}, "dev": {"env": "dev"}}
	w := New(Config{NamespaceLabels: func(_ context.Context, ns string) (map[string]string, error) { return nsLabels[ns], nil }})
	podIn := func(ns string, lbl map[string]string) *corev1.Pod {
		return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: lbl}}
	}
	adm := func(op request.Operation, group, version, resource, sub, ns string, obj proto.Message) *request.Admission {
		return &request.Admission{Attributes: request.Attributes{APIGroup: group, APIVersion: version, Resource: resource, Subresource: sub, Namespace: ns},
			Operation: op, Object: obj}
	}
	rule := func(ops, res []string, scope *string) []*arv1.RuleWithOperations {
		return []*arv1.RuleWithOperations{{Operations: ops, Rule: &arv1.Rule{ApiGroups: []string{"", "apps"}, ApiVersions: []string{"v1"}, Resources: res, Scope: scope}}}
	}
	tests := []struct {
		name string
		hook *arv1.ValidatingWebhook
		a    *request.Admission
		want bool
	}{
		{name: "operation and resource", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"CREATE"}, []string{"pods"}, nil)},
			a: adm(request.Create, "", "v1", "pods", "", "dev", podIn("dev", nil)), want: true},
		{name: "other operation", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"CREATE"}, []string{"pods"}, nil)},
			a: adm(request.Delete, "", "v1", "pods", "", "dev", nil)},
		{name: "operation *", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"pods"}, nil)},
			a: adm(request.Delete, "", "v1", "pods", "", "dev", nil), want: true},
		{name: "pods does not match pods/status", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"pods"}, nil)},
			a: adm(request.Update, "", "v1", "pods", "status", "dev", podIn("dev", nil))},
		{name: "pods/status", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"pods/status"}, nil)},
			a: adm(request.Update, "", "v1", "pods", "status", "dev", podIn("dev", nil)), want: true},
		{name: "*/scale", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"*/scale"}, nil)},
			a: adm(request.Update, "apps", "v1", "deployments", "scale", "dev", nil), want: true},
		{name: "* does not match subresources", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"*"}, nil)},
			a: adm(request.Update, "apps", "v1", "deployments", "scale", "dev", nil)},
		{name: "*/* matches subresources", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"*/*"}, nil)},
			a: adm(request.Update, "apps", "v1", "deployments", "scale", "dev", nil), want: true},
		{name: "other group", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"*"}, nil)},
			a: adm(request.Create, "rbac.authorization.k8s.io", "v1", "roles", "", "dev", nil)},
		{name: "other version", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"*"}, nil)},
			a: adm(request.Create, "apps", "v1beta1", "deployments", "", "dev", nil)},
		{name: "Namespaced scope on a cluster object", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"nodes"}, ptr("Namespaced"))},
			a: adm(request.Create, "", "v1", "nodes", "", "", nil)},
		{name: "Cluster scope on a cluster object", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"nodes"}, ptr("Cluster"))},
			a: adm(request.Create, "", "v1", "nodes", "", "", nil), want: true},
		{name: "namespaceSelector matches", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"pods"}, nil),
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
			a: adm(request.Create, "", "v1", "pods", "", "prod", podIn("prod", nil)), want: true},
		{name: "namespaceSelector does not match", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"pods"}, nil),
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
			a: adm(request.Create, "", "v1", "pods", "", "dev", podIn("dev", nil))},
		{name: "namespaceSelector with expressions", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"pods"}, nil),
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []*metav1.LabelSelectorRequirement{{Key: "env", Operator: "NotIn", Values: []string{"prod"}}}}},
			a: adm(request.Create, "", "v1", "pods", "", "dev", podIn("dev", nil)), want: true},
		{name: "objectSelector matches", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"pods"}, nil),
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			a: adm(request.Create, "", "v1", "pods", "", "dev", podIn("dev", map[string]string{"app": "web"})), want: true},
		{name: "objectSelector does not match", hook: &arv1.ValidatingWebhook{Rules: rule([]string{"*"}, []string{"pods"}, nil),
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			a: adm(request.Create, "", "v1", "pods", "", "dev", podIn("dev", map[string]string{"app": "db"}))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.hook.Name = "h"
			k, err := toK8s(validatingConfig("c", tt.hook))
			if err != nil {
				t.Fatal(err)
			}
			w.mu.Lock()
			w.validating = map[string]*k8sValidating{"c": k.(*k8sValidating)}
			w.mu.Unlock()
			hooks := w.snapshot(false)
			got, err := w.matches(context.Background(), &hooks[0], tt.a)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got match=%v, want %v", got, tt.want)
			}
		})
	}
}

func TestDryRunNeedsSideEffectFreeWebhooks(t *testing.T) {
	hs := newHookServer(t)
	w := New(Config{})
	w.Upsert(validatingConfig("cfg", &arv1.ValidatingWebhook{Name: "effects.example.com", Rules: podRule(), SideEffects: ptr("Some"),
		ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url("/allow")), CaBundle: hs.caPEM}}))
	a := createPod(newPod())
	a.DryRun = true
	err := w.Validate(context.Background(), a)
	if err == nil || !strings.Contains(err.Error(), "does not support dry run") {
		t.Errorf("got %v, want a refusal of the dry run", err)
	}
	if n := len(hs.seen("/allow")); n != 0 {
		t.Errorf("webhook with side effects was called %d times during a dry run, want 0", n)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

type k8sValidating = k8sarv1.ValidatingWebhookConfiguration

func TestNamespaceLabelsFromSink(t *testing.T) {
	w := New(Config{})
	w.Upsert(&corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"env": "prod"}}})
	k, err := toK8s(validatingConfig("c", &arv1.ValidatingWebhook{Name: "h",
		Rules:             []*arv1.RuleWithOperations{{Operations: []string{"*"}, Rule: &arv1.Rule{ApiGroups: []string{""}, ApiVersions: []string{"v1"}, Resources: []string{"pods"}}}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}))
	if err != nil {
		t.Fatal(err)
	}
	w.validating = map[string]*k8sValidating{"c": k.(*k8sValidating)}
	hooks := w.snapshot(false)
	pod := &request.Admission{Attributes: request.Attributes{APIVersion: "v1", Resource: "pods", Namespace: "prod"}, Operation: request.Create, Object: newPod()}
	tests := []struct {
		name string
		prep func()
		want bool
	}{
		{name: "labels from the fed Namespace", prep: func() {}, want: true},
		{name: "namespace deleted", prep: func() { w.Delete(&corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "prod"}}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.prep()
			got, err := w.matches(context.Background(), &hooks[0], pod)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got match=%v, want %v", got, tt.want)
			}
		})
	}
}

func TestSpansShowSlowAndFailingWebhooks(t *testing.T) {
	hs := newHookServer(t)
	rec := tracetest.NewSpanRecorder()
	w := New(Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	w.Upsert(validatingConfig("cfg",
		&arv1.ValidatingWebhook{Name: "broken.example.com", Rules: podRule(), FailurePolicy: ptr("Ignore"),
			ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url("/broken")), CaBundle: hs.caPEM}},
		&arv1.ValidatingWebhook{Name: "deny.example.com", Rules: podRule(),
			ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url("/deny")), CaBundle: hs.caPEM}},
	))
	if err := w.Validate(context.Background(), createPod(newPod())); err == nil {
		t.Fatal("got admitted, want the denial")
	}
	outcomes := map[string]string{}
	errorsRecorded := map[string]bool{}
	for _, s := range rec.Ended() {
		if s.Name() != "admission.webhook" {
			continue
		}
		var name, outcome string
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "webhook.name":
				name = kv.Value.AsString()
			case "webhook.outcome":
				outcome = kv.Value.AsString()
			}
		}
		outcomes[name] = outcome
		for _, ev := range s.Events() {
			errorsRecorded[name] = errorsRecorded[name] || ev.Name == "exception"
		}
	}
	tests := []struct {
		name, hook, wantOutcome string
		wantErrorEvent          bool
	}{
		{name: "failing webhook under Ignore", hook: "broken.example.com", wantOutcome: "failed-ignored", wantErrorEvent: true},
		{name: "denying webhook", hook: "deny.example.com", wantOutcome: "denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := outcomes[tt.hook]; got != tt.wantOutcome {
				t.Errorf("got outcome %q, want %q (spans: %v)", got, tt.wantOutcome, outcomes)
			}
			if errorsRecorded[tt.hook] != tt.wantErrorEvent {
				t.Errorf("got error event %v, want %v", errorsRecorded[tt.hook], tt.wantErrorEvent)
			}
		})
	}
}

// BenchmarkValidate measures one validating webhook call over HTTPS on
// loopback (connection reused), end to end: match, encode, POST, decode.
func BenchmarkValidate(b *testing.B) {
	hs := newHookServer(b)
	w := New(Config{})
	w.Upsert(validatingConfig("cfg", &arv1.ValidatingWebhook{Name: "allow.example.com", Rules: podRule(),
		ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url("/allow")), CaBundle: hs.caPEM}}))
	a := createPod(newPod())
	for b.Loop() {
		if err := w.Validate(context.Background(), a); err != nil {
			b.Fatal(err)
		}
	}
}

func TestReinvocationPolicy(t *testing.T) {
	hs := newHookServer(t)
	tests := []struct {
		name      string
		policy    *string
		wantSawB  string
		wantCalls int
	}{
		{name: "Never (default): runs once, before b is added", wantSawB: "no", wantCalls: 1},
		{name: "IfNeeded: called again after a later webhook changed the object", policy: ptr("IfNeeded"), wantSawB: "yes", wantCalls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(hs.seen("/see-b"))
			w := New(Config{})
			w.Upsert(mutatingConfig("a", &arv1.MutatingWebhook{Name: "see-b.example.com", Rules: podRule(), ReinvocationPolicy: tt.policy,
				ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url("/see-b")), CaBundle: hs.caPEM}}))
			w.Upsert(mutatingConfig("b", &arv1.MutatingWebhook{Name: "add-b.example.com", Rules: podRule(),
				ClientConfig: &arv1.WebhookClientConfig{Url: ptr(hs.url("/add-b")), CaBundle: hs.caPEM}}))
			pod := newPod()
			pod.Metadata.Annotations = map[string]string{"init": "1"}
			if err := w.Admit(context.Background(), createPod(pod)); err != nil {
				t.Fatal(err)
			}
			if got := pod.GetMetadata().GetAnnotations()["a-saw-b"]; got != tt.wantSawB {
				t.Errorf("got a-saw-b=%q, want %q", got, tt.wantSawB)
			}
			if got := len(hs.seen("/see-b")) - before; got != tt.wantCalls {
				t.Errorf("see-b called %d times, want %d", got, tt.wantCalls)
			}
		})
	}
}
