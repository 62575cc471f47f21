// This file holds the computation of one reconcile: the endpoints a
// Service's pods give, grouped by address type and resolved ports, and the
// creates, updates and deletes that bring the existing slices there, in
// the way Kubernetes' reconciler (k8s.io/endpointslice) packs them.
package endpointslice

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	k8scorev1 "k8s.io/api/core/v1"
	k8sdiscoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/dump"
	netutils "k8s.io/utils/net"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/controllers/endpoints"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// changes is what one reconcile writes.
type changes struct {
	create, update, remove []*discoveryv1.EndpointSlice
	// skipped names the pods left out because their node is unknown.
	skipped []string
}

// group is the desired endpoints of one address type and port set.
type group struct {
	ports     []*discoveryv1.EndpointPort
	endpoints map[string]*discoveryv1.Endpoint // by endpointKey
	order     []string                         // keys in pod order
}

// plan computes the changes for svc given the pods its selector matches
// and the slices this controller keeps for it. zone gives a node's zone
// and whether the node exists.
func plan(svc *corev1.Service, pods []*corev1.Pod, existing []*discoveryv1.EndpointSlice, zone func(node string) (string, bool), max int) changes {
	var out changes
	wantLabels := sliceLabels(svc)
	sort.Slice(pods, func(i, j int) bool { return pods[i].GetMetadata().GetName() < pods[j].GetMetadata().GetName() })
	byType := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		if !ownedBy(s, svc) {
			out.remove = append(out.remove, s)
			continue
		}
		byType[s.GetAddressType()] = append(byType[s.GetAddressType()], s)
	}
	types := addressTypes(svc)
	for t, ss := range byType {
		if !slices.Contains(types, t) {
			out.remove = append(out.remove, ss...)
		}
	}
	for _, t := range types {
		groups, skipped := desired(svc, pods, t, zone)
		out.skipped = append(out.skipped, skipped...)
		c := planAddressType(svc, t, byType[t], groups, wantLabels, max)
		out.create = append(out.create, c.create...)
		out.update = append(out.update, c.update...)
		out.remove = append(out.remove, c.remove...)
	}
	return out
}

// planAddressType is the reconcile of one address type, as Kubernetes'
// reconcileByAddressType and reconcileByPortMapping: slices of a port set
// no pod resolves to any more are deleted; the others keep
// the endpoints still wanted (updated in place), lose the others (and are
// deleted once empty); new endpoints go first into slices being updated
// anyway, then into the unchanged slice closest to full that has room for
// all that is left, then into new slices of at most max; with no endpoint
// at all one placeholder slice (no ports, no endpoints) remains.
func planAddressType(svc *corev1.Service, addressType string, existing []*discoveryv1.EndpointSlice, groups map[string]*group, wantLabels map[string]string, max int) changes {
	var out changes
	byPorts := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		k := portsKey(s.GetPorts())
		byPorts[k] = append(byPorts[k], s)
	}
	var keys []string
	for k := range groups {
		keys = append(keys, k)
	}
	// Slices of a port set no endpoint has any more go whole.
	for k, ss := range byPorts {
		if groups[k] == nil {
			out.remove = append(out.remove, ss...)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g := groups[k]
		placed := map[string]bool{}
		var toUpdate, unchanged []*discoveryv1.EndpointSlice
		for _, s := range byPorts[k] {
			var kept []*discoveryv1.Endpoint
			changed := false
			for _, ep := range s.GetEndpoints() {
				ek := endpointKey(ep)
				want, ok := g.endpoints[ek]
				if !ok || placed[ek] {
					changed = true
					continue
				}
				placed[ek] = true
				kept = append(kept, want)
				if !proto.Equal(want, ep) {
					changed = true
				}
			}
			labelsChanged := !maps.Equal(s.GetMetadata().GetLabels(), wantLabels)
			switch {
			case changed && len(kept) == 0:
				out.remove = append(out.remove, s)
			case changed || labelsChanged:
				n := proto.Clone(s).(*discoveryv1.EndpointSlice)
				n.Endpoints = kept
				n.Metadata.Labels = maps.Clone(wantLabels)
				toUpdate = append(toUpdate, n)
			default:
				unchanged = append(unchanged, s)
			}
		}
		var left []*discoveryv1.Endpoint
		for _, ek := range g.order {
			if !placed[ek] {
				left = append(left, g.endpoints[ek])
			}
		}
		// Fullest first, as Kubernetes sorts the slices it fills.
		sort.SliceStable(toUpdate, func(i, j int) bool { return len(toUpdate[i].Endpoints) > len(toUpdate[j].Endpoints) })
		for _, s := range toUpdate {
			for len(left) > 0 && len(s.Endpoints) < max {
				s.Endpoints = append(s.Endpoints, left[0])
				left = left[1:]
			}
		}
		for len(left) > 0 {
			if len(left) < max {
				if i := sliceToFill(unchanged, len(left), max); i >= 0 {
					n := proto.Clone(unchanged[i]).(*discoveryv1.EndpointSlice)
					n.Endpoints = append(n.Endpoints, left...)
					toUpdate = append(toUpdate, n)
					unchanged = slices.Delete(unchanged, i, i+1)
					break
				}
			}
			n := min(len(left), max)
			s := newSlice(svc, addressType, g.ports, wantLabels)
			s.Endpoints = left[:n]
			left = left[n:]
			out.create = append(out.create, s)
		}
		out.update = append(out.update, toUpdate...)
	}
	if len(existing) == len(out.remove) && len(out.create) == 0 {
		placeholder := newSlice(svc, addressType, nil, wantLabels)
		if len(out.remove) == 1 && isPlaceholder(out.remove[0]) {
			out.remove = nil
			if !maps.Equal(existing[0].GetMetadata().GetLabels(), wantLabels) {
				n := proto.Clone(existing[0]).(*discoveryv1.EndpointSlice)
				n.Metadata.Labels = maps.Clone(wantLabels)
				out.update = append(out.update, n)
			}
		} else {
			out.create = append(out.create, placeholder)
		}
	}
	out.recycle(svc)
	return out
}

// recycle turns a create and a delete into an update of the slice that
// would be deleted, as Kubernetes' reconciler does: the placeholder a
// Service's first endpoints replace becomes their slice, so that no reader
// sees both (a placeholder without ports beside the new slice).
func (c *changes) recycle(svc *corev1.Service) {
	for i := 0; i < len(c.remove) && len(c.create) > 0; {
		old := c.remove[i]
		if !ownedBy(old, svc) {
			i++
			continue
		}
		n := c.create[len(c.create)-1]
		c.create = c.create[:len(c.create)-1]
		u := proto.Clone(old).(*discoveryv1.EndpointSlice)
		u.Metadata.Labels = maps.Clone(n.GetMetadata().GetLabels())
		u.Ports, u.Endpoints = n.GetPorts(), n.GetEndpoints()
		c.update = append(c.update, u)
		c.remove = slices.Delete(c.remove, i, i+1)
	}
}

// isPlaceholder: a slice with neither ports nor endpoints.
func isPlaceholder(s *discoveryv1.EndpointSlice) bool {
	return len(s.GetPorts()) == 0 && len(s.GetEndpoints()) == 0
}

// sliceToFill is the index of the slice that is closest to full once n
// endpoints are added without going over max, or -1.
func sliceToFill(ss []*discoveryv1.EndpointSlice, n, max int) int {
	best, bestDiff := -1, max
	for i, s := range ss {
		diff := max - (n + len(s.GetEndpoints()))
		if diff >= 0 && diff < bestDiff {
			best, bestDiff = i, diff
		}
	}
	return best
}

// desired groups the endpoints svc's pods give for addressType by their
// resolved ports. Pods not in endpoints (no IP, finished) and pods without
// an address of the type are left out; so are pods whose node does not
// exist (skipped names them), unless the Service publishes not-ready
// addresses, as Kubernetes does so that such a pod cannot hold a slice
// back.
func desired(svc *corev1.Service, pods []*corev1.Pod, addressType string, zone func(string) (string, bool)) (map[string]*group, []string) {
	groups := map[string]*group{}
	var skipped []string
	for _, p := range pods {
		if !endpoints.PodInEndpoints(p, true) {
			continue
		}
		z, found := zone(p.GetSpec().GetNodeName())
		if !found && !svc.GetSpec().GetPublishNotReadyAddresses() {
			skipped = append(skipped, p.GetMetadata().GetName())
			continue
		}
		ep := podEndpoint(svc, p, addressType, z)
		if len(ep.Addresses) == 0 {
			continue
		}
		ports := sortPorts(endpointPorts(svc, p))
		k := portsKey(ports)
		g := groups[k]
		if g == nil {
			g = &group{ports: ports, endpoints: map[string]*discoveryv1.Endpoint{}}
			groups[k] = g
		}
		ek := endpointKey(ep)
		if _, dup := g.endpoints[ek]; !dup {
			g.order = append(g.order, ek)
		}
		g.endpoints[ek] = ep
	}
	return groups, skipped
}

// podEndpoint is Kubernetes' podToEndpoint: serving is the pod's
// readiness, terminating its deletion, ready serving and not terminating
// (always with publishNotReadyAddresses); node name, the node's zone, the
// hostname when the pod's subdomain is the Service, and a reference to
// the pod.
func podEndpoint(svc *corev1.Service, p *corev1.Pod, addressType, zone string) *discoveryv1.Endpoint {
	serving, _ := ctrl.PodReady(p)
	terminating := p.GetMetadata().GetDeletionTimestamp() != nil
	ready := svc.GetSpec().GetPublishNotReadyAddresses() || (serving && !terminating)
	m := p.GetMetadata()
	ep := &discoveryv1.Endpoint{
		Addresses:  podAddresses(p, addressType),
		Conditions: &discoveryv1.EndpointConditions{Ready: proto.Bool(ready), Serving: proto.Bool(serving), Terminating: proto.Bool(terminating)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: m.GetNamespace(), Name: m.GetName(), Uid: m.GetUid()},
	}
	if n := p.GetSpec().GetNodeName(); n != "" {
		ep.NodeName = proto.String(n)
		if zone != "" {
			ep.Zone = proto.String(zone)
		}
	}
	if h := p.GetSpec().GetHostname(); h != "" && p.GetSpec().GetSubdomain() == svc.GetMetadata().GetName() && m.GetNamespace() == svc.GetMetadata().GetNamespace() {
		ep.Hostname = proto.String(h)
	}
	return ep
}

// podAddresses are the pod's IPs of addressType, in canonical form.
func podAddresses(p *corev1.Pod, addressType string) []string {
	var ips []string
	for _, ip := range p.GetStatus().GetPodIps() {
		ips = append(ips, ip.GetIp())
	}
	if len(ips) == 0 && p.GetStatus().GetPodIp() != "" {
		ips = []string{p.GetStatus().GetPodIp()}
	}
	var out []string
	for _, s := range ips {
		ip := netutils.ParseIPSloppy(s)
		if ip == nil {
			continue
		}
		if v6 := ip.To4() == nil; (v6 && addressType == "IPv6") || (!v6 && addressType == "IPv4") {
			out = append(out, ip.String())
		}
	}
	return out
}

// endpointPorts are the Service's ports resolved against the pod
// (endpoints.FindPort); a headless Service may have none.
func endpointPorts(svc *corev1.Service, p *corev1.Pod) []*discoveryv1.EndpointPort {
	var out []*discoveryv1.EndpointPort
	for _, sp := range svc.GetSpec().GetPorts() {
		port, ok := endpoints.FindPort(p, sp)
		if !ok {
			continue
		}
		protocol := sp.GetProtocol()
		if protocol == "" {
			protocol = "TCP"
		}
		out = append(out, &discoveryv1.EndpointPort{Name: proto.String(sp.GetName()), Port: proto.Int32(port),
			Protocol: proto.String(protocol), AppProtocol: sp.AppProtocol})
	}
	return out
}

// sortPorts orders ports as Kubernetes' NewPortMapKey does (by the hash of
// each port), so that slices list them in the same order.
func sortPorts(ports []*discoveryv1.EndpointPort) []*discoveryv1.EndpointPort {
	h := make(map[*discoveryv1.EndpointPort]string, len(ports))
	for _, p := range ports {
		h[p] = hashOf(k8sdiscoveryv1.EndpointPort{Name: p.Name, Protocol: (*k8scorev1.Protocol)(p.Protocol), Port: p.Port, AppProtocol: p.AppProtocol})
	}
	sort.SliceStable(ports, func(i, j int) bool { return h[ports[i]] < h[ports[j]] })
	return ports
}

func hashOf(v any) string {
	sum := md5.Sum([]byte(fmt.Sprint(dump.ForHash(v))))
	return hex.EncodeToString(sum[:])
}

// portsKey identifies a set of ports (in any order).
func portsKey(ports []*discoveryv1.EndpointPort) string {
	parts := make([]string, 0, len(ports))
	for _, p := range ports {
		parts = append(parts, fmt.Sprintf("%s/%d/%s/%s", p.GetName(), p.GetPort(), p.GetProtocol(), p.GetAppProtocol()))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// endpointKey identifies an endpoint across reconciles as Kubernetes'
// endpoint hash: its addresses, hostname and target.
func endpointKey(ep *discoveryv1.Endpoint) string {
	a := slices.Clone(ep.GetAddresses())
	sort.Strings(a)
	return fmt.Sprintf("%s|%s|%s/%s", strings.Join(a, ","), ep.GetHostname(), ep.GetTargetRef().GetNamespace(), ep.GetTargetRef().GetName())
}

// addressTypes are the slice address types of svc's IP families; a
// Service without families takes its cluster IP's, a headless one both.
func addressTypes(svc *corev1.Service) []string {
	var out []string
	for _, f := range svc.GetSpec().GetIpFamilies() {
		switch f {
		case "IPv4", "IPv6":
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	if ip := netutils.ParseIPSloppy(svc.GetSpec().GetClusterIp()); ip != nil {
		if ip.To4() != nil {
			return []string{"IPv4"}
		}
		return []string{"IPv6"}
	}
	return []string{"IPv4", "IPv6"}
}

// sliceLabels are the labels of svc's slices: the Service's own (without
// the reserved keys), the headless label for a Service without a cluster
// IP, the service name and managed-by.
func sliceLabels(svc *corev1.Service) map[string]string {
	out := map[string]string{}
	for k, v := range svc.GetMetadata().GetLabels() {
		if k == LabelServiceName || k == LabelManagedBy || k == LabelHeadless {
			continue
		}
		out[k] = v
	}
	if ip := svc.GetSpec().GetClusterIp(); ip == "" || ip == "None" {
		out[LabelHeadless] = ""
	}
	out[LabelServiceName] = svc.GetMetadata().GetName()
	out[LabelManagedBy] = ControllerName
	return out
}

// newSlice is a new slice of svc, named by the API service from
// <service>- (or the Service's name when that is too long, as Kubernetes).
func newSlice(svc *corev1.Service, addressType string, ports []*discoveryv1.EndpointPort, labels map[string]string) *discoveryv1.EndpointSlice {
	m := svc.GetMetadata()
	prefix := m.GetName() + "-"
	if len(prefix) > 253 {
		prefix = m.GetName()
	}
	return &discoveryv1.EndpointSlice{ApiVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice",
		Metadata: &metav1.ObjectMeta{Namespace: m.GetNamespace(), GenerateName: prefix, Labels: maps.Clone(labels),
			OwnerReferences: []*metav1.OwnerReference{{ApiVersion: "v1", Kind: "Service", Name: m.GetName(), Uid: m.GetUid(),
				Controller: proto.Bool(true), BlockOwnerDeletion: proto.Bool(true)}}},
		AddressType: addressType, Ports: ports}
}

// ownedBy reports whether s's owner references name svc (by uid).
func ownedBy(s *discoveryv1.EndpointSlice, svc *corev1.Service) bool {
	for _, o := range s.GetMetadata().GetOwnerReferences() {
		if o.GetUid() == svc.GetMetadata().GetUid() && o.GetKind() == "Service" && o.GetApiVersion() == "v1" {
			return true
		}
	}
	return false
}
