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
