// This file holds the proxy's model: the Services and EndpointSlices of
// the caches turned into the service ports it programs, each with the
// endpoints it may send to, chosen as kube-proxy chooses them (ready
// endpoints; serving and terminating ones only when none is ready), and
// the notes about what of a Service is not programmed.

package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
)

// LabelServiceName is the label that ties an EndpointSlice to its Service.
const LabelServiceName = "kubernetes.io/service-name"

// servicePort is one port of one Service as the proxy programs it.
type servicePort struct {
	Namespace, Service, PortName string
	Protocol                     string // nft's name: tcp, udp or sctp
	ClusterIP                    netip.Addr
	Port                         int32
	NodePort                     int32 // 0: none
	// AffinitySeconds is sessionAffinity ClientIP's timeout; 0: none.
	AffinitySeconds int32
	// InternalLocal and ExternalLocal are internalTrafficPolicy and
	// externalTrafficPolicy Local.
	InternalLocal, ExternalLocal bool
	// Endpoints are every endpoint of the port, usable or not, sorted.
	Endpoints []endpoint
}

// endpoint is one address and target port of a service port.
type endpoint struct {
	Addr netip.Addr
	Port int32
	Node string
	// Ready, Serving and Terminating are the endpoint's conditions, with
	// Kubernetes' defaults for unset ones (ready and serving when unset).
	Ready, Serving, Terminating bool
}

// String is the endpoint as ip:port.
func (e endpoint) String() string { return netip.AddrPortFrom(e.Addr, uint16(e.Port)).String() }

// name is the service port's readable name: namespace/service/protocol/port.
func (sp *servicePort) name() string {
	port := sp.PortName
	if port == "" {
		port = fmt.Sprint(sp.Port)
	}
	return sp.Namespace + "/" + sp.Service + "/" + sp.Protocol + "/" + port
}

// usable picks, from the endpoints that keep, those to send to: the
// ready ones, or when none is, those serving while terminating (so that
// a rolling update or a scale-down does not cut a Service off while its
// last pods drain), as kube-proxy does.
func usable(eps []endpoint, keep func(endpoint) bool) []endpoint {
	var ready, draining []endpoint
	for _, e := range eps {
		if !keep(e) {
			continue
		}
		switch {
		case e.Ready:
			ready = append(ready, e)
		case e.Serving && e.Terminating:
			draining = append(draining, e)
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return draining
}

// clusterEndpoints are the endpoints any client may be sent to.
func (sp *servicePort) clusterEndpoints() []endpoint {
	return usable(sp.Endpoints, func(endpoint) bool { return true })
}

// localEndpoints are the endpoints on the given nodes.
func (sp *servicePort) localEndpoints(nodes ...string) []endpoint {
	return usable(sp.Endpoints, func(e endpoint) bool { return slices.Contains(nodes, e.Node) })
}

// note is something of a Service the proxy does not program, said once
// per Service and message (as a log line and a Warning Event).
type note struct {
	svc     *corev1.Service
	message string
}

// buildModel turns the Services and EndpointSlices into the service
// ports to program, sorted by name, and the notes about what is left out.
// Services of type ExternalName and headless ones (no cluster IP) get no
// rules and no note: there is nothing for a proxy to do for them.
func buildModel(svcs []*corev1.Service, slicesOf func(namespace, name string) []*discoveryv1.EndpointSlice) ([]*servicePort, []note) {
	var out []*servicePort
	var notes []note
	for _, svc := range svcs {
		spec := svc.GetSpec()
		if spec.GetType() == "ExternalName" {
			continue
		}
		ip, skip, why := serviceIPv4(spec)
		if why != "" {
			notes = append(notes, note{svc, why})
		}
		if skip {
			continue
		}
		if len(spec.GetExternalIps()) > 0 {
			notes = append(notes, note{svc, fmt.Sprintf("externalIPs %v are not programmed by kplane proxy", spec.GetExternalIps())})
		}
		if spec.GetType() == "LoadBalancer" {
			notes = append(notes, note{svc, "type LoadBalancer is programmed as its cluster IP and node ports only: kplane proxy programs no load-balancer IPs"})
		}
		if r := spec.GetLoadBalancerSourceRanges(); len(r) > 0 {
			notes = append(notes, note{svc, fmt.Sprintf("loadBalancerSourceRanges %v are not enforced by kplane proxy", r)})
		}
		if d := spec.GetTrafficDistribution(); d != "" {
			notes = append(notes, note{svc, fmt.Sprintf("trafficDistribution %q is not honoured: kplane proxy balances over every usable endpoint", d)})
		}
		ns, name := svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName()
		own := slicesOf(ns, name)
		var affinity int32
		if spec.GetSessionAffinity() == "ClientIP" {
			affinity = spec.GetSessionAffinityConfig().GetClientIp().GetTimeoutSeconds()
			if affinity <= 0 {
				affinity = 10800 // Kubernetes' default, 3 hours
			}
		}
		for _, p := range spec.GetPorts() {
			proto, ok := nftProtocol(p.GetProtocol())
			if !ok {
				notes = append(notes, note{svc, fmt.Sprintf("port %q: protocol %q is not programmed", p.GetName(), p.GetProtocol())})
				continue
			}
			sp := &servicePort{
				Namespace: ns, Service: name, PortName: p.GetName(), Protocol: proto,
				ClusterIP: ip, Port: p.GetPort(), AffinitySeconds: affinity,
				InternalLocal: spec.GetInternalTrafficPolicy() == "Local",
				ExternalLocal: spec.GetExternalTrafficPolicy() == "Local",
			}
			if t := spec.GetType(); t == "NodePort" || t == "LoadBalancer" {
				sp.NodePort = p.GetNodePort()
			}
			sp.Endpoints = endpointsOf(own, p.GetName(), strings.ToUpper(proto))
			out = append(out, sp)
		}
	}
	slices.SortFunc(out, func(a, b *servicePort) int { return strings.Compare(a.name(), b.name()) })
	return out, notes
}

// serviceIPv4 is the Service's IPv4 cluster IP; skip says it gets no
// rules (headless, none yet, or no IPv4 one), why explains a skip or a
// family left out that a user should hear about.
func serviceIPv4(spec *corev1.ServiceSpec) (ip netip.Addr, skip bool, why string) {
	ips := spec.GetClusterIps()
	if len(ips) == 0 && spec.GetClusterIp() != "" {
		ips = []string{spec.GetClusterIp()}
	}
	if len(ips) == 0 || ips[0] == "None" {
		return netip.Addr{}, true, "" // headless, or not allocated yet
	}
	var v6 []string
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			return netip.Addr{}, true, fmt.Sprintf("cluster IP %q is not an IP address", s)
		case a.Is4() && !ip.IsValid():
			ip = a
		case a.Is6():
			v6 = append(v6, s)
		}
	}
	if len(v6) > 0 {
		why = fmt.Sprintf("IPv6 cluster IPs %v are not programmed: kplane proxy does IPv4 only", v6)
	}
	return ip, !ip.IsValid(), why
}

// nftProtocol is nft's name of a Service port's protocol.
func nftProtocol(p string) (string, bool) {
	switch p {
	case "", "TCP":
		return "tcp", true
	case "UDP":
		return "udp", true
	case "SCTP":
		return "sctp", true
	}
	return "", false
}

// endpointsOf collects the IPv4 endpoints of the slices for the port of
// that name and protocol, one per address and port (a slice being
// replaced may repeat an endpoint of another; the readier one wins),
// sorted by address and port.
func endpointsOf(sl []*discoveryv1.EndpointSlice, portName, protocol string) []endpoint {
	byAddr := map[netip.AddrPort]endpoint{}
	for _, s := range sl {
		if s.GetAddressType() != "IPv4" {
			continue
		}
		var port int32
		found := false
		for _, p := range s.GetPorts() {
			pp := p.GetProtocol()
			if pp == "" {
				pp = "TCP"
			}
			if p.GetName() == portName && pp == protocol && p.Port != nil {
				port, found = p.GetPort(), true
				break
			}
		}
		if !found {
			continue
		}
		for _, e := range s.GetEndpoints() {
			c := e.GetConditions()
			ep := endpoint{Port: port, Node: e.GetNodeName(),
				Ready: c == nil || c.Ready == nil || *c.Ready, Terminating: c.GetTerminating()}
			ep.Serving = ep.Ready
			if c != nil && c.Serving != nil {
				ep.Serving = *c.Serving
			}
			for _, a := range e.GetAddresses() {
				addr, err := netip.ParseAddr(a)
				if err != nil || !addr.Is4() {
					continue
				}
				ep.Addr = addr
				key := netip.AddrPortFrom(addr, uint16(port))
				if old, ok := byAddr[key]; ok && rank(old) >= rank(ep) {
					continue
				}
				byAddr[key] = ep
			}
		}
	}
	out := make([]endpoint, 0, len(byAddr))
	for _, e := range byAddr {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b endpoint) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		return int(a.Port - b.Port)
	})
	return out
}

// rank orders an endpoint's conditions: ready over serving over neither.
func rank(e endpoint) int {
	switch {
	case e.Ready:
		return 2
	case e.Serving:
		return 1
	}
	return 0
}
