// This file holds the resource metrics API, metrics.k8s.io/v1beta1
// NodeMetrics and PodMetrics (read-only: get and list). Nothing is stored:
// each request reads the pods or nodes it names from the store and asks
// their node agents for the kubelet's stats summary (GET /stats/summary on
// the agent's log server, with the API service's kubelet client), as
// metrics-server scrapes the kubelets. Asking on demand keeps usage out of
// the Raft log (samples change every few seconds and nobody needs their
// history) and needs no new writer; the price is one round trip per node
// per request, bounded by metricsNodeTimeout, and a node that does not
// answer is left out, as metrics-server leaves out a node it cannot scrape.

package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/api/resource"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	metricsv1beta1 "github.com/kplane/kplane/proto/kplane/metrics/v1beta1"
)

// metricsNodeTimeout bounds one node agent's answer.
const metricsNodeTimeout = 5 * time.Second

// metricsWindow is the window a sample covers: the CRI's usageNanoCores is
// the runtime's current rate (the built-in runtime's is the declared
// usage), not an average kplane computed over two samples, so it is
// reported as a point sample.
const metricsWindow = "0s"

// The metrics resources, for authorization and audit only (not stored).
var (
	podMetricsInfo  = resourceInfo{Group: "metrics.k8s.io", Version: "v1beta1", Kind: "PodMetrics", Resource: "pods", Namespaced: true}
	nodeMetricsInfo = resourceInfo{Group: "metrics.k8s.io", Version: "v1beta1", Kind: "NodeMetrics", Resource: "nodes"}
)

type podMetricsService struct {
	metricsv1beta1.UnimplementedPodMetricsServiceServer
	s *Server
}

type nodeMetricsService struct {
	metricsv1beta1.UnimplementedNodeMetricsServiceServer
	s *Server
}

var (
	_ metricsv1beta1.PodMetricsServiceServer  = (*podMetricsService)(nil)
	_ metricsv1beta1.NodeMetricsServiceServer = (*nodeMetricsService)(nil)
)

func (x *podMetricsService) GetPodMetrics(ctx context.Context, req *metricsv1beta1.GetPodMetricsRequest) (*metricsv1beta1.GetPodMetricsResponse, error) {
	items, err := x.s.podMetrics(ctx, "get", req.GetNamespace(), req.GetName(), "", "")
	if err != nil {
		return nil, toGRPC(err)
	}
	if len(items) == 0 {
		return nil, toGRPC(apierrors.NewNotFound("metrics.k8s.io", "pods", req.GetName()))
	}
	return &metricsv1beta1.GetPodMetricsResponse{PodMetrics: items[0]}, nil
}

func (x *podMetricsService) ListPodMetrics(ctx context.Context, req *metricsv1beta1.ListPodMetricsRequest) (*metricsv1beta1.ListPodMetricsResponse, error) {
	items, err := x.s.podMetrics(ctx, "list", req.GetNamespace(), "", req.GetLabelSelector(), req.GetFieldSelector())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &metricsv1beta1.ListPodMetricsResponse{List: &metricsv1beta1.PodMetricsList{ApiVersion: "metrics.k8s.io/v1beta1",
		Kind: "PodMetricsList", Metadata: &metav1.ListMeta{}, Items: items}}, nil
}

func (x *nodeMetricsService) GetNodeMetrics(ctx context.Context, req *metricsv1beta1.GetNodeMetricsRequest) (*metricsv1beta1.GetNodeMetricsResponse, error) {
	items, err := x.s.nodeMetrics(ctx, "get", req.GetName(), "", "")
	if err != nil {
		return nil, toGRPC(err)
	}
	if len(items) == 0 {
		return nil, toGRPC(apierrors.NewNotFound("metrics.k8s.io", "nodes", req.GetName()))
	}
	return &metricsv1beta1.GetNodeMetricsResponse{NodeMetrics: items[0]}, nil
}

func (x *nodeMetricsService) ListNodeMetrics(ctx context.Context, req *metricsv1beta1.ListNodeMetricsRequest) (*metricsv1beta1.ListNodeMetricsResponse, error) {
	items, err := x.s.nodeMetrics(ctx, "list", "", req.GetLabelSelector(), req.GetFieldSelector())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &metricsv1beta1.ListNodeMetricsResponse{List: &metricsv1beta1.NodeMetricsList{ApiVersion: "metrics.k8s.io/v1beta1",
		Kind: "NodeMetricsList", Metadata: &metav1.ListMeta{}, Items: items}}, nil
}

// podMetrics answers get (name set) and list: the usage of the running
// pods that match, from their nodes' summaries. A pod whose node did not
// answer, or that has no running container, has no metrics.
func (s *Server) podMetrics(ctx context.Context, verb, ns, name, labelSel, fieldSel string) (_ []*metricsv1beta1.PodMetrics, err error) {
	c := s.begin(ctx, verb, &podMetricsInfo, "", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	pr := s.resources["pods"]
	var pods []*corev1.Pod
	if name != "" {
		obj, err := s.store.get(ctx, pr, ns, name)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		pods = append(pods, obj.(*corev1.Pod))
	} else {
		sel, err := parseSelector(pr, ns, labelSel, fieldSel)
		if err != nil {
			return nil, err
		}
		page, err := s.store.list(ctx, pr, ns, 0, "", 0, sel)
		if err != nil {
			return nil, err
		}
		for _, it := range page.items {
			pods = append(pods, it.(*corev1.Pod))
		}
	}
	summaries := map[string]*statsv1alpha1.Summary{}
	var out []*metricsv1beta1.PodMetrics
	for _, p := range pods {
		node := p.GetSpec().GetNodeName()
		if node == "" || p.GetStatus().GetPhase() != "Running" {
			continue
		}
		sum, seen := summaries[node]
		if !seen {
			if s.kubelet == nil {
				return nil, apierrors.NewServiceUnavailable("metrics: the API service has no client for node agents (--kubelet-client-certificate)")
			}
			sum = s.nodeSummary(ctx, node)
			summaries[node] = sum
		}
		if sum == nil {
			continue
		}
		for _, ps := range sum.Pods {
			if ps.PodRef.Namespace != p.GetMetadata().GetNamespace() || ps.PodRef.Name != p.GetMetadata().GetName() || ps.PodRef.UID != p.GetMetadata().GetUid() {
				continue
			}
			m := &metricsv1beta1.PodMetrics{ApiVersion: "metrics.k8s.io/v1beta1", Kind: "PodMetrics",
				Metadata: &metav1.ObjectMeta{Name: p.GetMetadata().GetName(), Namespace: p.GetMetadata().GetNamespace(),
					Labels: p.GetMetadata().GetLabels(), CreationTimestamp: timestamppb.Now()},
				Timestamp: timestamppb.New(ps.CPU.Time.Time), Window: metricsWindow}
			for _, cs := range ps.Containers {
				m.Containers = append(m.Containers, &metricsv1beta1.ContainerMetrics{Name: cs.Name, Usage: usage(cs.CPU, cs.Memory)})
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// nodeMetrics answers get (name set) and list for nodes.
func (s *Server) nodeMetrics(ctx context.Context, verb, name, labelSel, fieldSel string) (_ []*metricsv1beta1.NodeMetrics, err error) {
	c := s.begin(ctx, verb, &nodeMetricsInfo, "", "", name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	nr := s.resources["nodes"]
	var nodes []*corev1.Node
	if name != "" {
		obj, err := s.store.get(ctx, nr, "", name)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, obj.(*corev1.Node))
	} else {
		sel, err := parseSelector(nr, "", labelSel, fieldSel)
		if err != nil {
			return nil, err
		}
		page, err := s.store.list(ctx, nr, "", 0, "", 0, sel)
		if err != nil {
			return nil, err
		}
		for _, it := range page.items {
			nodes = append(nodes, it.(*corev1.Node))
		}
	}
	if len(nodes) > 0 && s.kubelet == nil {
		return nil, apierrors.NewServiceUnavailable("metrics: the API service has no client for node agents (--kubelet-client-certificate)")
	}
	var out []*metricsv1beta1.NodeMetrics
	for _, n := range nodes {
		sum := s.nodeSummary(ctx, n.GetMetadata().GetName())
		if sum == nil {
			continue
		}
		out = append(out, &metricsv1beta1.NodeMetrics{ApiVersion: "metrics.k8s.io/v1beta1", Kind: "NodeMetrics",
			Metadata:  &metav1.ObjectMeta{Name: n.GetMetadata().GetName(), Labels: n.GetMetadata().GetLabels(), CreationTimestamp: timestamppb.Now()},
			Timestamp: timestamppb.New(sum.Node.CPU.Time.Time), Window: metricsWindow,
			Usage: usage(sum.Node.CPU, sum.Node.Memory)})
	}
	return out, nil
}

// usage is a metrics ResourceList as metrics-server writes it: CPU in
// nanocores, memory (the working set) in bytes.
func usage(cpu *statsv1alpha1.CPUStats, mem *statsv1alpha1.MemoryStats) map[string]string {
	var nano, ws uint64
	if cpu != nil && cpu.UsageNanoCores != nil {
		nano = *cpu.UsageNanoCores
	}
	if mem != nil && mem.WorkingSetBytes != nil {
		ws = *mem.WorkingSetBytes
	}
	return map[string]string{
		"cpu":    resource.NewScaledQuantity(int64(nano), resource.Nano).String(),
		"memory": resource.NewQuantity(int64(ws), resource.BinarySI).String(),
	}
}

// nodeSummary asks node's agent for its stats summary; nil (logged) when
// the node has no reachable agent or it fails to answer.
func (s *Server) nodeSummary(ctx context.Context, node string) *statsv1alpha1.Summary {
	sum, err := s.fetchSummary(ctx, node)
	if err != nil {
		s.log.Warn("metrics: no summary from the node agent", "node", node, "err", err)
		return nil
	}
	return sum
}

func (s *Server) fetchSummary(ctx context.Context, node string) (*statsv1alpha1.Summary, error) {
	obj, err := s.store.get(ctx, s.resources["nodes"], "", node)
	if err != nil {
		return nil, err
	}
	n := obj.(*corev1.Node)
	host := nodeAddress(n)
	if host == "" {
		return nil, fmt.Errorf("node %s has no address", node)
	}
	port := int(n.GetStatus().GetDaemonEndpoints().GetKubeletEndpoint().GetPort())
	if port == 0 {
		port = DefaultKubeletPort
	}
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: "/stats/summary",
		RawQuery: url.Values{"node": {node}}.Encode()}
	ctx, cancel := context.WithTimeout(ctx, metricsNodeTimeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("building the summary request: %w", err)
	}
	resp, err := s.kubelet.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("asking %s: %w", u.Host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("%s answered %s: %s", u.Host, resp.Status, b)
	}
	var sum statsv1alpha1.Summary
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&sum); err != nil {
		return nil, fmt.Errorf("reading the summary of %s: %w", node, err)
	}
	return &sum, nil
}
