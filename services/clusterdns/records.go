// This file holds the answers from the zone: which of the specification's
// names a query is (the zone apex, dns-version, a namespace, a Service, a
// headless Service's endpoint, an SRV port name, a pod address, a reverse
// address) and the records, NXDOMAIN or NODATA for it.

package clusterdns

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	"github.com/kplane/kplane/services/client"
)

// SchemaVersion is the version of the specification served, the TXT
// record of dns-version.<zone>.
const SchemaVersion = "1.1.0"

// answerZone fills m with the answer to a query for name (inside the zone)
// of type qtype. A name that exists without records of the type is NODATA
// (NOERROR, no answer, the SOA in the authority section); a name that does
// not exist is NXDOMAIN with the SOA.
func (s *Server) answerZone(m, r *dns.Msg, name string, qtype uint16) {
	m.SetReply(r)
	m.Authoritative = true
	rel := strings.TrimSuffix(strings.TrimSuffix(name, s.zone), ".")
	var labels []string // from the zone down: "svc", namespace, service...
	if rel != "" {
		labels = strings.Split(rel, ".")
		slices.Reverse(labels)
	}
	var rrs, extra []dns.RR
	exists := true
	switch {
	case len(labels) == 0:
		if qtype == dns.TypeSOA {
			rrs = []dns.RR{s.soa()}
		}
	case len(labels) == 1 && labels[0] == "dns-version":
		if qtype == dns.TypeTXT {
			rrs = []dns.RR{&dns.TXT{Hdr: s.hdr(name, dns.TypeTXT), Txt: []string{SchemaVersion}}}
		}
	case len(labels) == 1 && (labels[0] == "svc" || labels[0] == "pod"):
		// Empty non-terminals: they exist, with no records.
	case len(labels) == 2 && (labels[0] == "svc" || labels[0] == "pod"):
		exists = s.namespaceExists(labels[1])
	case len(labels) == 3 && labels[0] == "svc":
		rrs, extra, exists = s.serviceRecords(name, labels[1], labels[2], qtype)
	case len(labels) == 4 && labels[0] == "svc":
		rrs, exists = s.endpointRecords(name, labels[1], labels[2], labels[3], qtype)
	case len(labels) == 5 && labels[0] == "svc" && strings.HasPrefix(labels[3], "_") && strings.HasPrefix(labels[4], "_"):
		rrs, extra, exists = s.srvRecords(name, labels[1], labels[2], labels[4][1:], labels[3][1:], qtype)
	case len(labels) == 3 && labels[0] == "pod":
		rrs, exists = s.podRecords(name, labels[1], labels[2], qtype)
	default:
		exists = false
	}
	switch {
	case !exists:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{s.soa()}
	case len(rrs) == 0:
		m.Ns = []dns.RR{s.soa()}
	default:
		m.Answer, m.Extra = rrs, extra
	}
}

// hdr is the header of a record of the zone.
func (s *Server) hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: s.ttl}
}

// soa is the zone's SOA record, put in the authority section of negative
// answers; its minimum (the negative-caching TTL) is the TTL.
func (s *Server) soa() dns.RR {
	return &dns.SOA{Hdr: s.hdr(s.zone, dns.TypeSOA), Ns: "ns.dns." + s.zone, Mbox: "hostmaster." + s.zone,
		Serial: uint32(time.Now().Unix()), Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: s.ttl}
}

func (s *Server) namespaceExists(ns string) bool {
	_, ok := s.nss.Store().Get(ns)
	return ok
}

// addressRR is an A or AAAA record of ip at name when its family is qtype's
// (nil otherwise).
func (s *Server) addressRR(name, ip string, qtype uint16) dns.RR {
	p := net.ParseIP(ip)
	switch {
	case p == nil:
		return nil
	case p.To4() != nil && qtype == dns.TypeA:
		return &dns.A{Hdr: s.hdr(name, dns.TypeA), A: p.To4()}
	case p.To4() == nil && qtype == dns.TypeAAAA:
		return &dns.AAAA{Hdr: s.hdr(name, dns.TypeAAAA), AAAA: p}
	}
	return nil
}

// headless reports whether svc has no cluster IP (clusterIP: None).
func headless(svc *corev1.Service) bool {
	return svc.GetSpec().GetClusterIp() == "None"
}

// endpoint is one ready address of a headless Service.
type endpoint struct {
	ip, hostname string
}

// label is the endpoint's name under its Service: its hostname, else its
// address with dashes for the dots or colons.
func (e endpoint) label() string {
	if e.hostname != "" {
		return e.hostname
	}
	return strings.NewReplacer(".", "-", ":", "-").Replace(e.ip)
}

// endpoints lists the ready endpoints of svc across its EndpointSlices
// (each address once), and the slices' ports. An endpoint whose ready
// condition is unset counts as ready, as the EndpointSlice API says
// consumers should; publishNotReadyAddresses publishes every endpoint.
func (s *Server) endpoints(svc *corev1.Service) ([]endpoint, []*discoveryv1.EndpointPort) {
	ns, name := svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName()
	sls, _ := s.slices.Store().ByIndex(indexSliceOwner, client.KeyOf(ns, name))
	slices.SortFunc(sls, func(a, b *discoveryv1.EndpointSlice) int {
		return strings.Compare(a.GetMetadata().GetName(), b.GetMetadata().GetName())
	})
	seen := map[string]bool{}
	var eps []endpoint
	var ports []*discoveryv1.EndpointPort
	for _, sl := range sls {
		ports = append(ports, sl.GetPorts()...)
		for _, e := range sl.GetEndpoints() {
			c := e.GetConditions()
			ready := c == nil || c.Ready == nil || c.GetReady() || svc.GetSpec().GetPublishNotReadyAddresses()
			if !ready {
				continue
			}
			for _, a := range e.GetAddresses() {
				p := net.ParseIP(a)
				if p == nil || seen[p.String()] {
					continue
				}
				seen[p.String()] = true
				eps = append(eps, endpoint{ip: p.String(), hostname: e.GetHostname()})
			}
		}
	}
	return eps, ports
}

// serviceRecords answers <service>.<ns>.svc.<zone>: the cluster IPs; a
// headless Service's ready endpoints (NXDOMAIN while it has none); an
// ExternalName's CNAME. SRV at the Service's own name lists every port,
// as CoreDNS does (the specification defines only the _port._proto names).
func (s *Server) serviceRecords(name, ns, svcName string, qtype uint16) (rrs, extra []dns.RR, exists bool) {
	svc, ok := s.services.Store().GetByName(ns, svcName)
	if !ok {
		return nil, nil, false
	}
	if svc.GetSpec().GetType() == "ExternalName" {
		target := svc.GetSpec().GetExternalName()
		if target == "" {
			return nil, nil, true
		}
		return []dns.RR{&dns.CNAME{Hdr: s.hdr(name, dns.TypeCNAME), Target: dns.Fqdn(target)}}, nil, true
	}
	if headless(svc) {
		eps, ports := s.endpoints(svc)
		if len(eps) == 0 {
			return nil, nil, false
		}
		if qtype == dns.TypeSRV {
			rrs, extra = s.endpointSRVs(name, eps, uniquePorts(ports, "", ""))
			return rrs, extra, true
		}
		for _, e := range eps {
			if rr := s.addressRR(name, e.ip, qtype); rr != nil {
				rrs = append(rrs, rr)
			}
		}
		return rrs, nil, true
	}
	if qtype == dns.TypeSRV {
		for _, p := range svc.GetSpec().GetPorts() {
			rrs = append(rrs, &dns.SRV{Hdr: s.hdr(name, dns.TypeSRV), Priority: 0, Weight: 100, Port: uint16(p.GetPort()), Target: name})
		}
		if len(rrs) > 0 {
			extra = s.ipRecords(name, serviceIPs(svc))
		}
		return rrs, extra, true
	}
	for _, ip := range serviceIPs(svc) {
		if rr := s.addressRR(name, ip, qtype); rr != nil {
			rrs = append(rrs, rr)
		}
	}
	return rrs, nil, true
}

// ipRecords are the A and AAAA records of ips at name (for the additional
// section).
func (s *Server) ipRecords(name string, ips []string) []dns.RR {
	var out []dns.RR
	for _, ip := range ips {
		for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
			if rr := s.addressRR(name, ip, t); rr != nil {
				out = append(out, rr)
			}
		}
	}
	return out
}

// endpointSRVs are a headless Service's SRV records: one per ready endpoint
// and port, targeting the endpoint's own name, whose address goes in extra.
func (s *Server) endpointSRVs(svcFQDN string, eps []endpoint, ports []*discoveryv1.EndpointPort) (rrs, extra []dns.RR) {
	for _, p := range ports {
		for _, e := range eps {
			target := e.label() + "." + svcFQDN
			rrs = append(rrs, &dns.SRV{Hdr: s.hdr(svcFQDN, dns.TypeSRV), Priority: 0, Weight: 100, Port: uint16(p.GetPort()), Target: target})
		}
	}
	for _, e := range eps {
		extra = append(extra, s.ipRecords(e.label()+"."+svcFQDN, []string{e.ip})...)
	}
	return rrs, extra
}

// uniquePorts are the slices' ports (each name/protocol/port once), those
// named portName over protocol (case-insensitive) when they are set.
func uniquePorts(ports []*discoveryv1.EndpointPort, portName, protocol string) []*discoveryv1.EndpointPort {
	seen := map[string]bool{}
	var out []*discoveryv1.EndpointPort
	for _, p := range ports {
		proto := p.GetProtocol()
		if proto == "" {
			proto = "TCP"
		}
		if portName != "" && (!strings.EqualFold(p.GetName(), portName) || !strings.EqualFold(proto, protocol)) {
			continue
		}
		k := p.GetName() + "/" + proto + "/" + strconv.Itoa(int(p.GetPort()))
		if !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	return out
}

// endpointRecords answers <endpoint>.<service>.<ns>.svc.<zone> of a
// headless Service: the addresses of its ready endpoints with that
// hostname (or, without one, that dashed address).
func (s *Server) endpointRecords(name, ns, svcName, label string, qtype uint16) ([]dns.RR, bool) {
	svc, ok := s.services.Store().GetByName(ns, svcName)
	if !ok || !headless(svc) {
		return nil, false
	}
	eps, _ := s.endpoints(svc)
	var rrs []dns.RR
	found := false
	for _, e := range eps {
		if !strings.EqualFold(e.label(), label) {
			continue
		}
		found = true
		if rr := s.addressRR(name, e.ip, qtype); rr != nil {
			rrs = append(rrs, rr)
		}
	}
	return rrs, found
}

// srvRecords answers _<port>._<proto>.<service>.<ns>.svc.<zone>: NXDOMAIN
// unless the Service has a port of that name and protocol.
func (s *Server) srvRecords(name, ns, svcName, portName, protocol string, qtype uint16) (rrs, extra []dns.RR, exists bool) {
	svc, ok := s.services.Store().GetByName(ns, svcName)
	if !ok || svc.GetSpec().GetType() == "ExternalName" {
		return nil, nil, false
	}
	svcFQDN := strings.Join(strings.SplitN(name, ".", 3)[2:], "")
	if headless(svc) {
		eps, ports := s.endpoints(svc)
		ports = uniquePorts(ports, portName, protocol)
		if len(eps) == 0 || len(ports) == 0 {
			return nil, nil, false
		}
		if qtype != dns.TypeSRV {
			return nil, nil, true
		}
		srvs, extra := s.endpointSRVs(svcFQDN, eps, ports)
		for _, rr := range srvs {
			rr.Header().Name = name
		}
		return srvs, extra, true
	}
	for _, p := range svc.GetSpec().GetPorts() {
		proto := p.GetProtocol()
		if proto == "" {
			proto = "TCP"
		}
		if p.GetName() == "" || !strings.EqualFold(p.GetName(), portName) || !strings.EqualFold(proto, protocol) {
			continue
		}
		exists = true
		if qtype == dns.TypeSRV {
			rrs = append(rrs, &dns.SRV{Hdr: s.hdr(name, dns.TypeSRV), Priority: 0, Weight: 100, Port: uint16(p.GetPort()), Target: svcFQDN})
		}
	}
	if len(rrs) > 0 {
		extra = s.ipRecords(svcFQDN, serviceIPs(svc))
	}
	return rrs, extra, exists
}

// podRecords answers <a-b-c-d>.<ns>.pod.<zone> in the specification's
// "insecure" mode (CoreDNS's `pods insecure`, the kubeadm default): the
// address the name spells, for any namespace that exists, without looking
// for a pod that has it.
func (s *Server) podRecords(name, ns, label string, qtype uint16) ([]dns.RR, bool) {
	if !s.namespaceExists(ns) {
		return nil, false
	}
	var ip net.IP
	if strings.Count(label, "-") == 3 {
		ip = net.ParseIP(strings.ReplaceAll(label, "-", ".")).To4()
	} else {
		ip = net.ParseIP(strings.ReplaceAll(label, "-", ":"))
	}
	if ip == nil {
		return nil, false
	}
	if rr := s.addressRR(name, ip.String(), qtype); rr != nil {
		return []dns.RR{rr}, true
	}
	return nil, true
}

// answerReverse answers a PTR query for a Service's cluster IP (its name)
// or a headless Service's ready endpoint (<endpoint>.<service>...). It
// returns false when the address is neither: the caller forwards it.
func (s *Server) answerReverse(m, r *dns.Msg, name string, qtype uint16) bool {
	ip := reverseIP(name)
	if ip == nil {
		return false
	}
	var targets []string
	svcs, _ := s.services.Store().ByIndex(indexClusterIP, ip.String())
	for _, svc := range svcs {
		targets = append(targets, s.serviceFQDN(svc))
	}
	sls, _ := s.slices.Store().ByIndex(indexSliceAddr, ip.String())
	for _, sl := range sls {
		owner := sliceOwner(sl)
		if len(owner) == 0 {
			continue
		}
		ns, svcName, _ := strings.Cut(owner[0], "/")
		svc, ok := s.services.Store().GetByName(ns, svcName)
		if !ok || !headless(svc) {
			continue
		}
		eps, _ := s.endpoints(svc)
		for _, e := range eps {
			if e.ip == ip.String() {
				targets = append(targets, e.label()+"."+s.serviceFQDN(svc))
			}
		}
	}
	if len(targets) == 0 {
		return false
	}
	m.SetReply(r)
	m.Authoritative = true
	if qtype != dns.TypePTR {
		return true
	}
	slices.Sort(targets)
	for _, t := range slices.Compact(targets) {
		m.Answer = append(m.Answer, &dns.PTR{Hdr: s.hdr(name, dns.TypePTR), Ptr: t})
	}
	return true
}

func (s *Server) serviceFQDN(svc *corev1.Service) string {
	return svc.GetMetadata().GetName() + "." + svc.GetMetadata().GetNamespace() + ".svc." + s.zone
}

// reverseIP is the address an in-addr.arpa or ip6.arpa name stands for
// (nil if it is not a whole address).
func reverseIP(name string) net.IP {
	labels := dns.SplitDomainName(name)
	n := len(labels)
	switch {
	case n == 6 && labels[4] == "in-addr" && labels[5] == "arpa":
		parts := slices.Clone(labels[:4])
		slices.Reverse(parts)
		return net.ParseIP(strings.Join(parts, ".")).To4()
	case n == 34 && labels[32] == "ip6" && labels[33] == "arpa":
		var b strings.Builder
		for i := 31; i >= 0; i-- {
			if len(labels[i]) != 1 {
				return nil
			}
			b.WriteString(labels[i])
			if i%4 == 0 && i > 0 {
				b.WriteByte(':')
			}
		}
		return net.ParseIP(b.String())
	}
	return nil
}
