// This file holds the cluster DNS server's tests against a real in-process
// API service, authenticated as the DNS identity: the records of ClusterIP,
// headless and ExternalName Services, SRV, PTR, pod names, NXDOMAIN and
// NODATA, over UDP and TCP, changes seen after updates and deletes, and
// forwarding or refusing names outside the zone.

package clusterdns_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/apiserver/authz"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/clusterdns"
)

// waitLimit bounds the waits for a change to reach the server's caches.
const waitLimit = 30 * time.Second

type env struct {
	ctx    context.Context
	addr   string
	svcs   *client.Client[*corev1.Service]
	slices *client.Client[*discoveryv1.EndpointSlice]
	nss    *client.Client[*corev1.Namespace]
}

// start runs an API service and a DNS server (identity system:kplane-dns)
// with the given upstreams.
func start(t testing.TB, upstreams ...string) *env {
	t.Helper()
	return startWith(t, nil, upstreams...)
}

// startWith is start with mod applied to the server's Config.
func startWith(t testing.TB, mod func(*clusterdns.Config), upstreams ...string) *env {
	t.Helper()
	api := apiservertest.Start(t, apiservertest.Options{TLS: true})
	admin := api.Dial(t, apiservertest.AdminToken)
	cfg := clusterdns.Config{Conn: api.DialCert(t, authz.DNSUser), Addr: "127.0.0.1:0", Upstreams: upstreams}
	if mod != nil {
		mod(&cfg)
	}
	s, err := clusterdns.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil && err != context.Canceled {
			t.Errorf("Run: %v", err)
		}
	})
	e := &env{ctx: ctx, addr: s.Addr(), svcs: client.Must[*corev1.Service](admin),
		slices: client.Must[*discoveryv1.EndpointSlice](admin), nss: client.Must[*corev1.Namespace](admin)}
	return e
}

// query asks name/qtype over netw (udp or tcp), retrying while the server
// is not yet serving.
func (e *env) query(t *testing.T, netw, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: netw, Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	var lastErr error
	for range 50 {
		r, _, err := c.Exchange(m, e.addr)
		if err == nil {
			return r
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("query %s %s over %s: %v", name, dns.TypeToString[qtype], netw, lastErr)
	return nil
}

// summary prints an answer as "RCODE rr1 | rr2..." with each record's data
// (no TTL), sorted.
func summary(r *dns.Msg) string {
	var rrs []string
	for _, rr := range r.Answer {
		rrs = append(rrs, rdata(rr))
	}
	sort.Strings(rrs)
	return strings.TrimSpace(dns.RcodeToString[r.Rcode] + " " + strings.Join(rrs, " | "))
}

func rdata(rr dns.RR) string {
	switch v := rr.(type) {
	case *dns.A:
		return "A " + v.A.String()
	case *dns.AAAA:
		return "AAAA " + v.AAAA.String()
	case *dns.CNAME:
		return "CNAME " + v.Target
	case *dns.SRV:
		return fmt.Sprintf("SRV %d %s", v.Port, v.Target)
	case *dns.PTR:
		return "PTR " + v.Ptr
	case *dns.TXT:
		return "TXT " + strings.Join(v.Txt, ",")
	}
	return rr.String()
}

// eventually polls query until its summary is want.
func (e *env) eventually(t *testing.T, netw, name string, qtype uint16, want string) {
	t.Helper()
	what := fmt.Sprintf("%s %s over %s to answer %q", name, dns.TypeToString[qtype], netw, want)
	testutil.EventuallyWithin(t, waitLimit, what, func() (bool, string) {
		got := summary(e.query(t, netw, name, qtype))
		return got == want, fmt.Sprintf("%q", got)
	})
}

func ptr[T any](v T) *T { return &v }

func (e *env) namespace(t *testing.T, name string) {
	t.Helper()
	if _, err := e.nss.Create(e.ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

func TestClusterDNSRecords(t *testing.T) {
	e := start(t)
	const ns = "dnstest"
	e.namespace(t, ns)
	web, err := e.svcs.Create(e.ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}, {Name: "dns", Port: 53, Protocol: "UDP"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ip := web.GetSpec().GetClusterIp()
	if net.ParseIP(ip) == nil {
		t.Fatalf("web got cluster IP %q", ip)
	}
	if _, err := e.svcs.Create(e.ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: &corev1.ServiceSpec{ClusterIp: "None", Ports: []*corev1.ServicePort{{Name: "pg", Port: 5432}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svcs.Create(e.ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "ext"},
		Spec: &corev1.ServiceSpec{Type: "ExternalName", ExternalName: "example.com"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.slices.Create(e.ctx, &discoveryv1.EndpointSlice{
		Metadata:    &metav1.ObjectMeta{Namespace: ns, Name: "db-1", Labels: map[string]string{"kubernetes.io/service-name": "db"}},
		AddressType: "IPv4",
		Ports:       []*discoveryv1.EndpointPort{{Name: ptr("pg"), Protocol: ptr("TCP"), Port: ptr(int32(5432))}},
		Endpoints: []*discoveryv1.Endpoint{
			{Addresses: []string{"10.244.0.5"}, Hostname: ptr("db-0"), Conditions: &discoveryv1.EndpointConditions{Ready: ptr(true)}},
			{Addresses: []string{"10.244.0.6"}, Conditions: &discoveryv1.EndpointConditions{}},
			{Addresses: []string{"10.244.0.7"}, Hostname: ptr("db-2"), Conditions: &discoveryv1.EndpointConditions{Ready: ptr(false)}},
		}}); err != nil {
		t.Fatal(err)
	}
	z := ".cluster.local."
	webName, dbName := "web."+ns+".svc"+z[:len(z)-1], "db."+ns+".svc"+z[:len(z)-1]
	e.eventually(t, "udp", dbName, dns.TypeA, "NOERROR A 10.244.0.5 | A 10.244.0.6")
	rev := func(ip string) string { r, _ := dns.ReverseAddr(ip); return r }
	tests := []struct {
		name  string
		qname string
		qtype uint16
		want  string
	}{
		{name: "ClusterIP A", qname: webName, qtype: dns.TypeA, want: "NOERROR A " + ip},
		{name: "ClusterIP AAAA is NODATA", qname: webName, qtype: dns.TypeAAAA, want: "NOERROR"},
		{name: "ClusterIP SRV of a named port", qname: "_http._tcp." + webName, qtype: dns.TypeSRV, want: "NOERROR SRV 80 " + webName + "."},
		{name: "ClusterIP SRV over UDP", qname: "_dns._udp." + webName, qtype: dns.TypeSRV, want: "NOERROR SRV 53 " + webName + "."},
		{name: "SRV of a missing port", qname: "_https._tcp." + webName, qtype: dns.TypeSRV, want: "NXDOMAIN"},
		{name: "SRV with the wrong protocol", qname: "_http._udp." + webName, qtype: dns.TypeSRV, want: "NXDOMAIN"},
		{name: "SRV name, A query is NODATA", qname: "_http._tcp." + webName, qtype: dns.TypeA, want: "NOERROR"},
		{name: "ClusterIP PTR", qname: rev(ip), qtype: dns.TypePTR, want: "NOERROR PTR " + webName + "."},
		{name: "headless A: ready endpoints", qname: dbName, qtype: dns.TypeA, want: "NOERROR A 10.244.0.5 | A 10.244.0.6"},
		{name: "headless hostname", qname: "db-0." + dbName, qtype: dns.TypeA, want: "NOERROR A 10.244.0.5"},
		{name: "headless dashed address", qname: "10-244-0-6." + dbName, qtype: dns.TypeA, want: "NOERROR A 10.244.0.6"},
		{name: "not-ready endpoint has no name", qname: "db-2." + dbName, qtype: dns.TypeA, want: "NXDOMAIN"},
		{name: "headless SRV", qname: "_pg._tcp." + dbName, qtype: dns.TypeSRV, want: "NOERROR SRV 5432 10-244-0-6." + dbName + ". | SRV 5432 db-0." + dbName + "."},
		{name: "headless endpoint PTR", qname: rev("10.244.0.5"), qtype: dns.TypePTR, want: "NOERROR PTR db-0." + dbName + "."},
		{name: "ExternalName CNAME", qname: "ext." + ns + ".svc.cluster.local", qtype: dns.TypeA, want: "NOERROR CNAME example.com."},
		{name: "pod A", qname: "10-244-1-9." + ns + ".pod.cluster.local", qtype: dns.TypeA, want: "NOERROR A 10.244.1.9"},
		{name: "pod A in a missing namespace", qname: "10-244-1-9.nope.pod.cluster.local", qtype: dns.TypeA, want: "NXDOMAIN"},
		{name: "missing Service", qname: "nope." + ns + ".svc.cluster.local", qtype: dns.TypeA, want: "NXDOMAIN"},
		{name: "namespace is NODATA", qname: ns + ".svc.cluster.local", qtype: dns.TypeA, want: "NOERROR"},
		{name: "missing namespace", qname: "nope.svc.cluster.local", qtype: dns.TypeA, want: "NXDOMAIN"},
		{name: "svc is NODATA", qname: "svc.cluster.local", qtype: dns.TypeA, want: "NOERROR"},
		{name: "dns-version", qname: "dns-version.cluster.local", qtype: dns.TypeTXT, want: "NOERROR TXT " + clusterdns.SchemaVersion},
		{name: "outside the zone is refused without upstreams", qname: "example.com", qtype: dns.TypeA, want: "REFUSED"},
		{name: "unknown reverse address is refused without upstreams", qname: rev("192.0.2.1"), qtype: dns.TypePTR, want: "REFUSED"},
	}
	for _, tc := range tests {
		for _, netw := range []string{"udp", "tcp"} {
			t.Run(tc.name+"/"+netw, func(t *testing.T) {
				r := e.query(t, netw, tc.qname, tc.qtype)
				got := summary(r)
				if got != tc.want {
					t.Errorf("%s %s: got %q, want %q", tc.qname, dns.TypeToString[tc.qtype], got, tc.want)
				}
				if r.Rcode != dns.RcodeRefused && (len(r.Answer) == 0) != (len(r.Ns) == 1) {
					t.Errorf("%s: got %d answers and authority %v, want the SOA in the authority section exactly when there is no answer", tc.qname, len(r.Answer), r.Ns)
				}
				for _, rr := range r.Answer {
					if rr.Header().Ttl != 30 {
						t.Errorf("%s: got TTL %d, want 30", rr.String(), rr.Header().Ttl)
					}
				}
				if r.Rcode != dns.RcodeRefused && !r.Authoritative {
					t.Errorf("%s: got a non-authoritative answer from the zone", tc.qname)
				}
			})
		}
	}

	t.Run("SRV additional section has the targets' addresses", func(t *testing.T) {
		r := e.query(t, "udp", "_pg._tcp."+dbName, dns.TypeSRV)
		var got []string
		for _, rr := range r.Extra {
			if a, ok := rr.(*dns.A); ok {
				got = append(got, a.Hdr.Name+"="+a.A.String())
			}
		}
		sort.Strings(got)
		want := []string{"10-244-0-6." + dbName + ".=10.244.0.6", "db-0." + dbName + ".=10.244.0.5"}
		if !slices.Equal(got, want) {
			t.Errorf("got extra %v, want %v", got, want)
		}
	})

	t.Run("changes and deletes are seen", func(t *testing.T) {
		sl, err := e.slices.Get(e.ctx, ns, "db-1")
		if err != nil {
			t.Fatal(err)
		}
		sl.Endpoints[2].Conditions.Ready = ptr(true)
		if _, err := e.slices.Update(e.ctx, sl); err != nil {
			t.Fatal(err)
		}
		e.eventually(t, "tcp", "db-2."+dbName, dns.TypeA, "NOERROR A 10.244.0.7")
		if err := e.slices.Delete(e.ctx, ns, "db-1", client.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// A headless Service without ready endpoints does not resolve.
		e.eventually(t, "udp", dbName, dns.TypeA, "NXDOMAIN")
		ext, err := e.svcs.Get(e.ctx, ns, "ext")
		if err != nil {
			t.Fatal(err)
		}
		ext.Spec.ExternalName = "example.org"
		if _, err := e.svcs.Update(e.ctx, ext); err != nil {
			t.Fatal(err)
		}
		e.eventually(t, "udp", "ext."+ns+".svc.cluster.local", dns.TypeA, "NOERROR CNAME example.org.")
		if err := e.svcs.Delete(e.ctx, ns, "web", client.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.eventually(t, "udp", webName, dns.TypeA, "NXDOMAIN")
		e.eventually(t, "udp", rev(ip), dns.TypePTR, "REFUSED")
	})
}

// TestClusterDNSForwards: names outside the zone go to the upstream and
// its answer comes back, over UDP and TCP.
func TestClusterDNSForwards(t *testing.T) {
	up := upstream(t)
	e := start(t, up)
	for _, netw := range []string{"udp", "tcp"} {
		if got, want := summary(e.query(t, netw, "example.com", dns.TypeA)), "NOERROR A 192.0.2.10"; got != want {
			t.Errorf("example.com over %s: got %q, want %q", netw, got, want)
		}
		if got, want := summary(e.query(t, netw, "missing.example.com", dns.TypeA)), "NXDOMAIN"; got != want {
			t.Errorf("missing.example.com over %s: got %q, want %q", netw, got, want)
		}
	}
	// The zone is still answered by the server itself.
	if got, want := summary(e.query(t, "udp", "nope.default.svc.cluster.local", dns.TypeA)), "NXDOMAIN"; got != want {
		t.Errorf("in-zone name: got %q, want %q", got, want)
	}
}

// upstream runs a loopback name server (UDP and TCP) that knows only
// example.com. A 192.0.2.10.
func upstream(t *testing.T) string {
	t.Helper()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if r.Question[0].Name == "example.com." && r.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "example.com.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP("192.0.2.10")}}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		pc.Close()
		t.Skipf("upstream's TCP port taken: %v", err)
	}
	us, ts := &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: l, Handler: h}
	go func() { _ = us.ActivateAndServe() }()
	go func() { _ = ts.ActivateAndServe() }()
	t.Cleanup(func() { _ = us.Shutdown(); _ = ts.Shutdown() })
	return pc.LocalAddr().String()
}

// TestDNSIdentityRBAC: the DNS identity (system:kplane-dns, bound to
// system:coredns) may list what it watches and nothing more: no reads of
// Secrets, no writes.
func TestDNSIdentityRBAC(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{TLS: true})
	conn := api.DialCert(t, authz.DNSUser)
	ctx := context.Background()
	if _, _, err := client.Must[*corev1.Service](conn).List(ctx, "", client.ListOptions{}); err != nil {
		t.Errorf("list services: %v", err)
	}
	if _, _, err := client.Must[*discoveryv1.EndpointSlice](conn).List(ctx, "", client.ListOptions{}); err != nil {
		t.Errorf("list endpointslices: %v", err)
	}
	if _, _, err := client.Must[*corev1.Namespace](conn).List(ctx, "", client.ListOptions{}); err != nil {
		t.Errorf("list namespaces: %v", err)
	}
	if _, _, err := client.Must[*corev1.Pod](conn).List(ctx, "", client.ListOptions{}); err != nil {
		t.Errorf("list pods: %v", err)
	}
	w, err := client.Must[*corev1.Service](conn).Watch(ctx, "", client.ListOptions{})
	if err != nil {
		t.Errorf("watch services: %v", err)
	} else {
		w.Close()
	}
	if _, _, err := client.Must[*corev1.Secret](conn).List(ctx, "", client.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list secrets: got %v, want Forbidden", err)
	}
	if _, err := client.Must[*corev1.Service](conn).Get(ctx, "default", "kubernetes"); !apierrors.IsForbidden(err) {
		t.Errorf("get a service (the role has list and watch only, as CoreDNS's): got %v, want Forbidden", err)
	}
	_, err = client.Must[*corev1.Service](conn).Create(ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "x"},
		Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 80}}}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("create a service: got %v, want Forbidden", err)
	}
}

// TestClusterDNSTruncatesUDP: a headless Service with more endpoints than
// fit in 512 bytes is truncated over UDP (TC set, as a client then retries
// over TCP) and answered whole over TCP.
func TestClusterDNSTruncatesUDP(t *testing.T) {
	e := start(t)
	const ns, n = "big", 100
	e.namespace(t, ns)
	if _, err := e.svcs.Create(e.ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "many"},
		Spec: &corev1.ServiceSpec{ClusterIp: "None", Ports: []*corev1.ServicePort{{Port: 80}}}}); err != nil {
		t.Fatal(err)
	}
	sl := &discoveryv1.EndpointSlice{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "many-1", Labels: map[string]string{"kubernetes.io/service-name": "many"}},
		AddressType: "IPv4"}
	for i := range n {
		sl.Endpoints = append(sl.Endpoints, &discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.1.%d.%d", i/200, i%200+1)}})
	}
	if _, err := e.slices.Create(e.ctx, sl); err != nil {
		t.Fatal(err)
	}
	name := "many." + ns + ".svc.cluster.local"
	deadline := time.Now().Add(waitLimit)
	for {
		r := e.query(t, "tcp", name, dns.TypeA)
		if len(r.Answer) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("over TCP: got %d answers, want %d", len(r.Answer), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	m := new(dns.Msg).SetQuestion(name+".", dns.TypeA)
	r, _, err := c.Exchange(m, e.addr)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Truncated || len(r.Answer) >= n {
		t.Errorf("over UDP: got TC=%t with %d answers, want TC with fewer than %d", r.Truncated, len(r.Answer), n)
	}
}

// TestClusterDNSIPv6AndNotReady: IPv6 endpoints answer AAAA (and their
// ip6.arpa PTR), IPv6 pod names, and publishNotReadyAddresses publishes
// endpoints that are not ready.
func TestClusterDNSIPv6AndNotReady(t *testing.T) {
	e := start(t)
	const ns = "six"
	e.namespace(t, ns)
	if _, err := e.svcs.Create(e.ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "peers"},
		Spec: &corev1.ServiceSpec{ClusterIp: "None", PublishNotReadyAddresses: true, Ports: []*corev1.ServicePort{{Name: "gossip", Port: 7000}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.slices.Create(e.ctx, &discoveryv1.EndpointSlice{
		Metadata:    &metav1.ObjectMeta{Namespace: ns, Name: "peers-1", Labels: map[string]string{"kubernetes.io/service-name": "peers"}},
		AddressType: "IPv6",
		Endpoints: []*discoveryv1.Endpoint{
			{Addresses: []string{"fd00::5"}, Hostname: ptr("peer-0"), Conditions: &discoveryv1.EndpointConditions{Ready: ptr(false)}},
		}}); err != nil {
		t.Fatal(err)
	}
	name := "peers." + ns + ".svc.cluster.local"
	e.eventually(t, "udp", name, dns.TypeAAAA, "NOERROR AAAA fd00::5")
	rev, _ := dns.ReverseAddr("fd00::5")
	for _, tc := range []struct {
		qname string
		qtype uint16
		want  string
	}{
		{qname: name, qtype: dns.TypeA, want: "NOERROR"},
		{qname: "peer-0." + name, qtype: dns.TypeAAAA, want: "NOERROR AAAA fd00::5"},
		{qname: rev, qtype: dns.TypePTR, want: "NOERROR PTR peer-0." + name + "."},
		{qname: "fd00--7." + ns + ".pod.cluster.local", qtype: dns.TypeAAAA, want: "NOERROR AAAA fd00::7"},
		{qname: "fd00--7." + ns + ".pod.cluster.local", qtype: dns.TypeA, want: "NOERROR"},
	} {
		if got := summary(e.query(t, "tcp", tc.qname, tc.qtype)); got != tc.want {
			t.Errorf("%s %s: got %q, want %q", tc.qname, dns.TypeToString[tc.qtype], got, tc.want)
		}
	}
}

// TestFreeBindServes binds with IP_FREEBIND (as `kplane up` binds a pod
// bridge's address before the bridge exists) and answers over UDP and
// TCP.
func TestFreeBindServes(t *testing.T) {
	e := startWith(t, func(c *clusterdns.Config) { c.FreeBind = true })
	for _, netw := range []string{"udp", "tcp"} {
		if r := e.query(t, netw, "dns-version.cluster.local", dns.TypeTXT); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Errorf("%s: dns-version over a freebind socket: %v", netw, r)
		}
	}
}
