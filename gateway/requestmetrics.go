// This file holds apiserver_request_duration_seconds: the latency histogram
// Kubernetes' API call latency SLO is measured from, recorded per request
// with the labels and buckets kube-apiserver gives it, so that a load test
// (scripts/bench-scale.sh) reads the same series from kplane as from
// Kubernetes.

package gateway

import (
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/metrics"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// requestMetrics records every request's duration, from the gateway's first
// byte of handling to its handler's return, labelled as kube-apiserver
// labels it: verb (GET, LIST, WATCH, POST, PUT, PATCH, APPLY, DELETE,
// DELETECOLLECTION, CONNECT), dry_run, group, version, resource,
// subresource, scope (resource, namespace, cluster) and component.
type requestMetrics struct {
	duration *prometheus.HistogramVec
	infos    *request.RequestInfoFactory
}

// newRequestMetrics registers the histogram with reg.
func newRequestMetrics(reg prometheus.Registerer) (*requestMetrics, error) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "apiserver",
		Name:      "request_duration_seconds",
		Help:      "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
		// kube-apiserver's buckets, so that quantiles interpolate alike.
		Buckets: []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3,
			4, 5, 6, 8, 10, 15, 20, 30, 45, 60},
	}, []string{"verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component"})
	if err := reg.Register(h); err != nil {
		return nil, err
	}
	return &requestMetrics{
		duration: h,
		infos:    &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")},
	}, nil
}

// installerVerbs turns a RequestInfo verb into the verb kube-apiserver's
// handlers report (the HTTP method, LIST, WATCH or DELETECOLLECTION).
var installerVerbs = map[string]string{
	"get": "GET", "list": "LIST", "watch": "WATCH", "create": "POST", "update": "PUT",
	"patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETECOLLECTION",
}

// observe records one request that started at start. Requests outside the
// resource paths (discovery, OpenAPI, health, /metrics) are recorded with an
// empty scope and resource, as kube-apiserver records them.
func (m *requestMetrics) observe(r *http.Request, start time.Time) {
	d := time.Since(start).Seconds()
	info, err := m.infos.NewRequestInfo(r)
	if err != nil {
		return
	}
	verb, ok := installerVerbs[info.Verb]
	if !ok {
		verb = strings.ToUpper(r.Method)
	}
	scope := metrics.CleanScope(info)
	verb = metrics.CleanVerb(metrics.CanonicalVerb(verb, scope), r, info)
	dryRun := ""
	if strings.Contains(r.URL.RawQuery, "dryRun") {
		dryRun = strings.Join(sets.List(sets.New(r.URL.Query()["dryRun"]...)), ",")
	}
	m.duration.WithLabelValues(verb, dryRun, info.APIGroup, info.APIVersion, info.Resource, info.Subresource, scope, "apiserver").Observe(d)
}
