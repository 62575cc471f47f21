// This file holds the fields of a Service that depend on its type, as
// Kubernetes' Service strategy and validation treat them: defaults,
// fields dropped when the type changes, IP families, and the checks of
// the addresses a client asks for.

package apiserver

import (
	"fmt"
	"net/netip"
	"slices"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation/field"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

func needsClusterIP(s *corev1.ServiceSpec) bool { return s.GetType() != "ExternalName" }

func needsNodePorts(s *corev1.ServiceSpec) bool {
	switch s.GetType() {
	case "NodePort":
		return true
	case "LoadBalancer":
		return s.AllocateLoadBalancerNodePorts == nil || s.GetAllocateLoadBalancerNodePorts()
	}
	return false
}

func hasNodePorts(s *corev1.ServiceSpec) bool {
	return s.GetType() == "NodePort" || s.GetType() == "LoadBalancer"
}

func isHeadless(s *corev1.ServiceSpec) bool { return s.GetClusterIp() == "None" }

// prepareService normalises a Service's addresses before validation, as
// Kubernetes' Service strategy and registry do: clusterIPs follows
// clusterIP; on update the fields a type change leaves behind are dropped
// and what the client left out (clusterIP, node ports, IP families) is
// carried over from the stored Service.
func prepareService(svc, old *corev1.Service) {
	if svc.Spec == nil {
		svc.Spec = &corev1.ServiceSpec{}
	}
	s := svc.Spec
	if old != nil {
		o := old.GetSpec()
		if s.ClusterIp != o.GetClusterIp() && slices.Equal(s.ClusterIps, o.GetClusterIps()) {
			switch {
			case s.ClusterIp == "":
				s.ClusterIps = nil
			case len(s.ClusterIps) > 0:
				s.ClusterIps = append([]string{s.ClusterIp}, s.ClusterIps[1:]...)
			}
		}
		dropTypeDependentFields(s, o)
		if needsClusterIP(o) && needsClusterIP(s) {
			if s.ClusterIp == "" {
				s.ClusterIp = o.GetClusterIp()
			}
			if len(s.ClusterIps) == 0 {
				s.ClusterIps = slices.Clone(o.GetClusterIps())
			}
			if len(s.IpFamilies) == 0 {
				s.IpFamilies = slices.Clone(o.GetIpFamilies())
			}
			if s.IpFamilyPolicy == nil && o.IpFamilyPolicy != nil {
				s.IpFamilyPolicy = proto.String(o.GetIpFamilyPolicy())
			}
		}
		if needsNodePorts(o) && needsNodePorts(s) {
			for _, p := range s.Ports {
				if p.NodePort != 0 {
					continue
				}
				for _, op := range o.GetPorts() {
					if op.GetPort() == p.GetPort() && op.GetProtocol() == p.GetProtocol() && op.GetNodePort() != 0 {
						p.NodePort = op.GetNodePort()
						break
					}
				}
			}
		}
	}
	if s.ClusterIp != "" && len(s.ClusterIps) == 0 {
		s.ClusterIps = []string{s.ClusterIp}
	}
}

// dropTypeDependentFields clears, when the type changes, what the old type
// needed and the client did not change: cluster IPs and families going to
// ExternalName, node ports going to ClusterIP or ExternalName, the
// load-balancer and external-traffic fields.
func dropTypeDependentFields(s, o *corev1.ServiceSpec) {
	if s.GetType() == o.GetType() {
		return
	}
	if needsClusterIP(o) && !needsClusterIP(s) {
		if s.ClusterIp == o.GetClusterIp() && slices.Equal(s.ClusterIps, o.GetClusterIps()) {
			s.ClusterIp, s.ClusterIps = "", nil
		}
		if slices.Equal(s.IpFamilies, o.GetIpFamilies()) {
			s.IpFamilies = nil
		}
		if s.GetIpFamilyPolicy() == o.GetIpFamilyPolicy() {
			s.IpFamilyPolicy = nil
		}
		if s.GetInternalTrafficPolicy() == o.GetInternalTrafficPolicy() {
			s.InternalTrafficPolicy = nil
		}
	}
	if hasNodePorts(o) && !hasNodePorts(s) {
		held := map[int32]bool{}
		for _, op := range o.GetPorts() {
			held[op.GetNodePort()] = true
		}
		for _, p := range s.Ports {
			if held[p.GetNodePort()] {
				p.NodePort = 0
			}
		}
		if s.GetExternalTrafficPolicy() == o.GetExternalTrafficPolicy() {
			s.ExternalTrafficPolicy = ""
		}
	}
	if o.GetType() == "LoadBalancer" && s.GetType() != "LoadBalancer" && s.GetAllocateLoadBalancerNodePorts() == o.GetAllocateLoadBalancerNodePorts() {
		s.AllocateLoadBalancerNodePorts = nil
	}
}

// validateServiceAddresses checks a Service's cluster IPs, IP families and
// node ports against the type and the cluster's configuration, with
// kube-apiserver's messages and field paths.
func (a *serviceAddressing) validateServiceAddresses(svc, old *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	s, p := svc.GetSpec(), field.NewPath("spec")
	ipsPath := p.Child("clusterIPs")
	if !needsClusterIP(s) {
		if s.GetClusterIp() != "" || len(s.GetClusterIps()) > 0 {
			errs = append(errs, field.Forbidden(ipsPath, "may not be set for ExternalName services"))
		}
		if len(s.GetIpFamilies()) > 0 {
			errs = append(errs, field.Forbidden(p.Child("ipFamilies"), "may not be set for ExternalName services"))
		}
		if s.IpFamilyPolicy != nil {
			errs = append(errs, field.Forbidden(p.Child("ipFamilyPolicy"), "may not be set for ExternalName services"))
		}
	} else {
		switch {
		case s.GetClusterIp() == "" && len(s.GetClusterIps()) > 0:
			errs = append(errs, field.Invalid(ipsPath, s.GetClusterIps(), "must be empty when `clusterIP` is not specified"))
		case s.GetClusterIp() != "" && s.GetClusterIps()[0] != s.GetClusterIp():
			errs = append(errs, field.Invalid(ipsPath, s.GetClusterIps(), "first value must match `clusterIP`"))
		}
		if old != nil && needsClusterIP(old.GetSpec()) && len(old.GetSpec().GetClusterIps()) > 0 {
			if len(s.GetClusterIps()) == 0 || s.GetClusterIps()[0] != old.GetSpec().GetClusterIps()[0] {
				errs = append(errs, field.Invalid(ipsPath.Index(0), s.GetClusterIps(), "may not change once set"))
			}
		}
		if len(s.GetClusterIps()) > 2 {
			errs = append(errs, field.Invalid(ipsPath, s.GetClusterIps(), "may only hold up to 2 values"))
		}
		if len(s.GetClusterIps()) > 1 && slices.Contains(s.GetClusterIps(), "None") {
			errs = append(errs, field.Invalid(ipsPath, s.GetClusterIps(), "'None' must be the first and only value"))
		}
		for i, ip := range s.GetClusterIps() {
			if ip == "None" && i == 0 {
				if hasNodePorts(s) {
					errs = append(errs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("may not be set to 'None' for %s services", s.GetType())))
				}
				continue
			}
			if _, err := netip.ParseAddr(ip); err != nil {
				errs = append(errs, field.Invalid(ipsPath.Index(i), ip, invalidIPMessage))
			}
		}
		if pol := s.IpFamilyPolicy; pol != nil {
			errs = append(errs, validateEnum(*pol, p.Child("ipFamilyPolicy"), true, "PreferDualStack", "RequireDualStack", "SingleStack")...)
		}
		// Two cluster IPs: dual-stack, which the policy (SingleStack when
		// unset) must allow and this single-stack cluster cannot serve.
		if ips := s.GetClusterIps(); len(ips) == 2 && ips[0] != "None" {
			if pol := s.GetIpFamilyPolicy(); pol == "" || pol == "SingleStack" {
				errs = append(errs, field.Invalid(p.Child("ipFamilyPolicy"), "SingleStack", "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"))
			}
			if a2, err := netip.ParseAddr(ips[1]); err == nil {
				fam := "IPv4"
				if a2.Is6() && !a2.Is4In6() {
					fam = "IPv6"
				}
				if fam != a.family {
					errs = append(errs, field.Invalid(ipsPath.Index(1), ips, fam+" is not configured on this cluster"))
				}
			}
		}
		seen := map[string]bool{}
		for i, f := range s.GetIpFamilies() {
			fp := p.Child("ipFamilies").Index(i)
			if f != "IPv4" && f != "IPv6" {
				errs = append(errs, field.NotSupported(fp, f, []string{"IPv4", "IPv6"}))
				continue
			}
			if seen[f] {
				errs = append(errs, field.Duplicate(fp, f))
			}
			seen[f] = true
		}
		if len(s.GetIpFamilies()) > 2 {
			errs = append(errs, field.Invalid(p.Child("ipFamilies"), s.GetIpFamilies(), "may only hold up to 2 values"))
		}
		// A headless Service without a selector may ask for both families
		// on any cluster; others only for what the cluster serves.
		if !(isHeadless(s) && len(s.GetSelector()) == 0) {
			if s.GetIpFamilyPolicy() == "RequireDualStack" {
				errs = append(errs, field.Invalid(p.Child("ipFamilyPolicy"), "RequireDualStack", "this cluster is not configured for dual-stack services"))
			}
			for i, f := range s.GetIpFamilies() {
				if (f == "IPv4" || f == "IPv6") && f != a.family {
					errs = append(errs, field.Invalid(p.Child("ipFamilies").Index(i), f, "not configured on this cluster"))
				}
			}
		}
	}
	for i, port := range s.GetPorts() {
		np := port.GetNodePort()
		if np == 0 {
			continue
		}
		pp := p.Child("ports").Index(i).Child("nodePort")
		if !hasNodePorts(s) {
			errs = append(errs, field.Forbidden(pp, fmt.Sprintf("may not be used when `type` is '%s'", s.GetType())))
		}
		// A node port outside the range (any number) is the allocator's
		// 422, as in Kubernetes (servicePlan).
	}
	return errs
}

// defaultServiceFamilies sets ipFamilyPolicy and ipFamilies as Kubernetes
// does once the addresses are known: a headless Service without a selector
// is RequireDualStack with both families; others default to SingleStack on
// the cluster's family.
func (a *serviceAddressing) defaultServiceFamilies(s *corev1.ServiceSpec) {
	if !needsClusterIP(s) {
		return
	}
	other := "IPv6"
	if a.family == "IPv6" {
		other = "IPv4"
	}
	if isHeadless(s) && len(s.GetSelector()) == 0 {
		if s.IpFamilyPolicy == nil {
			s.IpFamilyPolicy = proto.String("RequireDualStack")
		}
		if len(s.IpFamilies) == 0 {
			s.IpFamilies = []string{a.family}
			if s.GetIpFamilyPolicy() != "SingleStack" {
				s.IpFamilies = append(s.IpFamilies, other)
			}
		}
		return
	}
	if s.IpFamilyPolicy == nil {
		s.IpFamilyPolicy = proto.String("SingleStack")
	}
	if len(s.IpFamilies) == 0 {
		s.IpFamilies = []string{a.family}
	}
}
