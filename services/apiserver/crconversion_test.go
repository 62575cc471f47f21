// This file holds the API service's tests of CRD webhook conversion (a real
// HTTPS conversion webhook started by the test, converting between a stored v1 and a served v2
// that renames a field, on writes (validated by the version written), reads,
// lists and watches; a webhook
// that fails is an InternalError naming it, as on kube-apiserver) and of
// how a webhook's Service is resolved to an endpoint.
package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kubemetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// conversionWebhook serves ConversionReviews for gadgets: v1's
// spec.color is v2's spec.colour. failing makes it answer 500.
type conversionWebhook struct {
	calls   atomic.Int32
	failing atomic.Bool
}

func (h *conversionWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.calls.Add(1)
	if h.failing.Load() {
		http.Error(w, "the converter is down", http.StatusInternalServerError)
		return
	}
	var review kubeapiextv1.ConversionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	resp := &kubeapiextv1.ConversionResponse{UID: review.Request.UID, Result: kubemetav1.Status{Status: kubemetav1.StatusSuccess}}
	for _, raw := range review.Request.Objects {
		var u map[string]any
		if err := json.Unmarshal(raw.Raw, &u); err != nil {
			http.Error(w, "bad object", http.StatusBadRequest)
			return
		}
		spec, _ := u["spec"].(map[string]any)
		from, to := "color", "colour"
		if review.Request.DesiredAPIVersion == "example.com/v1" {
			from, to = "colour", "color"
		}
		if v, ok := spec[from]; ok && spec != nil {
			spec[to] = v
			delete(spec, from)
		}
		u["apiVersion"] = review.Request.DesiredAPIVersion
		b, _ := json.Marshal(u)
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: b})
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// serveTLSFor runs h over HTTPS on loopback with a certificate for
// dnsName (a name or an IP address); it returns the port and the CA bundle (the certificate, PEM).
func serveTLSFor(t *testing.T, h http.Handler, dnsName string) (int, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if ip := net.ParseIP(dnsName); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{dnsName}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	return p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestCustomResourceWebhookConversion(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dyn := dynamicv1.NewResourceServiceClient(e.conn)
	hook := &conversionWebhook{}
	port, ca := serveTLSFor(t, hook, "127.0.0.1")

	doc := strings.Replace(gadgetCRD, "  versions:\n  - name: v1\n", `  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        url: https://127.0.0.1:`+strconv.Itoa(port)+`/convert
        caBundle: `+base64.StdEncoding.EncodeToString(ca)+`
  versions:
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              colour: {type: string, maxLength: 5}
              size: {type: integer}
  - name: v1
`, 1)
	establishCRD(t, e, doc, gadgets("default", ""))
	waitServed(t, e, gadgetsAt("v2", "default", ""), true)
	if got, storage := servedVersions(t, dyn); !slices.Equal(got, []string{"v2", "v1"}) || storage != "v1" {
		t.Errorf("Discover: versions %v (storage %q), want v2 and v1, v1 stored", got, storage)
	}

	// A create at v2 is converted to v1 to be validated and stored.
	created, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgetsAt("v2", "default", ""),
		Object: []byte(`{"apiVersion":"example.com/v2","kind":"Gadget","metadata":{"name":"g1"},"spec":{"colour":"red"}}`)})
	if err != nil {
		t.Fatalf("create at v2: %v", err)
	}
	if o := decodeJSON(t, created.GetObject()); dig(o, "apiVersion") != "example.com/v2" || dig(o, "spec", "colour") != "red" {
		t.Errorf("create at v2 answered %s", created.GetObject())
	}
	got, err := dyn.Get(ctx, &dynamicv1.GetRequest{Target: gadgetsAt("v1", "default", "g1")})
	if err != nil {
		t.Fatal(err)
	}
	if o := decodeJSON(t, got.GetObject()); dig(o, "spec", "color") != "red" || dig(o, "spec", "colour") != nil || dig(o, "spec", "size") != float64(3) {
		t.Errorf("stored at v1 (defaulted there): got %s", got.GetObject())
	}
	// A write at v2 is validated by v2's schema, as on Kubernetes: v1's
	// enum does not apply, v2's maxLength does (on v2's field).
	if _, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgetsAt("v2", "default", ""),
		Object: []byte(`{"apiVersion":"example.com/v2","kind":"Gadget","metadata":{"name":"g2"},"spec":{"colour":"green"}}`)}); err != nil {
		t.Errorf("create at v2 of a colour v1's enum refuses: %v", err)
	}
	_, err = dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgetsAt("v2", "default", ""),
		Object: []byte(`{"apiVersion":"example.com/v2","kind":"Gadget","metadata":{"name":"g3"},"spec":{"colour":"purple"}}`)})
	if se := wantReason(t, err, apierrors.ReasonInvalid); len(se.Causes) != 1 || se.Causes[0].Field != "spec.colour" {
		t.Errorf("create at v2 of a colour too long for v2: got %+v, want one cause at spec.colour", se)
	}
	if _, err := dyn.Delete(ctx, &dynamicv1.DeleteRequest{Target: gadgetsAt("v1", "default", "g2")}); err != nil {
		t.Fatal(err)
	}

	list, err := dyn.List(ctx, &dynamicv1.ListRequest{Target: gadgetsAt("v2", "default", "")})
	if err != nil {
		t.Fatal(err)
	}
	if l := decodeJSON(t, list.GetList()); !strings.Contains(string(list.GetList()), `"colour":"red"`) || dig(l, "apiVersion") != "example.com/v2" {
		t.Errorf("list at v2: got %s", list.GetList())
	}
	w, err := dyn.Watch(ctx, &dynamicv1.WatchRequest{Target: gadgetsAt("v2", "default", ""), ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if o := decodeJSON(t, ev.GetObject()); ev.GetType() != "ADDED" || dig(o, "spec", "colour") != "red" {
		t.Errorf("watch at v2: got %s %s", ev.GetType(), ev.GetObject())
	}
	if hook.calls.Load() == 0 {
		t.Error("the conversion webhook was never called")
	}

	// A webhook that fails: reads at v2 are InternalErrors naming it;
	// the storage version is still read without it.
	hook.failing.Store(true)
	_, err = dyn.Get(ctx, &dynamicv1.GetRequest{Target: gadgetsAt("v2", "default", "g1")})
	if se := apierrors.FromError(err); se == nil || se.Reason != apierrors.ReasonInternalError || !strings.Contains(se.Message, "conversion webhook") {
		t.Errorf("get at v2 with the webhook failing: got %v, want an InternalError about the conversion webhook", err)
	}
	if _, err := dyn.Get(ctx, &dynamicv1.GetRequest{Target: gadgetsAt("v1", "default", "g1")}); err != nil {
		t.Errorf("get at the storage version with the webhook failing: %v", err)
	}
}

// TestResolveService: a webhook's Service resolves to a ready endpoint of
// its port from the Service's EndpointSlices (the port's name matched,
// not-ready endpoints skipped), with kube-apiserver's messages otherwise.
func TestResolveService(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	svcs := corev1.NewServiceServiceClient(e.conn)
	if _, err := svcs.CreateService(ctx, &corev1.CreateServiceRequest{Namespace: "default", Service: &corev1.Service{Metadata: om("default", "hook"),
		Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Name: "metrics", Port: 8080}, {Name: "https", Port: 443}}}}}); err != nil {
		t.Fatal(err)
	}
	yes, no := true, false
	https, metrics, p1, p2 := "https", "metrics", int32(8443), int32(9090)
	if _, err := discoveryv1.NewEndpointSliceServiceClient(e.conn).CreateEndpointSlice(ctx, &discoveryv1.CreateEndpointSliceRequest{Namespace: "default",
		EndpointSlice: &discoveryv1.EndpointSlice{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "hook-1", Labels: map[string]string{serviceNameLabel: "hook"}},
			AddressType: "IPv4",
			Endpoints: []*discoveryv1.Endpoint{
				{Addresses: []string{"10.1.0.7"}, Conditions: &discoveryv1.EndpointConditions{Ready: &no}},
				{Addresses: []string{"10.1.0.8"}, Conditions: &discoveryv1.EndpointConditions{Ready: &yes}},
			},
			Ports: []*discoveryv1.EndpointPort{{Name: &metrics, Port: &p2}, {Name: &https, Port: &p1}}}}); err != nil {
		t.Fatal(err)
	}
	// The resolver runs inside the API service (a request's context, or
	// none), not with a client's credentials.
	bg := context.Background()
	var addr string
	var err error
	for range 200 { // the watch cache catches up
		if addr, err = e.srv.ResolveService(bg, "default", "hook", 443); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || addr != "10.1.0.8:8443" {
		t.Errorf("resolve hook:443: got %q, %v; want the ready endpoint's https port 10.1.0.8:8443", addr, err)
	}
	for _, tc := range []struct {
		name string
		port int32
		want string
	}{
		{"missing", 443, `service "default/missing" not found`},
		{"hook", 80, `no service port 80 found for service "hook"`},
	} {
		if _, err := e.srv.ResolveService(bg, "default", tc.name, tc.port); err == nil || err.Error() != tc.want {
			t.Errorf("resolve %s:%d: got %v, want %q", tc.name, tc.port, err, tc.want)
		}
	}
	if _, err := svcs.CreateService(ctx, &corev1.CreateServiceRequest{Namespace: "default", Service: &corev1.Service{Metadata: om("default", "lonely"),
		Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 443}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.ResolveService(bg, "default", "lonely", 443); err == nil || err.Error() != `no endpoints available for service "lonely"` {
		t.Errorf("resolve lonely:443: got %v", err)
	}
}
