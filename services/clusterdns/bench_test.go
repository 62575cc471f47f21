// This file holds the cluster DNS server's benchmark: queries for a
// ClusterIP Service and a headless Service's endpoints over UDP, against
// a real in-process API service.

package clusterdns_test

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// BenchmarkQueryUDP: one query at a time over UDP, among 50 Services,
// for a ClusterIP Service's A record and a headless Service's 20 ready
// endpoints.
func BenchmarkQueryUDP(b *testing.B) {
	e := start(b)
	const ns = "bench"
	if _, err := e.nss.Create(e.ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	for i := range 50 {
		if _, err := e.svcs.Create(e.ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("svc-%d", i)},
			Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 80}}}}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := e.svcs.Create(e.ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "hl"},
		Spec: &corev1.ServiceSpec{ClusterIp: "None", Ports: []*corev1.ServicePort{{Port: 80}}}}); err != nil {
		b.Fatal(err)
	}
	sl := &discoveryv1.EndpointSlice{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "hl-1", Labels: map[string]string{"kubernetes.io/service-name": "hl"}}, AddressType: "IPv4"}
	for i := range 20 {
		sl.Endpoints = append(sl.Endpoints, &discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.2.0.%d", i+1)}})
	}
	if _, err := e.slices.Create(e.ctx, sl); err != nil {
		b.Fatal(err)
	}
	c := &dns.Client{Net: "udp"}
	for _, tc := range []struct{ name, qname string }{
		{"clusterIP", "svc-7." + ns + ".svc.cluster.local."},
		{"headless-20", "hl." + ns + ".svc.cluster.local."},
	} {
		m := new(dns.Msg).SetQuestion(tc.qname, dns.TypeA)
		for range 1000 { // until the caches have it (bounded)
			if r, _, err := c.Exchange(m, e.addr); err == nil && len(r.Answer) > 0 {
				break
			}
		}
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				r, _, err := c.Exchange(m, e.addr)
				if err != nil || len(r.Answer) == 0 {
					b.Fatalf("%s: %v %v", tc.qname, r, err)
				}
			}
		})
	}
}
