// This file tests the load's plan, the histogram quantile and the naming of
// series under the SLO's classes.

package main

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func TestPlan(t *testing.T) {
	tests := []struct {
		name                     string
		nodes, podsPerNode, npns int
		wantNamespaces           int
		wantBig, wantMedium      int
	}{
		{name: "tiny", nodes: 50, podsPerNode: 10, npns: 100, wantNamespaces: 1, wantBig: 0, wantMedium: 4},
		{name: "500 nodes", nodes: 500, podsPerNode: 30, npns: 100, wantNamespaces: 5, wantBig: 15, wantMedium: 125},
		{name: "uneven", nodes: 150, podsPerNode: 7, npns: 100, wantNamespaces: 2, wantBig: 0, wantMedium: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nss, deps := plan(tt.nodes, tt.podsPerNode, tt.npns)
			if len(nss) != tt.wantNamespaces {
				t.Errorf("namespaces: got %d, want %d", len(nss), tt.wantNamespaces)
			}
			pods, big, medium := 0, 0, 0
			for _, d := range deps {
				pods += int(d.replicas)
				switch d.replicas {
				case 250:
					big++
				case 30:
					medium++
				}
			}
			if want := tt.nodes * tt.podsPerNode; pods != want {
				t.Errorf("pods: got %d, want %d", pods, want)
			}
			if big != tt.wantBig || medium != tt.wantMedium {
				t.Errorf("big, medium Deployments: got %d, %d, want %d, %d", big, medium, tt.wantBig, tt.wantMedium)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	h := &histogram{bounds: []float64{0.1, 0.5, 1}, counts: []uint64{50, 90, 100}, total: 100}
	tests := []struct {
		name string
		q    float64
		want float64
	}{
		{name: "in the first bucket", q: 0.25, want: 0.05},
		{name: "in the second bucket", q: 0.7, want: 0.3},
		{name: "p99", q: 0.99, want: 0.95},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := h.quantile(tt.q); got < tt.want-1e-9 || got > tt.want+1e-9 {
				t.Errorf("quantile(%v): got %v, want %v", tt.q, got, tt.want)
			}
		})
	}
	over := &histogram{bounds: []float64{0.1, 1}, counts: []uint64{0, 0}, total: 3}
	if got := over.quantile(0.99); got != 1 {
		t.Errorf("quantile beyond the last bound: got %v, want 1", got)
	}
}

func TestClassify(t *testing.T) {
	grpc := func(method string) *dto.Metric {
		return &dto.Metric{Label: []*dto.LabelPair{{Name: proto.String("rpc_method"), Value: proto.String(method)}}}
	}
	tests := []struct {
		name      string
		key       seriesKey
		method    string // a gRPC method instead of key
		wantClass string
	}{
		{name: "create", key: seriesKey{Verb: "POST", Resource: "pods", Scope: "resource"}, wantClass: classMutating},
		{name: "apply", key: seriesKey{Verb: "APPLY", Resource: "configmaps", Scope: "resource"}, wantClass: classMutating},
		{name: "get", key: seriesKey{Verb: "GET", Resource: "pods", Scope: "resource"}, wantClass: classRead},
		{name: "pod log", key: seriesKey{Verb: "GET", Resource: "pods", Subresource: "log", Scope: "resource"}, wantClass: ""},
		{name: "namespace list", key: seriesKey{Verb: "LIST", Resource: "pods", Scope: "namespace"}, wantClass: classNamespaceList},
		{name: "cluster list", key: seriesKey{Verb: "LIST", Resource: "pods", Scope: "cluster"}, wantClass: classClusterList},
		{name: "watch", key: seriesKey{Verb: "WATCH", Resource: "pods", Scope: "cluster"}, wantClass: ""},
		{name: "non-resource", key: seriesKey{Verb: "GET"}, wantClass: ""},
		{name: "gRPC status update", method: "kplane.core.v1.PodService/UpdatePodStatus", wantClass: classMutating},
		{name: "gRPC binding", method: "kplane.core.v1.PodService/BindPod", wantClass: classMutating},
		{name: "gRPC get", method: "kplane.core.v1.SecretService/GetSecret", wantClass: classRead},
		{name: "gRPC list, scope unknown", method: "kplane.core.v1.PodService/ListPods", wantClass: classNamespaceList},
		{name: "gRPC watch", method: "kplane.watchstream.v1.WatchStreamService/StreamWatch", wantClass: ""},
		{name: "gRPC pod log", method: "kplane.core.v1.PodService/GetPodLog", wantClass: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, ok := tt.key, true
			if tt.method != "" {
				k, ok = grpcKeyOf(grpc(tt.method))
			}
			got := ""
			if ok {
				got = classify(k)
			}
			if got != tt.wantClass {
				t.Errorf("class of %+v: got %q, want %q", k, got, tt.wantClass)
			}
		})
	}
}
