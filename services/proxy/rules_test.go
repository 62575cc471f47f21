// This file holds the tests of the rule computation on knftables' Fake:
// Services and EndpointSlices in, the table written, and packets traced
// through it — cluster IPs, node ports, the traffic policies, session
// affinity, hairpin and host masquerading, the reject of a port without
// endpoints, the fallback to terminating endpoints — and the resync that
// removes what is no longer wanted.

package proxy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// The fixture's host serves nodes a and b; c is elsewhere.
var testTopo = topology{
	ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16"),
	Nodes: []hostNode{
		{Name: "a", PodCIDR: netip.MustParsePrefix("10.244.1.0/24")},
		{Name: "b", PodCIDR: netip.MustParsePrefix("10.244.2.0/24")},
	},
}

const (
	podA   = "10.244.1.99" // a client pod on node a
	podB   = "10.244.2.99" // on node b
	host   = "192.168.1.5" // the host's own address
	remote = "203.0.113.7" // a client outside the cluster
)

func service(name, ip string, mut ...func(*corev1.ServiceSpec)) *corev1.Service {
	s := &corev1.Service{
		Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: name, Uid: "uid-" + name},
		Spec: &corev1.ServiceSpec{Type: "ClusterIP", ClusterIp: ip, ClusterIps: []string{ip},
			Ports: []*corev1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}}},
	}
	for _, m := range mut {
		m(s.Spec)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// ep is an endpoint: ready, or with explicit serving and terminating.
func ep(ip, node string, cond ...bool) *discoveryv1.Endpoint {
	e := &discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr(node), Conditions: &discoveryv1.EndpointConditions{Ready: ptr(true)}}
	if len(cond) == 3 {
		e.Conditions = &discoveryv1.EndpointConditions{Ready: ptr(cond[0]), Serving: ptr(cond[1]), Terminating: ptr(cond[2])}
	}
	return e
}

// slice is an IPv4 slice of the Service name with port "http" on 8080.
func slice(svc, name string, eps ...*discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		Metadata:    &metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{LabelServiceName: svc}},
		AddressType: "IPv4",
		Ports:       []*discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr("TCP"), Port: ptr(int32(8080))}},
		Endpoints:   eps,
	}
}

// world is a fake table and what it was written from.
type world struct {
	t      *testing.T
	fake   *knftables.Fake
	svcs   []*corev1.Service
	slices []*discoveryv1.EndpointSlice
	synced bool
	notes  []note
}

func newWorld(t *testing.T) *world {
	return &world{t: t, fake: knftables.NewFake(knftables.IPv4Family, DefaultTable)}
}

// sync writes the table as Proxier.Sync does.
func (w *world) sync() {
	w.t.Helper()
	ports, notes := buildModel(w.svcs, func(ns, name string) []*discoveryv1.EndpointSlice {
		var out []*discoveryv1.EndpointSlice
		for _, s := range w.slices {
			if s.Metadata.Namespace == ns && s.Metadata.Labels[LabelServiceName] == name {
				out = append(out, s)
			}
		}
		return out
	})
	w.notes = notes
	ctx := context.Background()
	var ex existing
	if w.synced {
		var err error
		if ex, err = listExisting(ctx, w.fake); err != nil {
			w.t.Fatal(err)
		}
	}
	tx := w.fake.NewTransaction()
	fillTransaction(tx, buildRuleset(ports, testTopo), !w.synced, ex)
	if err := w.fake.Run(ctx, tx); err != nil {
		w.t.Fatalf("transaction: %v\n%s", err, tx)
	}
	w.synced = true
}

// nat traces pkt through the DNAT stage: prerouting for what comes in,
// output for what the host sends.
func (w *world) nat(pkt packet) []string {
	w.t.Helper()
	tr := &tracer{t: w.t, fake: w.fake}
	chain := chainNatPrerouting
	if pkt.SrcLocal {
		chain = chainNatOutput
	}
	return tr.trace(chain, pkt)
}

// filter traces pkt through the filter hook it meets when no DNAT
// happened: forward from a pod, output from the host, input for a local
// destination.
func (w *world) filter(pkt packet) []string {
	w.t.Helper()
	tr := &tracer{t: w.t, fake: w.fake}
	chain := chainFilterForward
	switch {
	case pkt.SrcLocal:
		chain = chainFilterOutput
	case pkt.DstLocal:
		chain = chainFilterInput
	}
	return tr.trace(chain, pkt)
}

func tcp(src, dst string, port int) packet {
	return packet{Src: src, Dst: dst, Proto: "tcp", Port: port, SrcLocal: src == host, DstLocal: dst == host}
}

func dnat(masq bool, to ...string) []string {
	var out []string
	for _, t := range to {
		out = append(out, fmt.Sprintf("dnat %s masq=%v", t, masq))
	}
	slices.Sort(out)
	return out
}

func (w *world) expect(what string, got, want []string) {
	w.t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		w.t.Errorf("%s (-want +got):\n%s\ntable:\n%s", what, diff, w.fake.Dump())
	}
}

func TestClusterIPBalancesOverReadyEndpoints(t *testing.T) {
	w := newWorld(t)
	w.svcs = []*corev1.Service{service("web", "10.96.0.20")}
	w.slices = []*discoveryv1.EndpointSlice{slice("web", "web-1",
		ep("10.244.1.10", "a"), ep("10.244.2.10", "b"),
		ep("10.244.1.11", "a", false, false, false), // not ready: never used
	)}
	w.sync()
	all := dnat(false, "10.244.1.10:8080", "10.244.2.10:8080")
	w.expect("pod on a to the cluster IP", w.nat(tcp(podA, "10.96.0.20", 80)), all)
	w.expect("pod on b", w.nat(tcp(podB, "10.96.0.20", 80)), all)
	w.expect("the host (masqueraded)", w.nat(tcp(host, "10.96.0.20", 80)), dnat(true, "10.244.1.10:8080", "10.244.2.10:8080"))
	w.expect("another port of the IP", w.nat(tcp(podA, "10.96.0.20", 81)), []string{"none masq=false"})
	// The balancing is numgen over both endpoints.
	rules := w.rulesOf("service-")
	if !strings.Contains(rules, "numgen random mod 2 vmap") {
		t.Errorf("the service chain does not balance at random over 2:\n%s", rules)
	}
	w.expect("forward filter of a port with endpoints", w.filter(tcp(podA, "10.96.0.20", 80)), []string{"none masq=false"})
}

// rulesOf is every rule of the chains whose names start with prefix.
func (w *world) rulesOf(prefix string) string {
	var b strings.Builder
	for name, c := range w.fake.Table.Chains {
		if strings.HasPrefix(name, prefix) {
			for _, r := range c.Rules {
				fmt.Fprintf(&b, "%s: %s\n", name, r.Rule)
			}
		}
	}
	return b.String()
}

func TestHairpinIsMasqueraded(t *testing.T) {
	w := newWorld(t)
	w.svcs = []*corev1.Service{service("web", "10.96.0.20")}
	w.slices = []*discoveryv1.EndpointSlice{slice("web", "web-1", ep("10.244.1.10", "a"))}
	w.sync()
	w.expect("the endpoint reaching itself", w.nat(tcp("10.244.1.10", "10.96.0.20", 80)), dnat(true, "10.244.1.10:8080"))
	w.expect("another pod", w.nat(tcp(podA, "10.96.0.20", 80)), dnat(false, "10.244.1.10:8080"))
}

func TestPortsMatchByName(t *testing.T) {
	w := newWorld(t)
	svc := service("multi", "10.96.0.21", func(s *corev1.ServiceSpec) {
		s.Ports = []*corev1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "dns", Protocol: "UDP", Port: 53}}
	})
	sl := slice("multi", "multi-1", ep("10.244.1.10", "a"))
	sl.Ports = []*discoveryv1.EndpointPort{
		{Name: ptr("dns"), Protocol: ptr("UDP"), Port: ptr(int32(5353))},
		{Name: ptr("http"), Protocol: ptr("TCP"), Port: ptr(int32(8080))},
	}
	w.svcs, w.slices = []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{sl}
	w.sync()
	w.expect("http", w.nat(tcp(podA, "10.96.0.21", 80)), dnat(false, "10.244.1.10:8080"))
	udp := tcp(podA, "10.96.0.21", 53)
	udp.Proto = "udp"
	w.expect("dns over udp", w.nat(udp), dnat(false, "10.244.1.10:5353"))
	w.expect("tcp to the udp port", w.nat(tcp(podA, "10.96.0.21", 53)), []string{"none masq=false"})
}

func TestTerminatingEndpointsOnlyWithoutReadyOnes(t *testing.T) {
	w := newWorld(t)
	w.svcs = []*corev1.Service{service("web", "10.96.0.20")}
	w.slices = []*discoveryv1.EndpointSlice{slice("web", "web-1",
		ep("10.244.1.10", "a", false, true, true),  // serving, terminating
		ep("10.244.1.11", "a", false, false, true), // terminating, no longer serving
		ep("10.244.2.10", "b"),
	)}
	w.sync()
	w.expect("with a ready endpoint", w.nat(tcp(podA, "10.96.0.20", 80)), dnat(false, "10.244.2.10:8080"))
	w.slices[0].Endpoints = w.slices[0].Endpoints[:2]
	w.sync()
	w.expect("without", w.nat(tcp(podA, "10.96.0.20", 80)), dnat(false, "10.244.1.10:8080"))
}

func TestNoEndpointsRejects(t *testing.T) {
	w := newWorld(t)
	w.svcs = []*corev1.Service{service("empty", "10.96.0.22", func(s *corev1.ServiceSpec) {
		s.Type = "NodePort"
		s.Ports[0].NodePort = 30022
	})}
	w.slices = []*discoveryv1.EndpointSlice{slice("empty", "empty-1", ep("10.244.1.10", "a", false, false, false))}
	w.sync()
	w.expect("no DNAT", w.nat(tcp(podA, "10.96.0.22", 80)), []string{"none masq=false"})
	w.expect("forwarded from a pod", w.filter(tcp(podA, "10.96.0.22", 80)), []string{"reject masq=false"})
	w.expect("sent by the host", w.filter(tcp(host, "10.96.0.22", 80)), []string{"reject masq=false"})
	w.expect("to the node port", w.filter(tcp(remote, host, 30022)), []string{"reject masq=false"})
	if r := w.fake.Table.Chains[chainReject].Rules; len(r) == 0 || r[0].Rule != "meta l4proto tcp reject with tcp reset" {
		t.Errorf("reject chain %v: want a TCP reset first", r)
	}
}

func TestNodePort(t *testing.T) {
	w := newWorld(t)
	w.svcs = []*corev1.Service{service("np", "10.96.0.23", func(s *corev1.ServiceSpec) {
		s.Type = "NodePort"
		s.Ports[0].NodePort = 30080
	})}
	w.slices = []*discoveryv1.EndpointSlice{slice("np", "np-1", ep("10.244.1.10", "a"), ep("10.244.3.10", "c"))}
	w.sync()
	all := dnat(true, "10.244.1.10:8080", "10.244.3.10:8080")
	w.expect("from outside", w.nat(tcp(remote, host, 30080)), all)
	w.expect("from the host", w.nat(tcp(host, host, 30080)), all)
	w.expect("from a pod", w.nat(tcp(podA, host, 30080)), all)
	w.expect("loopback is not a node port", w.nat(packet{Src: host, Dst: "127.0.0.1", Proto: "tcp", Port: 30080, SrcLocal: true, DstLocal: true}), []string{"none masq=false"})
	w.expect("not a local address", w.nat(tcp(remote, "192.168.1.77", 30080)), []string{"none masq=false"})
	w.expect("the cluster IP still", w.nat(tcp(podA, "10.96.0.23", 80)), dnat(false, "10.244.1.10:8080", "10.244.3.10:8080"))
}

func TestExternalTrafficPolicyLocal(t *testing.T) {
	w := newWorld(t)
	w.svcs = []*corev1.Service{service("np", "10.96.0.24", func(s *corev1.ServiceSpec) {
		s.Type, s.ExternalTrafficPolicy = "NodePort", "Local"
		s.Ports[0].NodePort = 30081
	})}
	w.slices = []*discoveryv1.EndpointSlice{slice("np", "np-1", ep("10.244.2.10", "b"), ep("10.244.3.10", "c"))}
	w.sync()
	w.expect("from outside: this host's endpoints, source kept", w.nat(tcp(remote, host, 30081)), dnat(false, "10.244.2.10:8080"))
	w.expect("from a pod: every endpoint", w.nat(tcp(podA, host, 30081)), dnat(false, "10.244.2.10:8080", "10.244.3.10:8080"))
	w.expect("from the host: every endpoint, masqueraded", w.nat(tcp(host, host, 30081)), dnat(true, "10.244.2.10:8080", "10.244.3.10:8080"))
	// Only node c has one: outside traffic is dropped.
	w.slices[0].Endpoints = w.slices[0].Endpoints[1:]
	w.sync()
	w.expect("from outside without a local endpoint", w.nat(tcp(remote, host, 30081)), []string{"drop masq=false"})
	w.expect("from a pod still", w.nat(tcp(podA, host, 30081)), dnat(false, "10.244.3.10:8080"))
}

func TestInternalTrafficPolicyLocal(t *testing.T) {
	w := newWorld(t)
	w.svcs = []*corev1.Service{service("itp", "10.96.0.25", func(s *corev1.ServiceSpec) { s.InternalTrafficPolicy = ptr("Local") })}
	w.slices = []*discoveryv1.EndpointSlice{slice("itp", "itp-1", ep("10.244.1.10", "a"), ep("10.244.1.11", "a"), ep("10.244.3.10", "c"))}
	w.sync()
	w.expect("a pod on a: a's endpoints", w.nat(tcp(podA, "10.96.0.25", 80)), dnat(false, "10.244.1.10:8080", "10.244.1.11:8080"))
	w.expect("a pod on b: none, dropped", w.nat(tcp(podB, "10.96.0.25", 80)), []string{"drop masq=false"})
	w.expect("the host: every served node's", w.nat(tcp(host, "10.96.0.25", 80)), dnat(true, "10.244.1.10:8080", "10.244.1.11:8080"))
	// With no endpoint anywhere the port is rejected, as any other.
	w.slices = nil
	w.sync()
	w.expect("no endpoints at all", w.filter(tcp(podB, "10.96.0.25", 80)), []string{"reject masq=false"})
}

func TestSessionAffinity(t *testing.T) {
	w := newWorld(t)
	w.svcs = []*corev1.Service{service("sticky", "10.96.0.26", func(s *corev1.ServiceSpec) {
		s.SessionAffinity = "ClientIP"
		s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIp: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
	})}
	w.slices = []*discoveryv1.EndpointSlice{slice("sticky", "sticky-1", ep("10.244.1.10", "a"), ep("10.244.2.10", "b"))}
	w.sync()
	var sets []*knftables.Set
	for _, s := range w.fake.Table.Sets {
		sets = append(sets, &s.Set)
	}
	if len(sets) != 2 {
		t.Fatalf("%d affinity sets, want one per endpoint:\n%s", len(sets), w.fake.Dump())
	}
	var stickTo string
	for _, s := range sets {
		if s.Timeout == nil || *s.Timeout != 60e9 || s.Type != "ipv4_addr" || !slices.Contains(s.Flags, knftables.DynamicFlag) {
			t.Errorf("affinity set %+v: want ipv4_addr, dynamic, timeout 60s", s)
		}
		if strings.Contains(s.Name, "10.244.2.10") {
			stickTo = s.Name
		}
	}
	// A new client is balanced and remembered by the endpoint chosen.
	tr := &tracer{t: t, fake: w.fake}
	for _, r := range tr.chain(chainNatPrerouting, tcp(podA, "10.96.0.26", 80), outcome{}, 0) {
		if len(r.o.Updated) != 1 || !strings.Contains(r.o.Updated[0], strings.Split(r.o.DNAT, ":")[0]) {
			t.Errorf("a new client sent to %s updated %v, want that endpoint's set", r.o.DNAT, r.o.Updated)
		}
	}
	// A remembered client goes back to its endpoint.
	pkt := tcp(podA, "10.96.0.26", 80)
	pkt.Sticky = []string{stickTo}
	w.expect("a remembered client", w.nat(pkt), dnat(false, "10.244.2.10:8080"))
	// A resync keeps the sets (and so the clients they hold).
	w.fake.Table.Sets[stickTo].Elements = []*knftables.Element{{Set: stickTo, Key: []string{podA}}}
	w.sync()
	if s := w.fake.Table.Sets[stickTo]; s == nil || len(s.Elements) != 1 {
		t.Errorf("the affinity set lost its client on resync: %v", s)
	}
}

func TestSkippedServicesAndNotes(t *testing.T) {
	w := newWorld(t)
	w.svcs = []*corev1.Service{
		service("headless", "None"),
		service("ext", "", func(s *corev1.ServiceSpec) { s.Type, s.ExternalName, s.ClusterIps = "ExternalName", "example.com", nil }),
		service("v6", "fd00::10"),
		service("lb", "10.96.0.27", func(s *corev1.ServiceSpec) {
			s.Type = "LoadBalancer"
			s.Ports[0].NodePort = 30090
		}),
	}
	w.slices = []*discoveryv1.EndpointSlice{slice("lb", "lb-1", ep("10.244.1.10", "a")), slice("headless", "h-1", ep("10.244.1.12", "a"))}
	w.sync()
	if n := len(w.fake.Table.Maps[mapServiceIPs].Elements); n != 1 {
		t.Errorf("%d service IPs programmed, want only the LoadBalancer's:\n%s", n, w.fake.Dump())
	}
	w.expect("the LoadBalancer's node port", w.nat(tcp(remote, host, 30090)), dnat(true, "10.244.1.10:8080"))
	var got []string
	for _, n := range w.notes {
		got = append(got, n.svc.Metadata.Name)
	}
	slices.Sort(got)
	if want := []string{"lb", "v6"}; !slices.Equal(got, want) {
		t.Errorf("notes about %v, want %v: %v", got, want, w.notes)
	}
}

func TestResyncRemovesStaleObjects(t *testing.T) {
	w := newWorld(t)
	// What an earlier run left: a chain, a set, a rule in a base chain.
	junk := w.fake.NewTransaction()
	junk.Add(&knftables.Table{})
	junk.Add(&knftables.Chain{Name: "service-OLD"})
	junk.Add(&knftables.Set{Name: "affinity-OLD", Type: "ipv4_addr"})
	junk.Add(&knftables.Rule{Chain: "service-OLD", Rule: "drop"})
	if err := w.fake.Run(context.Background(), junk); err != nil {
		t.Fatal(err)
	}
	w.svcs = []*corev1.Service{service("web", "10.96.0.20"), service("gone", "10.96.0.28", func(s *corev1.ServiceSpec) {
		s.SessionAffinity = "ClientIP"
	})}
	w.slices = []*discoveryv1.EndpointSlice{slice("web", "web-1", ep("10.244.1.10", "a")), slice("gone", "gone-1", ep("10.244.1.13", "a"))}
	w.sync()
	if w.fake.Table.Chains["service-OLD"] != nil || w.fake.Table.Sets["affinity-OLD"] != nil {
		t.Errorf("the first sync kept an earlier run's objects:\n%s", w.fake.Dump())
	}
	w.svcs = w.svcs[:1]
	w.sync()
	if d := w.fake.Dump(); strings.Contains(d, "ns/gone") || strings.Contains(d, "10.244.1.13") {
		t.Errorf("a deleted Service's objects remain:\n%s", d)
	}
	w.expect("the remaining Service", w.nat(tcp(podA, "10.96.0.20", 80)), dnat(false, "10.244.1.10:8080"))
}
