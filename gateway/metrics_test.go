// This file holds the test of /metrics on the API endpoint: served to the
// callers RBAC lets get the path, as kube-apiserver serves its metrics.

package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kplane/kplane/gateway"
)

// TestMetricsEndpoint: GET /metrics answers the gateway's Prometheus
// registry to an admin and to a member of system:monitoring (Kubernetes'
// bootstrap system:monitoring role), 403 to an authenticated user without
// that right, 401 without credentials, and 405 to other verbs.
func TestMetricsEndpoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "kplane_metrics_test_total", Help: "A counter the test looks for."})
	reg.MustRegister(c)
	c.Add(3)
	srv, _, client := startImpersonatingWith(t, gateway.Config{Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}, nil)
	do := func(method, token string) (int, string) {
		req, err := http.NewRequest(method, srv.URL+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, token := range []string{"admin-token", "prom-token"} {
		code, body := do(http.MethodGet, token)
		if code != http.StatusOK || !strings.Contains(body, "kplane_metrics_test_total 3") {
			t.Errorf("GET /metrics with %s: got %d %.300s, want 200 with the registry's counter", token, code, body)
		}
	}
	if code, body := do(http.MethodGet, "bob-token"); code != http.StatusForbidden ||
		!strings.Contains(body, `forbidden: User \"bob\" cannot get path \"/metrics\"`) {
		t.Errorf("GET /metrics as bob: got %d %s, want 403 naming the path", code, body)
	}
	if code, body := do(http.MethodGet, ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without credentials: got %d %s, want 401", code, body)
	}
	if code, body := do(http.MethodPost, "admin-token"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: got %d %s, want 405", code, body)
	}
}

// TestRequestDurationMetric: with a Registerer, every request is recorded in
// apiserver_request_duration_seconds labelled as kube-apiserver labels it:
// a create is POST with scope resource, a get GET/resource, a namespace's
// list LIST/namespace, a list of all namespaces LIST/cluster, a
// server-side apply APPLY, a watch WATCH, a collection delete
// DELETECOLLECTION/namespace.
func TestRequestDurationMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, _, client := startImpersonatingWith(t, gateway.Config{Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), Registerer: reg}, nil)
	do := func(method, path, contentType, body string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer admin-token")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: got %d, want success", method, path, resp.StatusCode)
		}
	}
	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1"},"data":{"a":"b"}}`
	do(http.MethodPost, "/api/v1/namespaces/default/configmaps", "application/json", cm)
	do(http.MethodGet, "/api/v1/namespaces/default/configmaps/c1", "", "")
	do(http.MethodGet, "/api/v1/namespaces/default/configmaps", "", "")
	do(http.MethodGet, "/api/v1/configmaps", "", "")
	do(http.MethodPatch, "/api/v1/namespaces/default/configmaps/c1?fieldManager=test", "application/apply-patch+yaml", cm)
	do(http.MethodGet, "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1", "", "")
	do(http.MethodDelete, "/api/v1/namespaces/default/configmaps", "", "")

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "apiserver_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["resource"] != "configmaps" || l["component"] != "apiserver" || l["version"] != "v1" || l["group"] != "" {
				continue
			}
			got[l["verb"]+"/"+l["scope"]] += m.GetHistogram().GetSampleCount()
		}
	}
	for _, want := range []string{"POST/resource", "GET/resource", "LIST/namespace", "LIST/cluster", "APPLY/resource", "WATCH/namespace", "DELETECOLLECTION/namespace"} {
		if got[want] != 1 {
			t.Errorf("apiserver_request_duration_seconds{resource=configmaps} %s: got %d observations, want 1 (all: %v)", want, got[want], got)
		}
	}
}
