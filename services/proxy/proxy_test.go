// This file holds the Proxier's test against a real in-process API
// service, authenticated as the proxy's identity (so its RBAC is what the
// bootstrap policy grants), writing into knftables' Fake: a Service and
// its slice are programmed, a change of endpoints and a deletion follow,
// the served nodes' pod CIDRs are read from their Nodes, and what is not
// programmed becomes a Warning Event; and changes faster than the minimum
// sync period are coalesced.

package proxy

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/kplane/kplane/internal/testutil"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

func TestProxierFollowsTheAPI(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{TLS: true})
	admin := api.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	fake := knftables.NewFake(knftables.IPv4Family, DefaultTable)
	nodes := client.Must[*corev1.Node](admin)
	for n, cidr := range map[string]string{"a": "10.244.1.0/24", "b": "10.244.2.0/24"} {
		if _, err := nodes.Create(ctx, &corev1.Node{Metadata: &metav1.ObjectMeta{Name: n}, Spec: &corev1.NodeSpec{PodCidr: cidr}}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := New(Config{Conn: api.DialCert(t, User), NFT: fake, NodeNames: []string{"a", "b"}, ClusterCIDR: "10.244.0.0/16",
		MinSyncPeriod: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != context.Canceled {
			t.Errorf("Run: %v", err)
		}
	})
	svcs := client.Must[*corev1.Service](admin)
	sl := client.Must[*discoveryv1.EndpointSlice](admin)
	svc, err := svcs.Create(ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: &corev1.ServiceSpec{Type: "LoadBalancer", InternalTrafficPolicy: ptr("Local"),
			Ports: []*corev1.ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ip := svc.GetSpec().GetClusterIp()
	s := slice("web", "web-1", ep("10.244.1.10", "a"), ep("10.244.2.10", "b"), ep("10.244.3.10", "c"))
	s.Metadata.Namespace = "default"
	if s, err = sl.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	tr := &tracer{t: t, fake: fake}
	// The Fake is written under the proxier's lock; read it under it too.
	natOf := func(pkt packet) []string {
		p.mu.Lock()
		defer p.mu.Unlock()
		if fake.Table == nil || fake.Table.Maps[mapServiceIPs] == nil {
			return nil
		}
		return tr.trace(chainNatPrerouting, pkt)
	}
	testutil.Eventually(t, "the Service programmed, node a's endpoint for its pods", func() (bool, string) {
		got := natOf(tcp(podA, ip, 80))
		return slices.Equal(got, dnat(false, "10.244.1.10:8080")), describe(got)
	})
	testutil.Eventually(t, "the host gets both served nodes' endpoints", func() (bool, string) {
		got := natOf(tcp(host, ip, 80))
		return slices.Equal(got, dnat(true, "10.244.1.10:8080", "10.244.2.10:8080")), describe(got)
	})
	// A new endpoint on node a joins.
	s.Endpoints = append(s.Endpoints, ep("10.244.1.11", "a"))
	if _, err := sl.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the new endpoint programmed", func() (bool, string) {
		got := natOf(tcp(podA, ip, 80))
		return slices.Equal(got, dnat(false, "10.244.1.10:8080", "10.244.1.11:8080")), describe(got)
	})
	// LoadBalancer IPs are not programmed: the Service hears it.
	events := client.Must[*corev1.Event](admin)
	testutil.Eventually(t, "a NotProgrammed Warning on the Service", func() (bool, string) {
		list, _, err := events.List(ctx, "default", client.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range list {
			if e.GetReason() == "NotProgrammed" && e.GetInvolvedObject().GetName() == "web" && e.GetType() == client.EventWarning {
				return true, ""
			}
		}
		return false, "no such event"
	})
	if err := svcs.Delete(ctx, "default", "web", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the deleted Service unprogrammed", func() (bool, string) {
		got := natOf(tcp(podA, ip, 80))
		return slices.Equal(got, []string{"none masq=false"}), describe(got)
	})
	if st := p.Stats(); st.Syncs < 3 || st.Failures != 0 {
		t.Errorf("stats %+v: want several syncs and no failure", st)
	}
}

// describe is a trace's outcomes for a failure message.
func describe(s []string) string { return "got " + strings.Join(s, "; ") }

// TestSyncsCoalesce: changes that come faster than MinSyncPeriod are
// written together, not one sync each.
func TestSyncsCoalesce(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{TLS: true})
	admin := api.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	fake := knftables.NewFake(knftables.IPv4Family, DefaultTable)
	const minSync = 400 * time.Millisecond
	p, err := New(Config{Conn: api.DialCert(t, User), NFT: fake, NodeNames: []string{"a"}, MinSyncPeriod: minSync})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != context.Canceled {
			t.Errorf("Run: %v", err)
		}
	})
	testutil.Eventually(t, "the first sync", func() (bool, string) { return p.Stats().Syncs >= 1, "" })
	start, before := time.Now(), p.Stats().Syncs
	svcs := client.Must[*corev1.Service](admin)
	const n = 12
	for i := range n {
		if _, err := svcs.Create(ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "s" + strconv.Itoa(i)},
			Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "every Service programmed (rejected: none has endpoints)", func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		got := 0
		for _, e := range fake.Table.Maps[mapNoEndpointIPs].Elements {
			if e.Comment != nil && strings.HasPrefix(*e.Comment, "default/s") {
				got++
			}
		}
		return got == n, fmt.Sprintf("%d of %d", got, n)
	})
	syncs, elapsed := p.Stats().Syncs-before, time.Since(start)
	t.Logf("%d syncs for %d Services created in %s", syncs, n, elapsed)
	if limit := int64(elapsed/minSync) + 2; syncs > limit || syncs >= n {
		t.Errorf("%d syncs for %d changes in %s with a min sync period of %s: want at most %d", syncs, n, elapsed, minSync, limit)
	}
}
