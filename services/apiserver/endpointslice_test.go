// This file holds the API service's tests of discovery.k8s.io/v1
// EndpointSlice beyond its refusals (checked against kube-apiserver's in
// gateway/testdata/invalid): the port defaults, what a v1 write drops, the
// generation a label change bumps, the immutable address type, and the
// storage-level kinds' create rules.
package apiserver

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	networkingv1 "github.com/kplane/kplane/proto/kplane/networking/v1"
)

func TestEndpointSliceDefaultsAndGeneration(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	slices := discoveryv1.NewEndpointSliceServiceClient(e.conn)
	cr, err := slices.CreateEndpointSlice(ctx, &discoveryv1.CreateEndpointSliceRequest{Namespace: "default", EndpointSlice: &discoveryv1.EndpointSlice{
		Metadata: om("default", "web-abc"), AddressType: "IPv4",
		Endpoints: []*discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, DeprecatedTopology: map[string]string{"kubernetes.io/hostname": "n1"},
			Hints: &discoveryv1.EndpointHints{ForZones: []*discoveryv1.ForZone{{Name: "z1"}}, ForNodes: []*discoveryv1.ForNode{{Name: "n1"}}}}},
		Ports: []*discoveryv1.EndpointPort{{Port: proto.Int32(80)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := cr.GetEndpointSlice()
	if p := s.GetPorts()[0]; p.Name == nil || p.GetName() != "" || p.GetProtocol() != "TCP" {
		t.Errorf("port defaults: name %v protocol %q, want \"\" and TCP", p.Name, p.GetProtocol())
	}
	ep := s.GetEndpoints()[0]
	if len(ep.GetDeprecatedTopology()) != 0 || len(ep.GetHints().GetForNodes()) != 0 || len(ep.GetHints().GetForZones()) != 1 || ep.NodeName != nil {
		t.Errorf("endpoint after a v1 create: topology %v, hints %v, nodeName %v; want topology and node hints dropped, zone hints kept",
			ep.GetDeprecatedTopology(), ep.GetHints(), ep.NodeName)
	}
	if g := s.GetMetadata().GetGeneration(); g != 1 {
		t.Fatalf("generation %d, want 1", g)
	}
	// A label change bumps the generation (nothing else changed).
	s.Metadata.Labels = map[string]string{"a": "b"}
	ur, err := slices.UpdateEndpointSlice(ctx, &discoveryv1.UpdateEndpointSliceRequest{Namespace: "default", Name: "web-abc", EndpointSlice: s})
	if err != nil {
		t.Fatal(err)
	}
	if g := ur.GetEndpointSlice().GetMetadata().GetGeneration(); g != 2 {
		t.Errorf("generation after a label change %d, want 2", g)
	}
	// An annotation change does not.
	s = ur.GetEndpointSlice()
	s.Metadata.Annotations = map[string]string{"note": "x"}
	if ur, err = slices.UpdateEndpointSlice(ctx, &discoveryv1.UpdateEndpointSliceRequest{Namespace: "default", Name: "web-abc", EndpointSlice: s}); err != nil {
		t.Fatal(err)
	}
	if g := ur.GetEndpointSlice().GetMetadata().GetGeneration(); g != 2 {
		t.Errorf("generation after an annotation change %d, want 2", g)
	}
	// The address type is immutable.
	s = ur.GetEndpointSlice()
	s.AddressType = "IPv6"
	s.Endpoints = nil
	_, err = slices.UpdateEndpointSlice(ctx, &discoveryv1.UpdateEndpointSliceRequest{Namespace: "default", Name: "web-abc", EndpointSlice: s})
	if se := wantReason(t, err, apierrors.ReasonInvalid); se.Message != `EndpointSlice.discovery.k8s.io "web-abc" is invalid: addressType: Invalid value: "IPv6": field is immutable` {
		t.Errorf("got %q", se.Message)
	}
}

func TestIngressCreateDropsStatus(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	ings := networkingv1.NewIngressServiceClient(e.conn)
	cr, err := ings.CreateIngress(ctx, &networkingv1.CreateIngressRequest{Namespace: "default", Ingress: &networkingv1.Ingress{
		Metadata: om("default", "web"),
		Spec: &networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
			Name: "web", Port: &networkingv1.ServiceBackendPort{Number: 80}}}},
		Status: &networkingv1.IngressStatus{LoadBalancer: &networkingv1.IngressLoadBalancerStatus{
			Ingress: []*networkingv1.IngressLoadBalancerIngress{{Ip: "192.0.2.1"}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if lb := cr.GetIngress().GetStatus().GetLoadBalancer().GetIngress(); len(lb) != 0 {
		t.Errorf("status on create kept: %v", lb)
	}
	// The status subresource writes it.
	in := cr.GetIngress()
	in.Status = &networkingv1.IngressStatus{LoadBalancer: &networkingv1.IngressLoadBalancerStatus{
		Ingress: []*networkingv1.IngressLoadBalancerIngress{{Ip: "192.0.2.1"}}}}
	sr, err := ings.UpdateIngressStatus(ctx, &networkingv1.UpdateIngressStatusRequest{Namespace: "default", Name: "web", Ingress: in})
	if err != nil {
		t.Fatal(err)
	}
	if lb := sr.GetIngress().GetStatus().GetLoadBalancer().GetIngress(); len(lb) != 1 || lb[0].GetIp() != "192.0.2.1" {
		t.Errorf("status after the status write: %v", lb)
	}
	// A hostname that is an IP is refused there, as Kubernetes does.
	in = sr.GetIngress()
	in.Status.LoadBalancer.Ingress = []*networkingv1.IngressLoadBalancerIngress{{Hostname: "192.0.2.9"}}
	_, err = ings.UpdateIngressStatus(ctx, &networkingv1.UpdateIngressStatusRequest{Namespace: "default", Name: "web", Ingress: in})
	wantReason(t, err, apierrors.ReasonInvalid)
}
