// This file reads the API endpoint's apiserver_request_duration_seconds
// histogram from /metrics, takes the difference of two readings, and judges
// each verb/resource/subresource/scope series' p99 against Kubernetes' API
// call latency SLO as ClusterLoader2's APIResponsiveness measurement does.

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

const requestDuration = "apiserver_request_duration_seconds"

// seriesKey names one series of the histogram, as the SLO groups them.
type seriesKey struct {
	Verb, Resource, Subresource, Scope string
}

// histogram is one series' cumulative bucket counts.
type histogram struct {
	bounds []float64 // upper bounds, ascending, without +Inf
	counts []uint64  // cumulative counts per bound
	total  uint64
}

// scrape reads the histogram from the API endpoint's /metrics. Series of
// the same key (other groups, versions or dry-run values) are summed.
func scrape(ctx context.Context, cs kubernetes.Interface) (map[seriesKey]*histogram, error) {
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("get /metrics: %w", err)
	}
	out := map[seriesKey]*histogram{}
	if err := addHistograms(out, b, requestDuration, keyOf); err != nil {
		return nil, err
	}
	return out, nil
}

// grpcDuration is the OpenTelemetry gRPC server histogram kplane's API
// services expose: every call of every client (the controllers, the
// schedulers and the node agents call the API services over gRPC, not
// through the HTTP endpoint).
const grpcDuration = "rpc_server_call_duration_seconds"

// scrapeGRPC reads grpcDuration from each plain-HTTP metrics URL and sums
// the replicas' series.
func scrapeGRPC(ctx context.Context, urls []string) (map[seriesKey]*histogram, error) {
	out := map[seriesKey]*histogram{}
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", u, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", u, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", u, err)
		}
		if err := addHistograms(out, b, grpcDuration, grpcKeyOf); err != nil {
			return nil, fmt.Errorf("%s: %w", u, err)
		}
	}
	return out, nil
}

// addHistograms parses a /metrics text and adds the family's series to out
// under the keys key gives (false: left out).
func addHistograms(out map[seriesKey]*histogram, text []byte, family string, key func(*dto.Metric) (seriesKey, bool)) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return fmt.Errorf("parse /metrics: %w", err)
	}
	f, ok := families[family]
	if !ok {
		return fmt.Errorf("/metrics has no %s", family)
	}
	for _, m := range f.GetMetric() {
		k, ok := key(m)
		if !ok {
			continue
		}
		h := m.GetHistogram()
		cur := out[k]
		if cur == nil {
			cur = &histogram{}
			for _, b := range h.GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) {
					cur.bounds = append(cur.bounds, b.GetUpperBound())
				}
			}
			cur.counts = make([]uint64, len(cur.bounds))
			out[k] = cur
		}
		for i, b := range h.GetBucket() {
			if i < len(cur.counts) && b.GetUpperBound() == cur.bounds[i] {
				cur.counts[i] += b.GetCumulativeCount()
			}
		}
		cur.total += h.GetSampleCount()
	}
	return nil
}

// grpcVerbs maps a kplane gRPC method's verb prefix to the HTTP verb
// kube-apiserver would report, longest prefix first.
var grpcVerbs = []struct{ prefix, verb, sub string }{
	{"DeleteCollection", "DELETECOLLECTION", ""}, {"Create", "POST", ""}, {"Update", "PUT", ""},
	{"Patch", "PATCH", ""}, {"Delete", "DELETE", ""}, {"Get", "GET", ""}, {"List", "LIST", ""},
	{"Bind", "POST", "binding"}, {"Evict", "POST", "eviction"},
}

// grpcKeyOf names a gRPC series "kplane.core.v1.PodService/UpdatePodStatus"
// as verb PUT, resource PodService/UpdatePodStatus. The scope of a list is
// not in the method: it is reported as "?" and judged at the stricter
// namespace-list threshold. Watches and streams are left out.
func grpcKeyOf(m *dto.Metric) (seriesKey, bool) {
	var method string
	for _, l := range m.GetLabel() {
		if l.GetName() == "rpc_method" {
			method = l.GetValue()
		}
	}
	svc, rpc, ok := strings.Cut(method, "/")
	if !ok {
		return seriesKey{}, false
	}
	svc = svc[strings.LastIndex(svc, ".")+1:]
	for _, stream := range []string{"Watch", "Log", "Exec", "Attach", "PortForward", "Proxy"} {
		if strings.Contains(rpc, stream) {
			return seriesKey{}, false
		}
	}
	for _, v := range grpcVerbs {
		if strings.HasPrefix(rpc, v.prefix) {
			scope := "resource"
			if v.verb == "LIST" || v.verb == "DELETECOLLECTION" {
				scope = "?"
			}
			return seriesKey{Verb: v.verb, Resource: svc + "/" + rpc, Subresource: v.sub, Scope: scope}, true
		}
	}
	return seriesKey{}, false
}

func keyOf(m *dto.Metric) (seriesKey, bool) {
	var k seriesKey
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "verb":
			k.Verb = l.GetValue()
		case "resource":
			k.Resource = l.GetValue()
		case "subresource":
			k.Subresource = l.GetValue()
		case "scope":
			k.Scope = l.GetValue()
		}
	}
	return k, true
}

// delta is after minus before, series by series.
func delta(before, after map[seriesKey]*histogram) map[seriesKey]*histogram {
	out := map[seriesKey]*histogram{}
	for k, a := range after {
		d := &histogram{bounds: a.bounds, counts: slices.Clone(a.counts), total: a.total}
		if b := before[k]; b != nil && len(b.counts) == len(a.counts) {
			for i := range d.counts {
				d.counts[i] -= min(b.counts[i], d.counts[i])
			}
			d.total -= min(b.total, d.total)
		}
		if d.total > 0 {
			out[k] = d
		}
	}
	return out
}

// quantile interpolates linearly inside the bucket holding rank q·total,
// as Prometheus' histogram_quantile does; beyond the last finite bound it
// answers that bound.
func (h *histogram) quantile(q float64) float64 {
	if h.total == 0 || len(h.bounds) == 0 {
		return 0
	}
	rank := q * float64(h.total)
	i := sort.Search(len(h.counts), func(i int) bool { return float64(h.counts[i]) >= rank })
	if i == len(h.counts) {
		return h.bounds[len(h.bounds)-1]
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = h.bounds[i-1], float64(h.counts[i-1])
	}
	in := float64(h.counts[i]) - below
	if in == 0 {
		return h.bounds[i]
	}
	return lo + (h.bounds[i]-lo)*(rank-below)/in
}

// SLO classes of Kubernetes' API call latency SLO.
const (
	classMutating      = "mutating"
	classRead          = "read"
	classNamespaceList = "namespace list"
	classClusterList   = "cluster list"
)

// sloClasses lists the classes in report order with their p99 thresholds.
var sloClasses = []struct {
	name      string
	threshold float64
}{
	{classMutating, 1}, {classRead, 1}, {classNamespaceList, 5}, {classClusterList, 30},
}

// classify says which SLO a series falls under; "" for none (watches,
// connections such as exec and logs, non-resource paths).
func classify(k seriesKey) string {
	if k.Resource == "" {
		return ""
	}
	switch k.Verb {
	case "POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		return classMutating
	case "GET":
		if k.Subresource == "log" || k.Subresource == "proxy" {
			return ""
		}
		return classRead
	case "LIST":
		if k.Scope == "cluster" {
			return classClusterList
		}
		return classNamespaceList
	}
	return ""
}

// APICall is one series' figures.
type APICall struct {
	// Source is "endpoint" (apiserver_request_duration_seconds on the API
	// endpoint) or "grpc" (kplane's API services' gRPC histogram).
	Source      string  `json:"source"`
	Verb        string  `json:"verb"`
	Resource    string  `json:"resource"`
	Subresource string  `json:"subresource,omitempty"`
	Scope       string  `json:"scope"`
	Class       string  `json:"class"`
	Count       uint64  `json:"count"`
	P50         float64 `json:"p50"`
	P99         float64 `json:"p99"`
	Threshold   float64 `json:"threshold"`
}

// sortCalls orders calls slowest p99 relative to its threshold first.
func sortCalls(out []APICall) {
	sort.Slice(out, func(i, j int) bool {
		ri, rj := out[i].P99/out[i].Threshold, out[j].P99/out[j].Threshold
		if ri != rj {
			return ri > rj
		}
		return fmt.Sprint(out[i]) < fmt.Sprint(out[j])
	})
}

// apiCalls turns the difference of two readings into the series the SLO
// covers, slowest p99 relative to its threshold first.
func apiCalls(source string, d map[seriesKey]*histogram) []APICall {
	var out []APICall
	for k, h := range d {
		c := classify(k)
		if c == "" {
			continue
		}
		var th float64
		for _, s := range sloClasses {
			if s.name == c {
				th = s.threshold
			}
		}
		out = append(out, APICall{Source: source, Verb: k.Verb, Resource: k.Resource, Subresource: k.Subresource, Scope: k.Scope, Class: c,
			Count: h.total, P50: h.quantile(0.5), P99: h.quantile(0.99), Threshold: th})
	}
	sortCalls(out)
	return out
}
