// This file holds the tests on the real kernel (root and nft needed):
// the table the proxy computes is accepted by nftables as written, a
// resync replaces it in place, and a cleanup deletes it.

package proxy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/kplane/kplane/internal/testutil"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
)

// realTable returns a handle on a table of the test's own on this
// kernel, deleted when the test ends.
func realTable(t *testing.T) (knftables.Interface, string) {
	t.Helper()
	testutil.RequireRoot(t, "nftables tables need root")
	testutil.RequireBinary(t, "nft", "apt-get install -y nftables")
	name := fmt.Sprintf("kplane-proxy-test-%d", os.Getpid())
	nft, err := knftables.New(knftables.IPv4Family, name)
	if err != nil {
		t.Fatalf("nftables: %v", err)
	}
	t.Cleanup(func() {
		if err := DeleteTable(context.Background(), nft); err != nil {
			t.Errorf("delete table %s: %v", name, err)
		}
		if out, _ := exec.Command("nft", "list", "tables").CombinedOutput(); strings.Contains(string(out), name) {
			t.Errorf("table %s left behind:\n%s", name, out)
		}
	})
	return nft, name
}

// fixture is a Service of every kind the rules distinguish.
func fixture() ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	svcs := []*corev1.Service{
		service("web", "10.96.0.20"),
		service("empty", "10.96.0.22", func(s *corev1.ServiceSpec) { s.Type = "NodePort"; s.Ports[0].NodePort = 30022 }),
		service("np", "10.96.0.24", func(s *corev1.ServiceSpec) {
			s.Type, s.ExternalTrafficPolicy = "NodePort", "Local"
			s.Ports[0].NodePort = 30081
		}),
		service("itp", "10.96.0.25", func(s *corev1.ServiceSpec) { s.InternalTrafficPolicy = ptr("Local") }),
		service("sticky", "10.96.0.26", func(s *corev1.ServiceSpec) { s.SessionAffinity = "ClientIP" }),
	}
	slices := []*discoveryv1.EndpointSlice{
		slice("web", "web-1", ep("10.244.1.10", "a"), ep("10.244.2.10", "b")),
		slice("np", "np-1", ep("10.244.3.10", "c")),
		slice("itp", "itp-1", ep("10.244.1.10", "a")),
		slice("sticky", "sticky-1", ep("10.244.1.10", "a"), ep("10.244.2.10", "b", false, true, true)),
	}
	return svcs, slices
}

func TestKernelAcceptsTheTable(t *testing.T) {
	nft, name := realTable(t)
	ctx := context.Background()
	svcs, sl := fixture()
	write := func(fresh bool) {
		t.Helper()
		ports, _ := buildModel(svcs, func(ns, svc string) []*discoveryv1.EndpointSlice {
			var out []*discoveryv1.EndpointSlice
			for _, s := range sl {
				if s.Metadata.Labels[LabelServiceName] == svc {
					out = append(out, s)
				}
			}
			return out
		})
		var ex existing
		if !fresh {
			var err error
			if ex, err = listExisting(ctx, nft); err != nil {
				t.Fatal(err)
			}
		}
		tx := nft.NewTransaction()
		fillTransaction(tx, buildRuleset(ports, testTopo), fresh, ex)
		if err := nft.Run(ctx, tx); err != nil {
			t.Fatalf("nft: %v\n%s", err, tx)
		}
	}
	write(true)
	write(false) // a resync of the same
	svcs = svcs[:2]
	write(false) // three Services gone: their chains and sets go
	out, err := exec.Command("nft", "list", "table", "ip", name).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	for _, gone := range []string{"ns/np/", "ns/itp/", "ns/sticky/", "affinity-"} {
		if strings.Contains(string(out), gone) {
			t.Errorf("%q still in the table after its Service went:\n%s", gone, out)
		}
	}
	if !strings.Contains(string(out), "ns/web/tcp/http") {
		t.Errorf("the remaining Service's chain is missing:\n%s", out)
	}
	write(true) // a restart's first sync over an existing table
}
