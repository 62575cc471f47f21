// This file holds how the API service reaches a webhook (admission or CRD
// conversion) named by a Service: a ready endpoint of the Service's port
// from its EndpointSlices, as kube-apiserver's endpoint routing resolves
// it (kplane has no Service proxy to send a ClusterIP's traffic on).

package apiserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
)

// serviceNameLabel is the label an EndpointSlice names its Service with.
const serviceNameLabel = "kubernetes.io/service-name"

// ResolveService returns the host:port of a ready endpoint serving port of
// the Service namespace/name (an ExternalName Service's name itself),
// picked at random among the ready ones.
func (s *Server) ResolveService(ctx context.Context, namespace, name string, port int32) (string, error) {
	obj, err := s.cachedOrStored(ctx, s.resources["services"], namespace, name)
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("service %q not found", namespace+"/"+name)
	}
	if err != nil {
		return "", err
	}
	svc := obj.(*corev1.Service)
	if svc.GetSpec().GetType() == "ExternalName" {
		return net.JoinHostPort(svc.GetSpec().GetExternalName(), strconv.Itoa(int(port))), nil
	}
	var sp *corev1.ServicePort
	for _, p := range svc.GetSpec().GetPorts() {
		if p.GetPort() == port {
			sp = p
			break
		}
	}
	if sp == nil {
		return "", fmt.Errorf("no service port %d found for service %q", port, svc.GetMetadata().GetName())
	}
	ch := s.cachers["endpointslices"]
	if err := ch.waitReady(ctx); err != nil {
		return "", err
	}
	slices, _ := ch.snapshot(func(m proto.Message) bool {
		es := m.(*discoveryv1.EndpointSlice)
		return es.GetMetadata().GetNamespace() == namespace && es.GetMetadata().GetLabels()[serviceNameLabel] == name
	})
	var addrs []string
	for _, m := range slices {
		es := m.(*discoveryv1.EndpointSlice)
		var target int32 = -1
		for _, p := range es.GetPorts() {
			if p.GetName() == sp.GetName() && p.Port != nil {
				target = p.GetPort()
			}
		}
		if target < 0 {
			continue
		}
		for _, ep := range es.GetEndpoints() {
			if ep.GetConditions().Ready != nil && !ep.GetConditions().GetReady() {
				continue
			}
			if len(ep.GetAddresses()) > 0 {
				addrs = append(addrs, net.JoinHostPort(ep.GetAddresses()[0], strconv.Itoa(int(target))))
			}
		}
	}
	if len(addrs) == 0 {
		return "", fmt.Errorf("no endpoints available for service %q", svc.GetMetadata().GetName())
	}
	return addrs[rand.IntN(len(addrs))], nil
}

// endpointResolver is ResolveService as k8s.io/apiserver's webhook
// ServiceResolver (CRD conversion webhooks' client).
type endpointResolver struct{ s *Server }

// resolveTimeout bounds a resolution without a context of its own.
const resolveTimeout = 5 * time.Second

func (r endpointResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	addr, err := r.s.ResolveService(ctx, namespace, name, port)
	if err != nil {
		return nil, err
	}
	return &url.URL{Scheme: "https", Host: addr}, nil
}
