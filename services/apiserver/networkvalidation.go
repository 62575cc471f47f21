// This file holds Kubernetes' validation of the networking.k8s.io kinds
// served at the storage level: Ingress (rules, paths, backends, TLS,
// status), IngressClass and NetworkPolicy (ports, peers, IP blocks).

package apiserver

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	networkingv1 "github.com/kplane/kplane/proto/kplane/networking/v1"
	"github.com/kplane/kplane/proto/kubeconv"
)

// validateIngress is ValidateIngressCreate (old nil) and
// ValidateIngressUpdate after the metadata. An update keeps accepting the
// TLS secret names and wildcard-host rules the old object already had
// invalid, as Kubernetes does.
func validateIngress(o, old *networkingv1.Ingress) field.ErrorList {
	allowBadSecret, allowWildcardRule := false, false
	if old != nil {
		for _, tls := range old.GetSpec().GetTls() {
			if len(validateTLSSecretName(tls.GetSecretName())) > 0 {
				allowBadSecret = true
			}
		}
		for _, r := range old.GetSpec().GetRules() {
			if strings.Contains(r.GetHost(), "*") && len(validateIngressRuleValue(r.GetIngressRuleValue(), field.NewPath("x"))) > 0 {
				allowWildcardRule = true
			}
		}
	}
	s, p := o.GetSpec(), field.NewPath("spec")
	var errs field.ErrorList
	if len(s.GetRules()) == 0 && s.GetDefaultBackend() == nil {
		errs = append(errs, field.Invalid(p, goValue("[]networking.IngressRule(nil)"), "either `defaultBackend` or `rules` must be specified"))
	}
	if s.GetDefaultBackend() != nil {
		errs = append(errs, validateIngressBackend(s.GetDefaultBackend(), p.Child("defaultBackend"))...)
	}
	for i, r := range s.GetRules() {
		rp := p.Child("rules").Index(i)
		wildcard := false
		if h := r.GetHost(); h != "" {
			if netutils.ParseIPSloppy(h) != nil {
				errs = append(errs, field.Invalid(rp.Child("host"), h, "must be a DNS name, not an IP address"))
			}
			check := validation.IsDNS1123Subdomain
			if strings.Contains(h, "*") {
				check, wildcard = validation.IsWildcardDNS1123Subdomain, true
			}
			for _, msg := range check(h) {
				errs = append(errs, field.Invalid(rp.Child("host"), h, msg))
			}
		}
		if !wildcard || !allowWildcardRule {
			errs = append(errs, validateIngressRuleValue(r.GetIngressRuleValue(), rp)...)
		}
	}
	for i, tls := range s.GetTls() {
		tp := p.Child("tls").Index(i)
		for j, h := range tls.GetHosts() {
			check := validation.IsDNS1123Subdomain
			if strings.Contains(h, "*") {
				check = validation.IsWildcardDNS1123Subdomain
			}
			for _, msg := range check(h) {
				errs = append(errs, field.Invalid(tp.Child("hosts").Index(j), h, msg))
			}
		}
		if !allowBadSecret {
			for _, msg := range validateTLSSecretName(tls.GetSecretName()) {
				errs = append(errs, field.Invalid(tp.Child("secretName"), tls.GetSecretName(), msg))
			}
		}
	}
	if s != nil && s.IngressClassName != nil {
		for _, msg := range validation.IsDNS1123Subdomain(s.GetIngressClassName()) {
			errs = append(errs, field.Invalid(p.Child("ingressClassName"), s.GetIngressClassName(), msg))
		}
	}
	if old == nil {
		if v, ok := meta(o).GetAnnotations()[ingressClassAnnotation]; ok && s.IngressClassName != nil && v != s.GetIngressClassName() {
			errs = append(errs, field.Invalid(field.NewPath("annotations").Child(ingressClassAnnotation), v, "must match `ingressClassName` when both are specified"))
		}
	}
	return errs
}

func validateTLSSecretName(name string) []string {
	if name == "" {
		return nil
	}
	return validation.IsDNS1123Subdomain(name)
}

func validateIngressRuleValue(v *networkingv1.IngressRuleValue, p *field.Path) field.ErrorList {
	h := v.GetHttp()
	if h == nil {
		return nil
	}
	hp := p.Child("http")
	var errs field.ErrorList
	if len(h.GetPaths()) == 0 {
		errs = append(errs, field.Required(hp.Child("paths"), ""))
	}
	for i, path := range h.GetPaths() {
		errs = append(errs, validateIngressPath(path, hp.Child("paths").Index(i))...)
	}
	return errs
}

func validateIngressPath(path *networkingv1.HTTPIngressPath, p *field.Path) field.ErrorList {
	if path.PathType == nil {
		return field.ErrorList{field.Required(p.Child("pathType"), "pathType must be specified")}
	}
	var errs field.ErrorList
	v := path.GetPath()
	switch t := path.GetPathType(); t {
	case "Exact", "Prefix":
		if !strings.HasPrefix(v, "/") {
			errs = append(errs, field.Invalid(p.Child("path"), v, "must be an absolute path"))
		}
		if v != "" {
			// The sequences and suffixes Kubernetes refuses in these paths.
			for _, seq := range []string{"//", "/./", "/../", "%2f", "%2F"} {
				if strings.Contains(v, seq) {
					errs = append(errs, field.Invalid(p.Child("path"), v, fmt.Sprintf("must not contain '%s'", seq)))
				}
			}
			for _, suf := range []string{"/..", "/."} {
				if strings.HasSuffix(v, suf) {
					errs = append(errs, field.Invalid(p.Child("path"), v, fmt.Sprintf("cannot end with '%s'", suf)))
				}
			}
		}
	case "ImplementationSpecific":
		if v != "" && !strings.HasPrefix(v, "/") {
			errs = append(errs, field.Invalid(p.Child("path"), v, "must be an absolute path"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("pathType"), t, []string{"Exact", "ImplementationSpecific", "Prefix"}))
	}
	return append(errs, validateIngressBackend(path.GetBackend(), p.Child("backend"))...)
}

func validateIngressBackend(b *networkingv1.IngressBackend, p *field.Path) field.ErrorList {
	switch {
	case b.GetResource() != nil && b.GetService() != nil:
		return field.ErrorList{field.Invalid(p, "", "cannot set both resource and service backends")}
	case b.GetResource() != nil:
		r := b.GetResource()
		return validateTypedLocalRef(r.ApiGroup, r.GetKind(), r.GetName(), p.Child("resource"))
	case b.GetService() != nil:
		var errs field.ErrorList
		svc := b.GetService()
		if svc.GetName() == "" {
			errs = append(errs, field.Required(p.Child("service", "name"), ""))
		} else {
			for _, msg := range validation.IsDNS1035Label(svc.GetName()) {
				errs = append(errs, field.Invalid(p.Child("service", "name"), svc.GetName(), msg))
			}
		}
		name, number := svc.GetPort().GetName(), svc.GetPort().GetNumber()
		switch {
		case name != "" && number != 0:
			errs = append(errs, field.Invalid(p, "", "cannot set both port name & port number"))
		case name != "":
			for _, msg := range validation.IsValidPortName(name) {
				errs = append(errs, field.Invalid(p.Child("service", "port", "name"), name, msg))
			}
		case number != 0:
			for _, msg := range validation.IsValidPortNum(int(number)) {
				errs = append(errs, field.Invalid(p.Child("service", "port", "number"), number, msg))
			}
		default:
			errs = append(errs, field.Required(p, "port name or number is required"))
		}
		return errs
	}
	return field.ErrorList{field.Invalid(p, "", "resource or service backend is required")}
}

// validateTypedLocalRef is validateIngressTypedLocalObjectReference.
func validateTypedLocalRef(apiGroup *string, kind, name string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if apiGroup != nil {
		for _, msg := range validation.IsDNS1123Subdomain(*apiGroup) {
			errs = append(errs, field.Invalid(p.Child("apiGroup"), *apiGroup, msg))
		}
	}
	if kind == "" {
		errs = append(errs, field.Required(p.Child("kind"), "kind is required"))
	} else {
		for _, msg := range path.IsValidPathSegmentName(kind) {
			errs = append(errs, field.Invalid(p.Child("kind"), kind, msg))
		}
	}
	if name == "" {
		errs = append(errs, field.Required(p.Child("name"), "name is required"))
	} else {
		for _, msg := range path.IsValidPathSegmentName(name) {
			errs = append(errs, field.Invalid(p.Child("name"), name, msg))
		}
	}
	return errs
}

// validateIngressStatus is ValidateIngressStatusUpdate's check of the
// load balancer entries.
func validateIngressStatus(o *networkingv1.Ingress) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("status", "loadBalancer")
	for i, in := range o.GetStatus().GetLoadBalancer().GetIngress() {
		ip := p.Child("ingress").Index(i)
		if in.GetIp() != "" {
			errs = append(errs, validation.IsValidIPForLegacyField(ip.Child("ip"), in.GetIp(), false, nil)...)
		}
		if h := in.GetHostname(); h != "" {
			for _, msg := range validation.IsDNS1123Subdomain(h) {
				errs = append(errs, field.Invalid(ip.Child("hostname"), h, msg))
			}
			if netutils.ParseIPSloppy(h) != nil {
				errs = append(errs, field.Invalid(ip.Child("hostname"), h, "must be a DNS name, not an IP address"))
			}
		}
	}
	return errs
}

// validateIngressClass is ValidateIngressClass (and, with old,
// ValidateIngressClassUpdate: the controller is immutable).
func validateIngressClass(o, old *networkingv1.IngressClass) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if old != nil && o.GetSpec().GetController() != old.GetSpec().GetController() {
		errs = append(errs, field.Invalid(p.Child("controller"), o.GetSpec().GetController(), "field is immutable"))
	}
	c := o.GetSpec().GetController()
	if len(c) > 250 {
		errs = append(errs, field.TooLong(p.Child("controller"), "", 250))
	}
	errs = append(errs, validation.IsDomainPrefixedPath(p.Child("controller"), c)...)
	if params := o.GetSpec().GetParameters(); params != nil {
		pp := p.Child("parameters")
		errs = append(errs, validateTypedLocalRef(params.ApiGroup, params.GetKind(), params.GetName(), pp)...)
		switch scope := params.GetScope(); {
		case params.Scope == nil:
			errs = append(errs, field.Required(pp.Child("scope"), ""))
		case scope != "Cluster" && scope != "Namespace":
			errs = append(errs, field.NotSupported(pp.Child("scope"), scope, []string{"Cluster", "Namespace"}))
		case scope == "Namespace" && params.Namespace == nil:
			errs = append(errs, field.Required(pp.Child("namespace"), "`parameters.scope` is set to 'Namespace'"))
		case scope == "Namespace":
			for _, msg := range validation.IsDNS1123Label(params.GetNamespace()) {
				errs = append(errs, field.Invalid(pp.Child("namespace"), params.GetNamespace(), msg))
			}
		case scope == "Cluster" && params.Namespace != nil:
			errs = append(errs, field.Forbidden(pp.Child("namespace"), "`parameters.scope` is set to 'Cluster'"))
		}
	}
	return errs
}

// validateNetworkPolicy is ValidateNetworkPolicySpec.
func validateNetworkPolicy(o *networkingv1.NetworkPolicy) field.ErrorList {
	s, p := o.GetSpec(), field.NewPath("spec")
	errs := validateSelector(s.GetPodSelector(), p.Child("podSelector"))
	for i, r := range s.GetIngress() {
		rp := p.Child("ingress").Index(i)
		for j, port := range r.GetPorts() {
			errs = append(errs, validatePolicyPort(port, rp.Child("ports").Index(j))...)
		}
		for j, peer := range r.GetFrom() {
			errs = append(errs, validatePolicyPeer(peer, rp.Child("from").Index(j))...)
		}
	}
	for i, r := range s.GetEgress() {
		rp := p.Child("egress").Index(i)
		for j, port := range r.GetPorts() {
			errs = append(errs, validatePolicyPort(port, rp.Child("ports").Index(j))...)
		}
		for j, peer := range r.GetTo() {
			errs = append(errs, validatePolicyPeer(peer, rp.Child("to").Index(j))...)
		}
	}
	if types := s.GetPolicyTypes(); len(types) > 2 {
		return append(errs, field.Invalid(p.Child("policyTypes"), goValue(fmt.Sprintf("%#v", policyTypes(types))), "may not specify more than two policyTypes"))
	}
	for i, t := range s.GetPolicyTypes() {
		if t != "Ingress" && t != "Egress" {
			errs = append(errs, field.NotSupported(p.Child("policyTypes").Index(i), t, []string{"Ingress", "Egress"}))
		}
	}
	return errs
}

// policyTypes prints as Kubernetes' []networking.PolicyType.
type policyTypes []string

func (t policyTypes) GoString() string {
	q := make([]string, len(t))
	for i, s := range t {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[]networking.PolicyType{" + strings.Join(q, ", ") + "}"
}

func validateSelector(sel *metav1.LabelSelector, p *field.Path) field.ErrorList {
	return metav1validation.ValidateLabelSelector(kubeconv.LabelSelector(sel), metav1validation.LabelSelectorValidationOptions{}, p)
}

func validatePolicyPort(port *networkingv1.NetworkPolicyPort, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if port.Protocol != nil {
		switch pr := port.GetProtocol(); pr {
		case "TCP", "UDP", "SCTP":
		default:
			errs = append(errs, field.NotSupported(p.Child("protocol"), pr, []string{"TCP", "UDP", "SCTP"}))
		}
	}
	switch v := port.GetPort().GetValue().(type) {
	case *metav1.IntOrString_IntVal:
		for _, msg := range validation.IsValidPortNum(int(v.IntVal)) {
			errs = append(errs, field.Invalid(p.Child("port"), v.IntVal, msg))
		}
		if port.EndPort != nil {
			if port.GetEndPort() < v.IntVal {
				errs = append(errs, field.Invalid(p.Child("endPort"), v.IntVal, "must be greater than or equal to `port`"))
			}
			for _, msg := range validation.IsValidPortNum(int(port.GetEndPort())) {
				errs = append(errs, field.Invalid(p.Child("endPort"), port.GetEndPort(), msg))
			}
		}
	case *metav1.IntOrString_StrVal:
		if port.EndPort != nil {
			errs = append(errs, field.Invalid(p.Child("endPort"), port.GetEndPort(), "may not be specified when `port` is non-numeric"))
		}
		for _, msg := range validation.IsValidPortName(v.StrVal) {
			errs = append(errs, field.Invalid(p.Child("port"), v.StrVal, msg))
		}
	default:
		if port.EndPort != nil {
			errs = append(errs, field.Invalid(p.Child("endPort"), port.GetEndPort(), "may not be specified when `port` is not specified"))
		}
	}
	return errs
}

func validatePolicyPeer(peer *networkingv1.NetworkPolicyPeer, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if peer.GetPodSelector() != nil {
		n++
		errs = append(errs, validateSelector(peer.GetPodSelector(), p.Child("podSelector"))...)
	}
	if peer.GetNamespaceSelector() != nil {
		n++
		errs = append(errs, validateSelector(peer.GetNamespaceSelector(), p.Child("namespaceSelector"))...)
	}
	if b := peer.GetIpBlock(); b != nil {
		n++
		errs = append(errs, validateIPBlock(b, p.Child("ipBlock"))...)
	}
	switch {
	case n == 0:
		errs = append(errs, field.Required(p, "must specify a peer"))
	case n > 1 && peer.GetIpBlock() != nil:
		errs = append(errs, field.Forbidden(p, "may not specify both ipBlock and another peer"))
	}
	return errs
}

// validateIPBlock is ValidateIPBlock: a CIDR (leading zeros tolerated, as
// the legacy fields while StrictIPCIDRValidation is off), and excepts
// strictly inside it.
func validateIPBlock(b *networkingv1.IPBlock, p *field.Path) field.ErrorList {
	if b.GetCidr() == "" {
		return field.ErrorList{field.Required(p.Child("cidr"), "")}
	}
	errs := validation.IsValidCIDRForLegacyField(p.Child("cidr"), b.GetCidr(), false, nil)
	_, cidr, err := netutils.ParseCIDRSloppy(b.GetCidr())
	if err != nil {
		return errs
	}
	for i, ex := range b.GetExcept() {
		ep := p.Child("except").Index(i)
		errs = append(errs, validation.IsValidCIDRForLegacyField(ep, ex, false, nil)...)
		_, exNet, err := netutils.ParseCIDRSloppy(ex)
		if err != nil {
			continue
		}
		cl, _ := cidr.Mask.Size()
		el, _ := exNet.Mask.Size()
		if !cidr.Contains(exNet.IP) || cl >= el {
			errs = append(errs, field.Invalid(ep, ex, "must be a strict subset of `cidr`"))
		}
	}
	return errs
}
