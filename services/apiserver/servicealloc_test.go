// This file holds the tests of Service addressing inside the API service:
// the ranges, two replicas allocating at once on one store, exhaustion, the
// repair of the range records and the kubernetes Service and Endpoints.

package apiserver

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	"github.com/kplane/kplane/services/apiserver/internal/storetest"
)

func TestMemberRanges(t *testing.T) {
	r, err := newIPRange("/registry/", netip.MustParsePrefix("10.96.0.0/12"))
	if err != nil {
		t.Fatal(err)
	}
	if r.size != 1<<20-2 || r.name(0) != "10.96.0.1" || r.name(r.size-1) != "10.111.255.254" {
		t.Errorf("10.96.0.0/12: size %d, first %s, last %s", r.size, r.name(0), r.name(r.size-1))
	}
	if r.static != 256 {
		t.Errorf("static band %d, want Kubernetes' 256", r.static)
	}
	for _, ip := range []string{"10.96.0.0", "10.112.0.0", "10.111.255.255", "abc", "fd00::1"} {
		if i, ok := r.index(ip); ok {
			t.Errorf("%s is member %d; want none", ip, i)
		}
	}
	if i, ok := r.index("10.96.1.0"); !ok || r.name(i) != "10.96.1.0" {
		t.Errorf("10.96.1.0: %d %v", i, ok)
	}
	small, _ := newIPRange("/registry/", netip.MustParsePrefix("10.0.0.0/28"))
	if small.size != 14 || small.static != 0 {
		t.Errorf("/28: size %d static %d", small.size, small.static)
	}
	taken := map[int]bool{}
	for range small.size {
		i, err := small.pick(taken)
		if err != nil || taken[i] {
			t.Fatalf("pick: %d %v", i, err)
		}
		taken[i] = true
	}
	if _, err := small.pick(taken); err != errRangeFull {
		t.Errorf("full range: %v", err)
	}
	v6, _ := newIPRange("/registry/", netip.MustParsePrefix("fd00:10:96::/108"))
	if v6.size != 1<<20-1 || v6.name(0) != "fd00:10:96::1" {
		t.Errorf("IPv6 /108: size %d first %s", v6.size, v6.name(0))
	}
	p := newPortRange("/registry/", DefaultServiceNodePortRange)
	if p.size != 2768 || p.name(0) != "30000" || p.name(p.size-1) != "32767" || p.static != 86 {
		t.Errorf("node ports: size %d, %s-%s, static %d", p.size, p.name(0), p.name(p.size-1), p.static)
	}
	if _, err := ParsePortRange("32767-30000"); err == nil {
		t.Error("a reversed port range parsed")
	}
}

func nodePortService(name string) *corev1.Service {
	return &corev1.Service{Metadata: om("default", name), Spec: &corev1.ServiceSpec{Type: "NodePort", Ports: []*corev1.ServicePort{{Port: 80}}}}
}

// TestConcurrentAllocation: two API service replicas on one store create
// Services at once until the node port range is exhausted; no cluster IP
// or node port is given twice, each held member has exactly one record,
// the Services past the end get Kubernetes' "range is full", and deleting
// every Service gives every member back.
func TestConcurrentAllocation(t *testing.T) {
	eps := storetest.Start(t)
	mod := func(c *Config) {
		c.ServiceClusterIPRange = netip.MustParsePrefix("10.96.0.0/24")
		c.ServiceNodePortRange = PortRange{Base: 30000, Size: 60}
	}
	replicas := []*env{newEnvOn(t, eps, mod), newEnvOn(t, eps, mod)}
	const services = 80
	var (
		mu      sync.Mutex
		created []*corev1.Service
		full    int
		wg      sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := corev1.NewServiceServiceClient(replicas[w%2].conn)
			for i := w; i < services; i += 8 {
				resp, err := cli.CreateService(admin(t), &corev1.CreateServiceRequest{Namespace: "default", Service: nodePortService(fmt.Sprintf("s%d", i))})
				mu.Lock()
				switch {
				case err == nil:
					created = append(created, resp.GetService())
				case strings.Contains(err.Error(), "Internal error occurred: failed to allocate a nodePort: range is full"):
					full++
				default:
					t.Errorf("create s%d: %v", i, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(created) != 60 || full != services-60 {
		t.Fatalf("%d created, %d refused as full; want 60 and %d", len(created), full, services-60)
	}
	ips, ports := map[string]string{}, map[int32]string{}
	for _, s := range created {
		name := s.GetMetadata().GetName()
		ip, np := s.GetSpec().GetClusterIp(), s.GetSpec().GetPorts()[0].GetNodePort()
		if o, dup := ips[ip]; dup || ip == "10.96.0.1" {
			t.Errorf("cluster IP %s given to %s and %s", ip, o, name)
		}
		if o, dup := ports[np]; dup {
			t.Errorf("node port %d given to %s and %s", np, o, name)
		}
		ips[ip], ports[np] = name, name
	}
	srv := replicas[0].srv
	records := func(prefix string) map[string]allocationOwner {
		resp, err := srv.store.cli.Get(t.Context(), prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]allocationOwner{}
		for _, kv := range resp.Kvs {
			o, _ := parseOwner(kv.Value)
			out[strings.TrimPrefix(string(kv.Key), prefix)] = o
		}
		return out
	}
	ipRecords, portRecords := records(srv.svcs.ips.keyPrefix), records(srv.svcs.ports.keyPrefix)
	if len(ipRecords) != len(created)+1 || len(portRecords) != len(created) {
		t.Errorf("%d IP records, %d port records for %d Services (and kubernetes')", len(ipRecords), len(portRecords), len(created))
	}
	for _, s := range created {
		name := s.GetMetadata().GetName()
		if ipRecords[s.GetSpec().GetClusterIp()].Name != name || portRecords[fmt.Sprint(s.GetSpec().GetPorts()[0].GetNodePort())].Name != name {
			t.Errorf("%s's records: %+v, %+v", name, ipRecords[s.GetSpec().GetClusterIp()], portRecords[fmt.Sprint(s.GetSpec().GetPorts()[0].GetNodePort())])
		}
	}
	if res, err := srv.repairServiceAddresses(t.Context()); err != nil || res != (repairResult{}) {
		t.Errorf("repair after the race: %+v %v; want nothing to do", res, err)
	}
	for i, s := range created {
		cli := corev1.NewServiceServiceClient(replicas[i%2].conn)
		if _, err := cli.DeleteService(admin(t), &corev1.DeleteServiceRequest{Namespace: "default", Name: s.GetMetadata().GetName()}); err != nil {
			t.Fatal(err)
		}
	}
	if n, m := len(records(srv.svcs.ips.keyPrefix)), len(records(srv.svcs.ports.keyPrefix)); n != 1 || m != 0 {
		t.Errorf("after deleting every Service: %d IP records (want kubernetes' only), %d port records", n, m)
	}
}

// TestConcurrentIPExhaustion: two replicas racing for the last cluster IPs
// of a small range give each once, and the rest get Kubernetes' 500.
func TestConcurrentIPExhaustion(t *testing.T) {
	eps := storetest.Start(t)
	mod := func(c *Config) { c.ServiceClusterIPRange = netip.MustParsePrefix("10.96.0.0/27") }
	replicas := []*env{newEnvOn(t, eps, mod), newEnvOn(t, eps, mod)}
	const services, free = 40, 29 // 30 addresses, the first the kubernetes Service's
	var (
		mu   sync.Mutex
		ips  = map[string]string{}
		full int
		wg   sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := corev1.NewServiceServiceClient(replicas[w%2].conn)
			for i := w; i < services; i += 8 {
				name := fmt.Sprintf("s%d", i)
				svc := &corev1.Service{Metadata: om("default", name), Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 80}}}}
				resp, err := cli.CreateService(admin(t), &corev1.CreateServiceRequest{Namespace: "default", Service: svc})
				mu.Lock()
				switch {
				case err == nil:
					ip := resp.GetService().GetSpec().GetClusterIp()
					if o, dup := ips[ip]; dup || ip == "10.96.0.1" {
						t.Errorf("cluster IP %s given to %s and %s", ip, o, name)
					}
					ips[ip] = name
				case apierrors.FromError(err).Message == "Internal error occurred: failed to allocate a serviceIP: range is full":
					full++
				default:
					t.Errorf("create %s: %v", name, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(ips) != free || full != services-free {
		t.Errorf("%d created, %d refused as full; want %d and %d", len(ips), full, free, services-free)
	}
}

// TestServiceRepair: a record whose Service is gone (a crash between a
// claim and a Service write, or a store restored from a backup) is
// released; a member a Service holds without a record is recorded; one
// repair does it all, and the next finds nothing.
func TestServiceRepair(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ServiceClusterIPRange = netip.MustParsePrefix("10.96.0.0/24") })
	ctx := admin(t)
	svcs := corev1.NewServiceServiceClient(e.conn)
	resp, err := svcs.CreateService(ctx, &corev1.CreateServiceRequest{Namespace: "default", Service: nodePortService("web")})
	if err != nil {
		t.Fatal(err)
	}
	web := resp.GetService()
	a, cli := e.srv.svcs, e.srv.store.cli
	sctx := t.Context() // the store's client: no API credentials
	stray := a.ips.key("10.96.0.77")
	if _, err := cli.Put(sctx, stray, allocationOwner{Namespace: "default", Name: "gone", UID: "u-gone"}.value()); err != nil {
		t.Fatal(err)
	}
	webIP := a.ips.key(web.GetSpec().GetClusterIp())
	webPort := a.ports.key(fmt.Sprint(web.GetSpec().GetPorts()[0].GetNodePort()))
	for _, k := range []string{webIP, webPort} {
		if _, err := cli.Delete(sctx, k); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.srv.repairServiceAddresses(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if res != (repairResult{recorded: 2, released: 1}) {
		t.Errorf("repair: %+v, want 2 recorded and 1 released", res)
	}
	g, err := cli.Get(sctx, stray)
	if err != nil || len(g.Kvs) != 0 {
		t.Errorf("the stray record is still there: %v %v", g, err)
	}
	for _, k := range []string{webIP, webPort} {
		g, err := cli.Get(sctx, k)
		if err != nil || len(g.Kvs) != 1 {
			t.Fatalf("%s not recorded: %v", k, err)
		}
		if o, _ := parseOwner(g.Kvs[0].Value); o.UID != web.GetMetadata().GetUid() {
			t.Errorf("%s recorded for %+v", k, o)
		}
	}
	if res, err := e.srv.repairServiceAddresses(sctx); err != nil || res != (repairResult{}) {
		t.Errorf("second repair: %+v %v", res, err)
	}
	// The repaired records hold: web's IP is refused to another Service,
	// in a dry run too.
	for _, dry := range [][]string{{"All"}, nil} {
		s := &corev1.Service{Metadata: om("default", "other"), Spec: &corev1.ServiceSpec{ClusterIp: web.GetSpec().GetClusterIp(), Ports: []*corev1.ServicePort{{Port: 80}}}}
		_, err = svcs.CreateService(ctx, &corev1.CreateServiceRequest{Namespace: "default", Service: s, DryRun: dry})
		se := wantReason(t, err, apierrors.ReasonInvalid)
		if want := fmt.Sprintf("spec.clusterIPs: Invalid value: []string{%q}: failed to allocate IP %s: provided IP is already allocated", web.GetSpec().GetClusterIp(), web.GetSpec().GetClusterIp()); !strings.Contains(se.Message, want) {
			t.Errorf("dry run %v: got %q, want %q", dry, se.Message, want)
		}
	}
	// A dry run picks an address but claims none.
	resp, err = svcs.CreateService(ctx, &corev1.CreateServiceRequest{Namespace: "default", Service: nodePortService("dry"), DryRun: []string{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	if ip := resp.GetService().GetSpec().GetClusterIp(); ip == "" {
		t.Error("a dry-run create got no cluster IP")
	} else if g, err := cli.Get(sctx, a.ips.key(ip)); err != nil || len(g.Kvs) != 0 {
		t.Errorf("a dry run claimed %s: %v", ip, err)
	}
}

// TestKubernetesService: the kubernetes Service has the range's first IP,
// port https 443 to the secure port and kube-apiserver's labels; its
// Endpoints list the advertised address; both come back once deleted, and
// a changed port is put back.
func TestKubernetesService(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.ServiceClusterIPRange = netip.MustParsePrefix("10.96.0.0/12")
		c.AdvertiseAddress = netip.MustParseAddr("192.0.2.10")
		c.SecurePort = 2387
	})
	ctx := admin(t)
	svcs, eps := corev1.NewServiceServiceClient(e.conn), corev1.NewEndpointsServiceClient(e.conn)
	slices := discoveryv1.NewEndpointSliceServiceClient(e.conn)
	check := func() {
		t.Helper()
		resp, err := svcs.GetService(ctx, &corev1.GetServiceRequest{Namespace: "default", Name: "kubernetes"})
		if err != nil {
			t.Fatal(err)
		}
		s := resp.GetService()
		if s.GetSpec().GetClusterIp() != "10.96.0.1" || len(s.GetSpec().GetPorts()) != 1 || s.GetSpec().GetPorts()[0].GetName() != "https" ||
			s.GetSpec().GetPorts()[0].GetPort() != 443 || s.GetSpec().GetPorts()[0].GetTargetPort().GetIntVal() != 2387 ||
			s.GetMetadata().GetLabels()["component"] != "apiserver" || s.GetMetadata().GetLabels()["provider"] != "kubernetes" ||
			s.GetSpec().GetIpFamilyPolicy() != "SingleStack" {
			t.Errorf("kubernetes Service: %v %v", s.GetMetadata().GetLabels(), s.GetSpec())
		}
		er, err := eps.GetEndpoints(ctx, &corev1.GetEndpointsRequest{Namespace: "default", Name: "kubernetes"})
		if err != nil {
			t.Fatal(err)
		}
		ss := er.GetEndpoints().GetSubsets()
		if len(ss) != 1 || len(ss[0].GetAddresses()) != 1 || ss[0].GetAddresses()[0].GetIp() != "192.0.2.10" || ss[0].GetPorts()[0].GetPort() != 2387 || ss[0].GetPorts()[0].GetName() != "https" {
			t.Errorf("kubernetes Endpoints: %v", ss)
		}
		// Its EndpointSlice, as kube-apiserver's reconciler writes it.
		sr, err := slices.GetEndpointSlice(ctx, &discoveryv1.GetEndpointSliceRequest{Namespace: "default", Name: "kubernetes"})
		if err != nil {
			t.Fatal(err)
		}
		es := sr.GetEndpointSlice()
		if es.GetAddressType() != "IPv4" || len(es.GetPorts()) != 1 || es.GetPorts()[0].GetName() != "https" || es.GetPorts()[0].GetPort() != 2387 ||
			es.GetPorts()[0].GetProtocol() != "TCP" || len(es.GetEndpoints()) != 1 || es.GetEndpoints()[0].GetAddresses()[0] != "192.0.2.10" ||
			!es.GetEndpoints()[0].GetConditions().GetReady() || len(es.GetMetadata().GetLabels()) != 1 ||
			es.GetMetadata().GetLabels()["kubernetes.io/service-name"] != "kubernetes" {
			t.Errorf("kubernetes EndpointSlice: %v", es)
		}
	}
	check()
	if _, err := svcs.DeleteService(ctx, &corev1.DeleteServiceRequest{Namespace: "default", Name: "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eps.DeleteEndpoints(ctx, &corev1.DeleteEndpointsRequest{Namespace: "default", Name: "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	if _, err := slices.DeleteEndpointSlice(ctx, &discoveryv1.DeleteEndpointSliceRequest{Namespace: "default", Name: "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	ml := &masterLeases{cli: e.srv.store.cli, prefix: e.srv.cfg.Prefix + "masterleases/"}
	reconcile := func() {
		t.Helper()
		if err := e.srv.reconcileKubernetesService(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.srv.reconcileKubernetesEndpoints(t.Context(), ml); err != nil {
			t.Fatal(err)
		}
		if err := e.srv.reconcileKubernetesEndpointSlice(t.Context(), ml); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	check()
	resp, err := svcs.GetService(ctx, &corev1.GetServiceRequest{Namespace: "default", Name: "kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	s := resp.GetService()
	s.Spec.Ports[0].Port = 444
	if _, err := svcs.UpdateService(ctx, &corev1.UpdateServiceRequest{Namespace: "default", Name: "kubernetes", Service: s}); err != nil {
		t.Fatal(err)
	}
	reconcile()
	check()
	// The first IP is the kubernetes Service's: asking for it is refused.
	other := &corev1.Service{Metadata: om("default", "other"), Spec: &corev1.ServiceSpec{ClusterIp: "10.96.0.1", Ports: []*corev1.ServicePort{{Port: 80}}}}
	_, err = svcs.CreateService(ctx, &corev1.CreateServiceRequest{Namespace: "default", Service: other})
	wantReason(t, err, apierrors.ReasonInvalid)
}

// TestTwoThousandServices is issue 24's figure: two replicas creating 2,000
// NodePort Services at once (16 clients) hand out no cluster IP or node
// port twice, and every one has its record (2,000 of the 2,768 node ports:
// many picks collide and are picked again).
func TestTwoThousandServices(t *testing.T) {
	eps := storetest.Start(t)
	mod := func(c *Config) { c.ServiceClusterIPRange = netip.MustParsePrefix("10.96.0.0/12") }
	replicas := []*env{newEnvOn(t, eps, mod), newEnvOn(t, eps, mod)}
	const services, workers = 2000, 16
	var (
		mu    sync.Mutex
		ips   = map[string]bool{}
		ports = map[int32]bool{}
		wg    sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := corev1.NewServiceServiceClient(replicas[w%2].conn)
			for i := w; i < services; i += workers {
				resp, err := cli.CreateService(admin(t), &corev1.CreateServiceRequest{Namespace: "default", Service: nodePortService(fmt.Sprintf("s%d", i))})
				if err != nil {
					t.Errorf("create s%d: %v", i, err)
					return
				}
				ip, np := resp.GetService().GetSpec().GetClusterIp(), resp.GetService().GetSpec().GetPorts()[0].GetNodePort()
				mu.Lock()
				if ips[ip] || ports[np] {
					t.Errorf("s%d got %s/%d, already given", i, ip, np)
				}
				ips[ip], ports[np] = true, true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	srv := replicas[0].srv
	for prefix, want := range map[string]int{srv.svcs.ips.keyPrefix: services + 1, srv.svcs.ports.keyPrefix: services} {
		resp, err := srv.store.cli.Get(t.Context(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != int64(want) {
			t.Errorf("%d records under %s, want %d", resp.Count, prefix, want)
		}
	}
}

// TestKubernetesEndpointSliceOnLoopback: a loopback advertised address (as
// under kplane up) is listed in the kubernetes EndpointSlice as in its
// Endpoints, although a user's slice may not hold one.
func TestKubernetesEndpointSliceOnLoopback(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.ServiceClusterIPRange = netip.MustParsePrefix("10.96.0.0/12")
		c.AdvertiseAddress = netip.MustParseAddr("127.0.0.1")
		c.SecurePort = 2388
	})
	ctx := admin(t)
	ml := &masterLeases{cli: e.srv.store.cli, prefix: e.srv.cfg.Prefix + "masterleases/"}
	if err := e.srv.reconcileKubernetesEndpoints(t.Context(), ml); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.reconcileKubernetesEndpointSlice(t.Context(), ml); err != nil {
		t.Fatal(err)
	}
	slices := discoveryv1.NewEndpointSliceServiceClient(e.conn)
	sr, err := slices.GetEndpointSlice(ctx, &discoveryv1.GetEndpointSliceRequest{Namespace: "default", Name: "kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	if eps := sr.GetEndpointSlice().GetEndpoints(); len(eps) != 1 || eps[0].GetAddresses()[0] != "127.0.0.1" {
		t.Errorf("kubernetes EndpointSlice endpoints: %v", eps)
	}
	bad := &discoveryv1.EndpointSlice{Metadata: om("default", "mine"), AddressType: "IPv4",
		Endpoints: []*discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}}}}
	_, err = slices.CreateEndpointSlice(ctx, &discoveryv1.CreateEndpointSliceRequest{Namespace: "default", EndpointSlice: bad})
	wantReason(t, err, apierrors.ReasonInvalid)
}
