// This file holds the end-to-end security and webhook tests: authentication,
// RBAC, the Node authorizer, NodeRestriction and the audit log, then
// mutating and validating webhooks, through a real API service.

package apiservertest

import (
	"bufio"
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
	"os"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1k "k8s.io/apimachinery/pkg/apis/meta/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	arv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func cm(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "v"}}
}

// TestSecurityEndToEnd drives authentication, authorization (RBAC fed by
// the apiserver's watch, the Node authorizer, NodeRestriction) and the audit
// log through a real API service on a real store.
func TestSecurityEndToEnd(t *testing.T) {
	env := Start(t, Options{})
	admin := corev1.NewConfigMapServiceClient(env.Dial(t, AdminToken))
	bob := corev1.NewConfigMapServiceClient(env.Dial(t, BobToken))
	anon := corev1.NewConfigMapServiceClient(env.Dial(t, ""))
	bad := corev1.NewConfigMapServiceClient(env.Dial(t, "no-such-token"))

	t.Run("no or unknown credentials are Unauthorized", func(t *testing.T) {
		for name, c := range map[string]corev1.ConfigMapServiceClient{"none": anon, "unknown token": bad} {
			_, err := c.ListConfigMaps(ctxT(t), &corev1.ListConfigMapsRequest{Namespace: "default"})
			if !apierrors.IsUnauthorized(err) {
				t.Errorf("%s: got %v, want Unauthorized", name, err)
			}
		}
	})

	var bobAuditID string
	t.Run("a user without bindings is Forbidden, worded as Kubernetes does", func(t *testing.T) {
		var hdr metadata.MD
		_, err := bob.ListConfigMaps(ctxT(t), &corev1.ListConfigMapsRequest{Namespace: "default"}, grpc.Header(&hdr))
		want := `configmaps is forbidden: User "bob" cannot list resource "configmaps" in API group "" in the namespace "default"`
		if !apierrors.IsForbidden(err) || apierrors.FromError(err).Message != want {
			t.Fatalf("got %v, want Forbidden %q", err, want)
		}
		if ids := hdr.Get("audit-id"); len(ids) == 1 {
			bobAuditID = ids[0]
		} else {
			t.Errorf("got audit-id header %v, want one ID", ids)
		}
	})

	t.Run("system:masters may create", func(t *testing.T) {
		if _, err := admin.CreateConfigMap(ctxT(t), &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("default", "settings")}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("RBAC follows roles and bindings created through the API", func(t *testing.T) {
		conn := env.Dial(t, AdminToken)
		if _, err := rbacv1.NewRoleServiceClient(conn).CreateRole(ctxT(t), &rbacv1.CreateRoleRequest{Namespace: "default", Role: &rbacv1.Role{
			Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "cm-reader"},
			Rules:    []*rbacv1.PolicyRule{{Verbs: []string{"get", "list"}, ApiGroups: []string{""}, Resources: []string{"configmaps"}}},
		}}); err != nil {
			t.Fatal(err)
		}
		if _, err := rbacv1.NewRoleBindingServiceClient(conn).CreateRoleBinding(ctxT(t), &rbacv1.CreateRoleBindingRequest{Namespace: "default", RoleBinding: &rbacv1.RoleBinding{
			Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "bob-reads"},
			Subjects: []*rbacv1.Subject{{Kind: "User", Name: "bob", ApiGroup: "rbac.authorization.k8s.io"}},
			RoleRef:  &rbacv1.RoleRef{Kind: "Role", Name: "cm-reader", ApiGroup: "rbac.authorization.k8s.io"},
		}}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "bob's new binding to take effect", func() bool {
			_, err := bob.ListConfigMaps(ctxT(t), &corev1.ListConfigMapsRequest{Namespace: "default"})
			return err == nil
		})
		if _, err := bob.CreateConfigMap(ctxT(t), &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("default", "x")}); !apierrors.IsForbidden(err) {
			t.Errorf("bob create: got %v, want Forbidden (only get/list granted)", err)
		}
	})

	t.Run("a node may touch only its own Node and Lease", func(t *testing.T) {
		n1 := env.Dial(t, Node1Token)
		nodes := corev1.NewNodeServiceClient(n1)
		if _, err := nodes.CreateNode(ctxT(t), &corev1.CreateNodeRequest{Node: &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "n1"}}}); err != nil {
			t.Fatalf("n1 creates its Node: %v", err)
		}
		_, err := nodes.CreateNode(ctxT(t), &corev1.CreateNodeRequest{Node: &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "n2"}}})
		if !apierrors.IsForbidden(err) {
			t.Errorf("n1 creates Node n2: got %v, want Forbidden", err)
		}
		leases := coordv1.NewLeaseServiceClient(n1)
		own := &coordv1.Lease{Metadata: &metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "n1"}, Spec: &coordv1.LeaseSpec{HolderIdentity: proto.String("n1")}}
		if _, err := leases.CreateLease(ctxT(t), &coordv1.CreateLeaseRequest{Namespace: "kube-node-lease", Lease: own}); err != nil {
			t.Errorf("n1 creates its Lease: %v", err)
		}
		other := &coordv1.Lease{Metadata: &metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "n2"}, Spec: &coordv1.LeaseSpec{HolderIdentity: proto.String("n2")}}
		if _, err := leases.CreateLease(ctxT(t), &coordv1.CreateLeaseRequest{Namespace: "kube-node-lease", Lease: other}); !apierrors.IsForbidden(err) {
			t.Errorf("n1 creates n2's Lease: got %v, want Forbidden", err)
		}
		// Pod status: only for pods bound to the node.
		pods := corev1.NewPodServiceClient(env.Dial(t, AdminToken))
		pod := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1.27"}}}}
		if _, err := pods.CreatePod(ctxT(t), &corev1.CreatePodRequest{Namespace: "default", Pod: pod}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.BindPod(ctxT(t), &corev1.BindPodRequest{Namespace: "default", Name: "web", Binding: &corev1.Binding{
			Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "web"}, Target: &corev1.ObjectReference{Kind: "Node", Name: "n2"}}}); err != nil {
			t.Fatal(err)
		}
		got, err := pods.GetPod(ctxT(t), &corev1.GetPodRequest{Namespace: "default", Name: "web"})
		if err != nil {
			t.Fatal(err)
		}
		st := proto.Clone(got.Pod).(*corev1.Pod)
		st.Status = &corev1.PodStatus{Phase: "Running"}
		_, err = corev1.NewPodServiceClient(n1).UpdatePodStatus(ctxT(t), &corev1.UpdatePodStatusRequest{Namespace: "default", Name: "web", Pod: st})
		if !apierrors.IsForbidden(err) {
			t.Errorf("n1 writes the status of a pod bound to n2: got %v, want Forbidden", err)
		}
		if _, err := corev1.NewPodServiceClient(env.Dial(t, Node2Token)).UpdatePodStatus(ctxT(t), &corev1.UpdatePodStatusRequest{Namespace: "default", Name: "web", Pod: st}); err != nil {
			t.Errorf("n2 writes the status of its own pod: %v", err)
		}
	})

	t.Run("every request that reached authentication is audited", func(t *testing.T) {
		f, err := os.Open(env.AuditPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		type line struct {
			AuditID string `json:"auditID"`
			Verb    string `json:"verb"`
			User    struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"user"`
			ObjectRef struct {
				Resource, Namespace, Name string
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			StageTimings []struct {
				Name string `json:"name"`
			} `json:"stageTimings"`
		}
		var bobDenied, adminCreated, unauthorized bool
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("audit line %q: %v", sc.Text(), err)
			}
			switch {
			case l.AuditID == bobAuditID && l.User.Username == "bob" && l.Verb == "list" && l.ResponseStatus.Code == 403:
				bobDenied = true
			case l.User.Username == "admin" && l.Verb == "create" && l.ObjectRef.Name == "settings" && l.ResponseStatus.Code == 201:
				adminCreated = len(l.StageTimings) >= 2
			case l.ResponseStatus.Code == 401:
				unauthorized = true
			}
		}
		if !bobDenied || !adminCreated || !unauthorized {
			t.Errorf("audit log: bob's 403 with the returned audit-id %v, admin's 201 create with stage timings %v, a 401 %v; want all", bobDenied, adminCreated, unauthorized)
		}
	})
}

// hookServer is a real HTTPS admission webhook: /deny refuses configmaps
// named "bad"; /label adds the label mutated=yes.
func startHookServer(t *testing.T) (url string, caPEM []byte) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hook-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "hook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		switch r.URL.Path {
		case "/deny":
			if review.Request.Name == "bad" {
				resp.Allowed = false
				resp.Result = &metav1k.Status{Message: "configmaps named bad are not allowed"}
			}
		case "/label":
			jp := admissionv1.PatchTypeJSONPatch
			resp.PatchType = &jp
			resp.Patch = []byte(`[{"op":"add","path":"/metadata/labels","value":{"mutated":"yes"}}]`)
		}
		_ = json.NewEncoder(w).Encode(&admissionv1.AdmissionReview{
			TypeMeta: metav1k.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Response: resp})
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

// TestWebhooksEndToEnd registers webhooks through the API and checks that a
// mutating webhook's patch is stored and a validating webhook's denial
// reaches the gRPC caller with its message.
func TestWebhooksEndToEnd(t *testing.T) {
	env := Start(t, Options{})
	url, ca := startHookServer(t)
	conn := env.Dial(t, AdminToken)
	rules := []*arv1.RuleWithOperations{{Operations: []string{"CREATE"}, Rule: &arv1.Rule{ApiGroups: []string{""}, ApiVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}
	if _, err := arv1.NewMutatingWebhookConfigurationServiceClient(conn).CreateMutatingWebhookConfiguration(ctxT(t),
		&arv1.CreateMutatingWebhookConfigurationRequest{MutatingWebhookConfiguration: &arv1.MutatingWebhookConfiguration{
			Metadata: &metav1.ObjectMeta{Name: "labeler"},
			Webhooks: []*arv1.MutatingWebhook{{Name: "label.example.com", Rules: rules, SideEffects: proto.String("None"),
				AdmissionReviewVersions: []string{"v1"},
				ClientConfig:            &arv1.WebhookClientConfig{Url: proto.String(url + "/label"), CaBundle: ca}}},
		}}); err != nil {
		t.Fatal(err)
	}
	if _, err := arv1.NewValidatingWebhookConfigurationServiceClient(conn).CreateValidatingWebhookConfiguration(ctxT(t),
		&arv1.CreateValidatingWebhookConfigurationRequest{ValidatingWebhookConfiguration: &arv1.ValidatingWebhookConfiguration{
			Metadata: &metav1.ObjectMeta{Name: "policy"},
			Webhooks: []*arv1.ValidatingWebhook{{Name: "deny.example.com", Rules: rules, SideEffects: proto.String("None"),
				AdmissionReviewVersions: []string{"v1"},
				ClientConfig:            &arv1.WebhookClientConfig{Url: proto.String(url + "/deny"), CaBundle: ca}}},
		}}); err != nil {
		t.Fatal(err)
	}
	cms := corev1.NewConfigMapServiceClient(conn)
	want := `admission webhook "deny.example.com" denied the request: configmaps named bad are not allowed`
	// The dispatcher learns of each configuration from its own watch, so wait
	// (with dry runs) until both the validating and the mutating one act.
	testutil.Eventually(t, "both webhooks to take effect", func() bool {
		_, err := cms.CreateConfigMap(ctxT(t), &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("default", "bad"), DryRun: []string{"All"}})
		if err == nil || apierrors.FromError(err).Message != want {
			return false
		}
		got, err := cms.CreateConfigMap(ctxT(t), &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("default", "good"), DryRun: []string{"All"}})
		return err == nil && got.GetConfigMap().GetMetadata().GetLabels()["mutated"] == "yes"
	})
	_, err := cms.CreateConfigMap(ctxT(t), &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("default", "bad")})
	if se := apierrors.FromError(err); se == nil || se.Message != want || se.Reason != apierrors.ReasonForbidden {
		t.Fatalf("got %v, want Forbidden %q", err, want)
	}
	got, err := cms.CreateConfigMap(ctxT(t), &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("default", "good")})
	if err != nil {
		t.Fatal(err)
	}
	if l := got.GetConfigMap().GetMetadata().GetLabels()["mutated"]; l != "yes" {
		t.Errorf("stored labels %v, want mutated=yes from the mutating webhook", got.GetConfigMap().GetMetadata().GetLabels())
	}
}
