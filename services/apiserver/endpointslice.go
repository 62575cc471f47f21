// This file holds what the API service does with discovery.k8s.io/v1
// EndpointSlices beyond the generic registry: Kubernetes' defaults (a port's
// name "" and protocol TCP), what its strategy drops on a v1 write
// (deprecatedTopology, and node hints while PreferSameTrafficDistribution is
// off, as it is by default in v1.33), the generation bump on a label change,
// and its validation with the field paths and messages of kube-apiserver
// v1.33.13; and the default/kubernetes slice kube-apiserver's endpoint
// reconciler keeps.
package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"

	"github.com/kplane/kplane/proto/apierrors"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// Kubernetes' limits on an EndpointSlice.
const (
	maxSliceEndpoints      = 1000
	maxEndpointAddresses   = 100
	maxSlicePorts          = 20000
	maxTopologyLabels      = 16
	maxEndpointZoneHints   = 8
	maxEndpointNodeHints   = 8
	endpointSliceIPv4      = "IPv4"
	endpointSliceIPv6      = "IPv6"
	endpointSliceFQDN      = "FQDN"
	topologyZoneLabelKey   = "topology.kubernetes.io/zone"
	legacyHostnameLabelKey = "kubernetes.io/hostname"
)

// defaultEndpointSlice is Kubernetes' SetDefaults_EndpointPort for every
// port: an unset name is "", an unset protocol TCP.
func defaultEndpointSlice(o *discoveryv1.EndpointSlice) {
	for _, p := range o.Ports {
		if p == nil {
			continue
		}
		if p.Name == nil {
			p.Name = proto.String("")
		}
		if p.Protocol == nil {
			p.Protocol = proto.String("TCP")
		}
	}
}

// prepareEndpointSliceWrite is the strategy's PrepareForCreate and
// PrepareForUpdate (old nil on create) for a v1 request, the only version
// kplane serves: deprecatedTopology is dropped (v1 cannot write it; a
// hostname label naming a node the old slice already listed becomes
// nodeName), node hints are dropped unless the old slice had some (the
// PreferSameTrafficDistribution gate is off), and a label change bumps the
// generation as a change of anything but metadata does.
func prepareEndpointSliceWrite(o, old *discoveryv1.EndpointSlice) {
	if old != nil && !labelsEqual(meta(o).GetLabels(), meta(old).GetLabels()) && specEqual(o, old) {
		meta(o).Generation++
	}
	keepNodeHints := false
	for _, ep := range old.GetEndpoints() {
		if len(ep.GetHints().GetForNodes()) > 0 {
			keepNodeHints = true
		}
	}
	if !keepNodeHints {
		for _, ep := range o.Endpoints {
			if ep.GetHints() != nil {
				ep.Hints.ForNodes = nil
			}
		}
	}
	if old != nil && endpointsEqual(o.Endpoints, old.Endpoints) {
		return
	}
	prev := map[string]bool{}
	for _, ep := range old.GetEndpoints() {
		if n := ep.GetDeprecatedTopology()[legacyHostnameLabelKey]; n != "" {
			prev[n] = true
		}
	}
	for _, ep := range o.Endpoints {
		if ep == nil {
			continue
		}
		if n, ok := ep.DeprecatedTopology[legacyHostnameLabelKey]; ok && ep.NodeName == nil && prev[n] && len(validation.IsDNS1123Subdomain(n)) == 0 {
			ep.NodeName = proto.String(n)
		}
		ep.DeprecatedTopology = nil
	}
}

func labelsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func endpointsEqual(a, b []*discoveryv1.Endpoint) bool {
	return slices.EqualFunc(a, b, func(x, y *discoveryv1.Endpoint) bool { return proto.Equal(x, y) })
}

// validateEndpointSlice is Kubernetes' ValidateEndpointSlice (and, with
// old, ValidateEndpointSliceUpdate) after the metadata: the address type,
// the ports, then the endpoints, whose errors an update that leaves the
// endpoints as they were does not report (older versions accepted them).
func validateEndpointSlice(o, old *discoveryv1.EndpointSlice) field.ErrorList {
	var errs field.ErrorList
	at := field.NewPath("addressType")
	switch o.GetAddressType() {
	case "":
		errs = append(errs, field.Required(at, ""))
	case endpointSliceIPv4, endpointSliceIPv6, endpointSliceFQDN:
	default:
		errs = append(errs, field.NotSupported(at, o.GetAddressType(), []string{endpointSliceFQDN, endpointSliceIPv4, endpointSliceIPv6}))
	}
	errs = append(errs, validateSlicePorts(o.GetPorts(), field.NewPath("ports"))...)
	epErrs := validateSliceEndpoints(o.GetEndpoints(), o.GetAddressType(), field.NewPath("endpoints"))
	if len(epErrs) > 0 && old != nil && endpointsEqual(o.GetEndpoints(), old.GetEndpoints()) {
		epErrs = nil
	}
	errs = append(errs, epErrs...)
	if old != nil && o.GetAddressType() != old.GetAddressType() {
		errs = append(errs, field.Invalid(at, o.GetAddressType(), "field is immutable"))
	}
	return errs
}

func validateSliceEndpoints(eps []*discoveryv1.Endpoint, addressType string, p *field.Path) field.ErrorList {
	if len(eps) > maxSliceEndpoints {
		return field.ErrorList{field.TooMany(p, len(eps), maxSliceEndpoints)}
	}
	var errs field.ErrorList
	for i, ep := range eps {
		ip := p.Index(i)
		ap := ip.Child("addresses")
		switch n := len(ep.GetAddresses()); {
		case n == 0:
			errs = append(errs, field.Required(ap, "must contain at least 1 address"))
		case n > maxEndpointAddresses:
			errs = append(errs, field.TooMany(ap, n, maxEndpointAddresses))
		}
		for j, a := range ep.GetAddresses() {
			errs = append(errs, validateSliceAddress(a, addressType, ap, ap.Index(j))...)
		}
		if ep.NodeName != nil {
			for _, msg := range validation.IsDNS1123Subdomain(ep.GetNodeName()) {
				errs = append(errs, field.Invalid(ip.Child("nodeName"), ep.GetNodeName(), msg))
			}
		}
		tp := ip.Child("deprecatedTopology")
		if len(ep.GetDeprecatedTopology()) > maxTopologyLabels {
			errs = append(errs, field.TooMany(tp, len(ep.GetDeprecatedTopology()), maxTopologyLabels))
		}
		errs = append(errs, validateLabels(ep.GetDeprecatedTopology(), tp)...)
		if ep.Hostname != nil {
			for _, msg := range validation.IsDNS1123Label(ep.GetHostname()) {
				errs = append(errs, field.Invalid(ip.Child("hostname"), ep.GetHostname(), msg))
			}
		}
		if ep.Hints != nil {
			errs = append(errs, validateEndpointHints(ep.Hints, ip.Child("hints"))...)
		}
	}
	return errs
}

// validateSliceAddress checks one address by the slice's type. An IPv4
// address is parsed as the legacy fields are (leading zeros allowed while
// StrictIPCIDRValidation is off), then must be IPv4 and usable as an
// endpoint; an IPv6 one must be a valid IP of that family; an FQDN a fully
// qualified name. Unknown types are not checked (addressType says why).
// The family error names the addresses list, as Kubernetes' does.
func validateSliceAddress(a, addressType string, list, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch addressType {
	case endpointSliceIPv4:
		if ipErrs := validation.IsValidIPForLegacyField(p, a, false, nil); len(ipErrs) > 0 {
			return ipErrs
		}
		if ip := netutils.ParseIPSloppy(a); ip == nil || ip.To4() == nil {
			errs = append(errs, field.Invalid(list, a, "must be an IPv4 address"))
		}
		errs = append(errs, validateEndpointIP(a, p)...)
	case endpointSliceIPv6:
		if ipErrs := validation.IsValidIP(p, a); len(ipErrs) > 0 {
			return ipErrs
		}
		if ip := net.ParseIP(a); ip == nil || ip.To4() != nil {
			errs = append(errs, field.Invalid(list, a, "must be an IPv6 address"))
		}
		errs = append(errs, validateEndpointIP(a, p)...)
	case endpointSliceFQDN:
		errs = append(errs, validation.IsFullyQualifiedDomainName(p, a)...)
	}
	return errs
}

// validateEndpointIP is Kubernetes' ValidateEndpointIP: no unspecified,
// loopback, link-local or link-local multicast address.
func validateEndpointIP(a string, p *field.Path) field.ErrorList {
	ip := netutils.ParseIPSloppy(a)
	if ip == nil {
		return field.ErrorList{field.Invalid(p, a, "must be a valid IP address")}
	}
	var errs field.ErrorList
	if ip.IsUnspecified() {
		errs = append(errs, field.Invalid(p, a, fmt.Sprintf("may not be unspecified (%v)", a)))
	}
	if ip.IsLoopback() {
		errs = append(errs, field.Invalid(p, a, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
	}
	if ip.IsLinkLocalUnicast() {
		errs = append(errs, field.Invalid(p, a, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
	}
	if ip.IsLinkLocalMulticast() {
		errs = append(errs, field.Invalid(p, a, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
	}
	return errs
}

func validateSlicePorts(ports []*discoveryv1.EndpointPort, p *field.Path) field.ErrorList {
	if len(ports) > maxSlicePorts {
		return field.ErrorList{field.TooMany(p, len(ports), maxSlicePorts)}
	}
	var errs field.ErrorList
	var names []string
	for i, port := range ports {
		ip := p.Index(i)
		name := port.GetName()
		if name != "" {
			for _, msg := range validation.IsDNS1123Label(name) {
				errs = append(errs, field.Invalid(ip.Child("name"), name, msg))
			}
		}
		if slices.Contains(names, name) {
			errs = append(errs, field.Duplicate(ip.Child("name"), name))
		} else {
			names = append(names, name)
		}
		if port.Protocol == nil {
			errs = append(errs, field.Required(ip.Child("protocol"), ""))
		} else {
			errs = append(errs, validateEnum(port.GetProtocol(), ip.Child("protocol"), false, "SCTP", "TCP", "UDP")...)
		}
		if port.AppProtocol != nil {
			for _, msg := range validation.IsQualifiedName(port.GetAppProtocol()) {
				errs = append(errs, field.Invalid(ip.Child("appProtocol"), port.GetAppProtocol(), msg))
			}
		}
	}
	return errs
}

func validateEndpointHints(h *discoveryv1.EndpointHints, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	zp := p.Child("forZones")
	if len(h.ForZones) > maxEndpointZoneHints {
		return field.ErrorList{field.TooMany(zp, len(h.ForZones), maxEndpointZoneHints)}
	}
	var zones []string
	for i, z := range h.ForZones {
		np := zp.Index(i).Child("name")
		if slices.Contains(zones, z.GetName()) {
			errs = append(errs, field.Duplicate(np, z.GetName()))
		} else {
			zones = append(zones, z.GetName())
		}
		for _, msg := range validation.IsValidLabelValue(z.GetName()) {
			errs = append(errs, field.Invalid(np, z.GetName(), msg))
		}
	}
	np := p.Child("forNodes")
	if len(h.ForNodes) > maxEndpointNodeHints {
		return append(errs, field.TooMany(np, len(h.ForNodes), maxEndpointNodeHints))
	}
	var nodes []string
	for i, n := range h.ForNodes {
		fp := np.Index(i).Child("name")
		if slices.Contains(nodes, n.GetName()) {
			errs = append(errs, field.Duplicate(fp, n.GetName()))
		} else {
			nodes = append(nodes, n.GetName())
		}
		for _, msg := range validation.IsDNS1123Subdomain(n.GetName()) {
			errs = append(errs, field.Invalid(fp, n.GetName(), msg))
		}
	}
	return errs
}

// reconcileKubernetesEndpointSlice keeps default/kubernetes' EndpointSlice
// as kube-apiserver's endpoint reconciler writes it beside the Endpoints:
// named kubernetes, labelled only kubernetes.io/service-name, IPv4, the
// https port and one ready endpoint per live advertised address. It is
// not managed by the EndpointSlice controller (the Service has no
// selector).
func (s *Server) reconcileKubernetesEndpointSlice(ctx context.Context, ml *masterLeases) error {
	if !s.cfg.AdvertiseAddress.IsValid() {
		return nil
	}
	addrs, err := ml.live(ctx)
	if err != nil {
		return err
	}
	want := &discoveryv1.EndpointSlice{
		Metadata:    &metav1.ObjectMeta{Namespace: "default", Name: "kubernetes", Labels: map[string]string{"kubernetes.io/service-name": "kubernetes"}},
		AddressType: endpointSliceIPv4,
	}
	if len(addrs) > 0 {
		want.Ports = []*discoveryv1.EndpointPort{{Name: proto.String("https"), Port: proto.Int32(s.securePort()), Protocol: proto.String("TCP")}}
		allV6 := true
		for _, a := range addrs {
			if ip := net.ParseIP(a); ip == nil || ip.To4() != nil {
				allV6 = false
			}
		}
		if allV6 {
			want.AddressType = endpointSliceIPv6
		}
		for _, a := range addrs {
			if ip := net.ParseIP(a); ip != nil && (ip.To4() == nil) == (want.AddressType == endpointSliceIPv6) {
				want.Endpoints = append(want.Endpoints, &discoveryv1.Endpoint{Addresses: []string{a}, Conditions: &discoveryv1.EndpointConditions{Ready: proto.Bool(true)}})
			}
		}
	}
	r := s.resources["endpointslices"]
	cur, err := s.store.get(ctx, r, "default", "kubernetes")
	if apierrors.IsNotFound(err) {
		err = s.writeKubernetesSlice(ctx, r, want, nil)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	es := cur.(*discoveryv1.EndpointSlice)
	if es.GetAddressType() != want.GetAddressType() {
		// The address type is immutable: replaced, as Kubernetes does.
		rev, _ := parseRV(es.GetMetadata().GetResourceVersion())
		if _, err := s.storeRemove(ctx, r, "default", "kubernetes", rev, es); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return s.writeKubernetesSlice(ctx, r, want, nil)
	}
	defaultEndpointSlice(want)
	if slicesEqualProto(es.GetEndpoints(), want.GetEndpoints()) && slicesEqualProto(es.GetPorts(), want.GetPorts()) &&
		labelsEqual(es.GetMetadata().GetLabels(), want.GetMetadata().GetLabels()) {
		return nil
	}
	n := proto.Clone(es).(*discoveryv1.EndpointSlice)
	n.Endpoints, n.Ports, n.Metadata.Labels = want.Endpoints, want.Ports, want.Metadata.Labels
	err = s.writeKubernetesSlice(ctx, r, n, es)
	var ce *casError
	if errors.As(err, &ce) {
		return nil // another replica wrote it; the next round looks again
	}
	return err
}

// writeKubernetesSlice is writeInternal for the kubernetes slice, whose
// addresses may be loopback ones: kplane lists a loopback advertised
// address (kplane up on loopback) where kube-apiserver refuses it, in the
// slice as in the Endpoints. Every other rule holds.
func (s *Server) writeKubernetesSlice(ctx context.Context, r *resourceInfo, obj, old *discoveryv1.EndpointSlice) error {
	n := proto.Clone(obj).(*discoveryv1.EndpointSlice)
	setTypeMeta(r, n)
	if old == nil {
		prepareForCreate(r, n)
	} else {
		prepareForUpdate(r, n, old)
	}
	setDefaults(n)
	var errs field.ErrorList
	for _, e := range validateObjectErrs(r, n, oldOrNil(old)) {
		if e.Type == field.ErrorTypeInvalid && e.Detail == "may not be in the loopback range (127.0.0.0/8, ::1/128)" {
			continue
		}
		errs = append(errs, e)
	}
	if err := invalid(r, n.GetMetadata().GetName(), errs); err != nil {
		return err
	}
	if old == nil {
		_, err := s.storeCreate(ctx, r, n, nil)
		return err
	}
	rev, _ := parseRV(old.GetMetadata().GetResourceVersion())
	_, err := s.storeUpdate(ctx, r, "default", n.GetMetadata().GetName(), rev, n, old, nil)
	return err
}

// oldOrNil keeps a nil *EndpointSlice a nil proto.Message.
func oldOrNil(old *discoveryv1.EndpointSlice) proto.Message {
	if old == nil {
		return nil
	}
	return old
}
