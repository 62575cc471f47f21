// This file holds the unit tests of the mirroring plan: the EndpointSlices
// that stand for a selector-less Service's user-written Endpoints.

package endpointslicemirroring

import (
	"fmt"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func testEndpoints(port int32, ips ...string) *corev1.Endpoints {
	ss := &corev1.EndpointSubset{Ports: []*corev1.EndpointPort{{Name: "p", Port: port, Protocol: "TCP"}}}
	for _, ip := range ips {
		ss.Addresses = append(ss.Addresses, &corev1.EndpointAddress{Ip: ip})
	}
	return &corev1.Endpoints{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "ext", Uid: "ep-uid"}, Subsets: []*corev1.EndpointSubset{ss}}
}

// stored names the planned creates as the API service would.
func stored(ss []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	for i, s := range ss {
		s.Metadata.Name = fmt.Sprintf("ext-%d", i)
	}
	return ss
}

func TestPlanMirrors(t *testing.T) {
	create, update, remove := plan(testEndpoints(80, "10.0.0.1", "not-an-ip", "10.0.0.1", "fd00::1"), nil)
	if len(create) != 2 || len(update)+len(remove) != 0 {
		t.Fatalf("first plan: %d creates, %d updates, %d deletes; want 2 creates", len(create), len(update), len(remove))
	}
	for _, s := range create {
		if len(s.GetEndpoints()) != 1 {
			t.Errorf("%s slice endpoints %v, want one (invalid and repeated addresses skipped)", s.GetAddressType(), s.GetEndpoints())
		}
	}
	existing := stored(create)
	// Unchanged: nothing to write.
	if c, u, r := plan(testEndpoints(80, "10.0.0.1", "fd00::1"), existing); len(c)+len(u)+len(r) != 0 {
		t.Fatalf("steady state: %d creates, %d updates, %d deletes; want none", len(c), len(u), len(r))
	}
	// A port change recycles the slices of the old port set (the address
	// type is immutable, so each goes to its own type's new slice).
	c, u, r := plan(testEndpoints(81, "10.0.0.1", "fd00::1"), existing)
	if len(c) != 0 || len(r) != 0 || len(u) != 2 {
		t.Fatalf("port change: %d creates, %d updates, %d deletes; want 2 updates", len(c), len(u), len(r))
	}
	for _, s := range u {
		if s.GetPorts()[0].GetPort() != 81 {
			t.Errorf("recycled slice %s keeps port %d", s.GetMetadata().GetName(), s.GetPorts()[0].GetPort())
		}
	}
	// No subsets: the slices go.
	if c, u, r := plan(&corev1.Endpoints{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "ext"}}, existing); len(c)+len(u) != 0 || len(r) != 2 {
		t.Fatalf("no subsets: %d creates, %d updates, %d deletes; want 2 deletes", len(c), len(u), len(r))
	}
}
