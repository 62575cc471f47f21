// This file holds certificates.k8s.io/v1 CertificateSigningRequest as
// Kubernetes' strategies and validation treat it: the requester's identity
// stamped on create, spec and status kept on an update of the object,
// status.certificate written through the status subresource and the
// Approved/Denied conditions through the approval subresource only. No
// signer runs in kplane (docs/design.md): an approved request gets a
// certificate only from a client that writes one.

package apiserver

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kplane/kplane/proto/apierrors"
	certificatesv1 "github.com/kplane/kplane/proto/kplane/certificates/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// The condition types whose status may only be True, and the two the
// approval subresource owns.
const (
	csrApproved = "Approved"
	csrDenied   = "Denied"
	csrFailed   = "Failed"
	// csrLegacySigner is refused on create through v1.
	csrLegacySigner = "kubernetes.io/legacy-unknown"
)

// csrUsages are the key usages a request may ask for.
var csrUsages = []string{
	"any", "cert sign", "client auth", "code signing", "content commitment", "crl sign", "data encipherment",
	"decipher only", "digital signature", "email protection", "encipher only", "ipsec end system",
	"ipsec tunnel", "ipsec user", "key agreement", "key encipherment", "microsoft sgc", "netscape sgc",
	"ocsp signing", "s/mime", "server auth", "signing", "timestamping",
}

// prepareCSRCreate is Kubernetes' PrepareForCreate: the spec's identity is
// the requester's, whatever the request said, and the status starts empty.
func prepareCSRCreate(csr *certificatesv1.CertificateSigningRequest, u request.User) {
	if csr.Spec == nil {
		csr.Spec = &certificatesv1.CertificateSigningRequestSpec{}
	}
	s := csr.Spec
	s.Username, s.Uid, s.Groups, s.Extra = u.Name, u.UID, slices.Clone(u.Groups), nil
	if len(u.Extra) > 0 {
		s.Extra = map[string]*certificatesv1.ExtraValue{}
		for k, v := range u.Extra {
			s.Extra[k] = &certificatesv1.ExtraValue{Items: slices.Clone(v)}
		}
	}
	csr.Status = &certificatesv1.CertificateSigningRequestStatus{}
}

// prepareCSRUpdate is the main resource's PrepareForUpdate: spec and
// status are the stored ones (only metadata changes there).
func prepareCSRUpdate(csr, old *certificatesv1.CertificateSigningRequest) {
	csr.Spec = proto.Clone(old.GetSpec()).(*certificatesv1.CertificateSigningRequestSpec)
	csr.Status = proto.Clone(old.GetStatus()).(*certificatesv1.CertificateSigningRequestStatus)
}

// prepareCSRStatus is the status subresource's PrepareForUpdate: the spec
// is the stored one, and the Approved and Denied conditions stay as stored
// when there are as many of them (they change through approval only).
func prepareCSRStatus(csr, old *certificatesv1.CertificateSigningRequest) {
	csr.Spec = proto.Clone(old.GetSpec()).(*certificatesv1.CertificateSigningRequestSpec)
	for _, t := range []string{csrApproved, csrDenied} {
		oi, ni := csrConditionIndices(old, t), csrConditionIndices(csr, t)
		if len(oi) != len(ni) {
			continue
		}
		for i, o := range oi {
			csr.Status.Conditions[ni[i]] = proto.Clone(old.Status.Conditions[o]).(*certificatesv1.CertificateSigningRequestCondition)
		}
	}
	stampCSRConditions(csr, old)
}

// prepareCSRApproval is the approval subresource's PrepareForUpdate: only
// the conditions are taken from the request.
func prepareCSRApproval(csr, old *certificatesv1.CertificateSigningRequest) {
	stampCSRConditions(csr, old)
	conds := csr.GetStatus().GetConditions()
	prepareCSRUpdate(csr, old)
	if csr.Status == nil {
		csr.Status = &certificatesv1.CertificateSigningRequestStatus{}
	}
	csr.Status.Conditions = conds
}

func csrConditionIndices(csr *certificatesv1.CertificateSigningRequest, t string) []int {
	var out []int
	for i, c := range csr.GetStatus().GetConditions() {
		if c.GetType() == t {
			out = append(out, i)
		}
	}
	return out
}

// stampCSRConditions sets a condition's unset lastUpdateTime to now and its
// unset lastTransitionTime to that of the stored condition of the same type
// and status, else now.
func stampCSRConditions(csr, old *certificatesv1.CertificateSigningRequest) {
	t := now()
	for _, c := range csr.GetStatus().GetConditions() {
		if isZeroTime(c.LastUpdateTime) {
			c.LastUpdateTime = t
		}
		if !isZeroTime(c.LastTransitionTime) {
			continue
		}
		c.LastTransitionTime = t
		for _, o := range old.GetStatus().GetConditions() {
			if o.GetType() == c.GetType() && o.GetStatus() == c.GetStatus() && !isZeroTime(o.GetLastTransitionTime()) {
				c.LastTransitionTime = o.GetLastTransitionTime()
				break
			}
		}
	}
}

// updateApproval serves the approval subresource: a write of the
// Approved/Denied (and other) conditions, checked as Kubernetes'
// ValidateCertificateSigningRequestApprovalUpdate.
func (s *Server) updateApproval(ctx context.Context, r *resourceInfo, ns, name string, obj proto.Message, wo writeOptions) (_ proto.Message, err error) {
	c, obj, dry, err := s.beginUpdate(ctx, r, "approval", ns, name, obj, wo)
	defer func() { s.end(ctx, c, err) }()
	if err != nil {
		return nil, err
	}
	clientRV := meta(obj).GetResourceVersion()
	return s.guaranteedUpdate(ctx, c, r, ns, name, clientRV, dry, func(old proto.Message) (proto.Message, *request.Admission, error) {
		if err := s.uidPrecondition(r, ns, name, obj, old); err != nil {
			return nil, nil, err
		}
		n := proto.Clone(obj)
		prepareForUpdate(r, n, old)
		nc, oc := n.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
		// prepareForUpdate kept the stored status: the request's
		// conditions are what this subresource writes.
		if nc.Status == nil {
			nc.Status = &certificatesv1.CertificateSigningRequestStatus{}
		}
		nc.Status.Conditions = obj.(*certificatesv1.CertificateSigningRequest).GetStatus().GetConditions()
		prepareCSRApproval(nc, oc)
		return n, s.admission(c, request.Update, n, old, dry), nil
	})
}

// validateCSR is Kubernetes' validation of a request on create (old nil)
// and on an update through sub ("", "status" or "approval").
func validateCSR(r *resourceInfo, csr, old *certificatesv1.CertificateSigningRequest, sub string) field.ErrorList {
	errs := validateMeta(r, meta(csr), field.NewPath("metadata"))
	spec := field.NewPath("spec")
	sp := csr.GetSpec()
	if err := checkCSRRequest(sp.GetRequest()); err != nil {
		errs = append(errs, field.Invalid(spec.Child("request"), sp.GetRequest(), err.Error()))
	}
	if len(sp.GetUsages()) == 0 {
		errs = append(errs, field.Required(spec.Child("usages"), ""))
	}
	oldUsages := old.GetSpec().GetUsages()
	if old == nil || !slices.ContainsFunc(oldUsages, func(u string) bool { return !slices.Contains(csrUsages, u) }) {
		for i, u := range sp.GetUsages() {
			if !slices.Contains(csrUsages, u) {
				errs = append(errs, field.NotSupported(spec.Child("usages").Index(i), u, csrUsages))
			}
		}
	}
	if old == nil || !hasDuplicate(oldUsages) {
		seen := map[string]bool{}
		for i, u := range sp.GetUsages() {
			if seen[u] {
				errs = append(errs, field.Duplicate(spec.Child("usages").Index(i), u))
			}
			seen[u] = true
		}
	}
	if sp.GetSignerName() == csrLegacySigner && old.GetSpec().GetSignerName() != csrLegacySigner {
		errs = append(errs, field.Invalid(spec.Child("signerName"), sp.GetSignerName(), "the legacy signerName is not allowed via this API version"))
	} else if sp.GetSignerName() != csrLegacySigner {
		errs = append(errs, validateSignerName(spec.Child("signerName"), sp.GetSignerName())...)
	}
	if e := sp.ExpirationSeconds; e != nil && *e < 600 {
		errs = append(errs, field.Invalid(spec.Child("expirationSeconds"), *e, "may not specify a duration less than 600 seconds (10 minutes)"))
	}
	errs = append(errs, validateCSRConditions(csr, old)...)
	cert, oldCert := csr.GetStatus().GetCertificate(), old.GetStatus().GetCertificate()
	arbitrary := old != nil && (bytes.Equal(cert, oldCert) || checkCertificatePEM(oldCert) != nil)
	if !arbitrary {
		if err := checkCertificatePEM(cert); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("status", "certificate"), "<certificate data>", err.Error()))
		}
	}
	if old == nil {
		return errs
	}
	conds := field.NewPath("status", "conditions")
	count := func(c *certificatesv1.CertificateSigningRequest, t string) []*certificatesv1.CertificateSigningRequestCondition {
		var out []*certificatesv1.CertificateSigningRequestCondition
		for _, i := range csrConditionIndices(c, t) {
			out = append(out, c.Status.Conditions[i])
		}
		return out
	}
	for _, t := range []string{csrApproved, csrDenied, csrFailed} {
		if len(count(csr, t)) < len(count(old, t)) {
			errs = append(errs, field.Forbidden(conds, fmt.Sprintf("updates may not remove a condition of type %q", t)))
		}
	}
	if sub != "approval" {
		for _, t := range []string{csrApproved, csrDenied} {
			n, o := count(csr, t), count(old, t)
			switch {
			case len(n) < len(o):
			case len(n) > len(o):
				errs = append(errs, field.Forbidden(conds, fmt.Sprintf("updates may not add a condition of type %q", t)))
			case !slices.EqualFunc(n, o, func(a, b *certificatesv1.CertificateSigningRequestCondition) bool { return proto.Equal(a, b) }):
				errs = append(errs, field.Forbidden(conds, fmt.Sprintf("updates may not modify a condition of type %q", t)))
			}
		}
	}
	if !bytes.Equal(cert, oldCert) {
		if sub != "status" {
			errs = append(errs, field.Forbidden(field.NewPath("status", "certificate"), "updates may not set certificate content"))
		} else if len(oldCert) > 0 {
			errs = append(errs, field.Forbidden(field.NewPath("status", "certificate"), "updates may not modify existing certificate content"))
		}
	}
	return append(errs, validateMetaUpdate(meta(csr), meta(old), field.NewPath("metadata"))...)
}

// validateCSRConditions checks each condition: a type (unless the stored
// request already had an empty one), a status (True only for Approved,
// Denied and Failed), Approved and Denied not both (unless already both),
// no type twice (unless already so).
func validateCSRConditions(csr, old *certificatesv1.CertificateSigningRequest) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("status", "conditions")
	oldConds := old.GetStatus().GetConditions()
	allowEmpty := slices.ContainsFunc(oldConds, func(c *certificatesv1.CertificateSigningRequestCondition) bool { return c.GetType() == "" })
	var oldTypes []string
	for _, c := range oldConds {
		oldTypes = append(oldTypes, c.GetType())
	}
	allowDup := hasDuplicate(oldTypes)
	allowBoth := slices.Contains(oldTypes, csrApproved) && slices.Contains(oldTypes, csrDenied)
	seen := map[string]bool{}
	approved, denied := false, false
	for i, c := range csr.GetStatus().GetConditions() {
		if !allowEmpty && c.GetType() == "" {
			errs = append(errs, field.Required(p.Index(i).Child("type"), ""))
		}
		allowed := []string{"False", "True", "Unknown"}
		if c.GetType() == csrApproved || c.GetType() == csrDenied || c.GetType() == csrFailed {
			allowed = []string{"True"}
		}
		switch {
		case c.GetStatus() == "":
			errs = append(errs, field.Required(p.Index(i).Child("status"), ""))
		case !slices.Contains(allowed, c.GetStatus()):
			errs = append(errs, field.NotSupported(p.Index(i).Child("status"), c.GetStatus(), allowed))
		}
		if !allowBoth {
			switch c.GetType() {
			case csrApproved:
				approved = true
				if denied {
					errs = append(errs, field.Invalid(p.Index(i).Child("type"), c.GetType(), "Approved and Denied conditions are mutually exclusive"))
				}
			case csrDenied:
				denied = true
				if approved {
					errs = append(errs, field.Invalid(p.Index(i).Child("type"), c.GetType(), "Approved and Denied conditions are mutually exclusive"))
				}
			}
		}
		if !allowDup {
			if seen[c.GetType()] {
				errs = append(errs, field.Duplicate(p.Index(i).Child("type"), c.GetType()))
			}
			seen[c.GetType()] = true
		}
	}
	return errs
}

func hasDuplicate(vs []string) bool {
	seen := map[string]bool{}
	for _, v := range vs {
		if seen[v] {
			return true
		}
		seen[v] = true
	}
	return false
}

// checkCSRRequest parses a PEM certificate request and checks its
// signature.
func checkCSRRequest(b []byte) error {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return errors.New("PEM block type must be CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return err
	}
	return req.CheckSignature()
}

// checkCertificatePEM accepts nothing, or one or more CERTIFICATE PEM
// blocks without headers, each holding certificates.
func checkCertificatePEM(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	blocks := 0
	for {
		block, rest := pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("only CERTIFICATE PEM blocks are allowed, found %q", block.Type)
		}
		if len(block.Headers) != 0 {
			return errors.New("no PEM block headers are permitted")
		}
		blocks++
		certs, err := x509.ParseCertificates(block.Bytes)
		if err != nil {
			return err
		}
		if len(certs) == 0 {
			return errors.New("found CERTIFICATE PEM block containing 0 certificates")
		}
		b = rest
	}
	if blocks == 0 {
		return errors.New("must contain at least one CERTIFICATE PEM block")
	}
	return nil
}

// validateSignerName checks a signer name: a domain of at least two DNS
// labels, a slash, and a path of DNS subdomains separated by dots.
func validateSignerName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	domain, path, ok := strings.Cut(name, "/")
	if !ok || strings.Contains(path, "/") {
		return field.ErrorList{field.Invalid(p, name, "must be a fully qualified domain and path of the form 'example.com/signer-name'")}
	}
	var errs field.ErrorList
	const maxDomain = validation.DNS1123SubdomainMaxLength
	if len(domain) > maxDomain {
		errs = append(errs, field.TooLong(p, "", maxDomain))
	}
	labels := strings.Split(domain, ".")
	for _, l := range labels {
		if msgs := validation.IsDNS1123Label(l); len(msgs) > 0 {
			for _, m := range msgs {
				errs = append(errs, field.Invalid(p, domain, fmt.Sprintf("validating label %q: %s", l, m)))
			}
			break
		}
	}
	if len(labels) < 2 {
		errs = append(errs, field.Invalid(p, domain, "should be a domain with at least two segments separated by dots"))
	}
	for _, l := range strings.Split(path, ".") {
		if msgs := validation.IsDNS1123Subdomain(l); len(msgs) > 0 {
			for _, m := range msgs {
				errs = append(errs, field.Invalid(p, path, fmt.Sprintf("validating label %q: %s", l, m)))
			}
			break
		}
	}
	if maxName := maxDomain + maxDomain + validation.DNS1123LabelMaxLength + 2; len(name) > maxName {
		errs = append(errs, field.TooLong(p, "", maxName))
	}
	return errs
}

// kubeAPIServerClientSigner is the signer whose certificates kube-apiserver
// trusts for client authentication.
const kubeAPIServerClientSigner = "kubernetes.io/kube-apiserver-client"

// admitCertificates is Kubernetes' CertificateApproval, CertificateSigning
// and CertificateSubjectRestriction admission plugins: approving (or
// denying) needs the verb approve, and writing a certificate or conditions
// through status the verb sign, on the signer (certificates.k8s.io
// signers, by name or <domain>/*); a request for the kube-apiserver client
// signer may not name the system:masters group.
func (s *Server) admitCertificates(ctx context.Context, a *request.Admission) error {
	if a.APIGroup != "certificates.k8s.io" || a.Resource != "certificatesigningrequests" {
		return nil
	}
	csr, _ := a.Object.(*certificatesv1.CertificateSigningRequest)
	old, _ := a.OldObject.(*certificatesv1.CertificateSigningRequest)
	forbidden := func(why string) error {
		return apierrors.NewForbidden(a.APIGroup, a.Resource, a.Name, why)
	}
	switch {
	case a.Operation == request.Create && a.Subresource == "" && csr != nil:
		if csr.GetSpec().GetSignerName() != kubeAPIServerClientSigner {
			return nil
		}
		block, _ := pem.Decode(csr.GetSpec().GetRequest())
		if block == nil || block.Type != "CERTIFICATE REQUEST" {
			return forbidden("failed to parse CSR: PEM block type must be CERTIFICATE REQUEST")
		}
		req, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			return forbidden("failed to parse CSR: " + err.Error())
		}
		if slices.Contains(req.Subject.Organization, request.MastersGroup) {
			return forbidden(fmt.Sprintf("use of %s signer with system:masters group is not allowed", kubeAPIServerClientSigner))
		}
	case a.Operation == request.Update && a.Subresource == "approval" && old != nil:
		if !s.mayOnSigner(ctx, a.User, "approve", old.GetSpec().GetSignerName()) {
			return forbidden(fmt.Sprintf("user not permitted to approve requests with signerName %q", old.GetSpec().GetSignerName()))
		}
	case a.Operation == request.Update && a.Subresource == "status" && old != nil && csr != nil:
		same := bytes.Equal(csr.GetStatus().GetCertificate(), old.GetStatus().GetCertificate()) &&
			slices.EqualFunc(csr.GetStatus().GetConditions(), old.GetStatus().GetConditions(), func(x, y *certificatesv1.CertificateSigningRequestCondition) bool { return proto.Equal(x, y) })
		if !same && !s.mayOnSigner(ctx, a.User, "sign", old.GetSpec().GetSignerName()) {
			return forbidden(fmt.Sprintf("user not permitted to sign requests with signerName %q", old.GetSpec().GetSignerName()))
		}
	}
	return nil
}

// mayOnSigner asks the authorizer whether u may verb the signer, by its
// name or its domain's wildcard.
func (s *Server) mayOnSigner(ctx context.Context, u request.User, verb, signer string) bool {
	domain, _, _ := strings.Cut(signer, "/")
	for _, name := range []string{signer, domain + "/*"} {
		d, err := s.cfg.Authorizer.Authorize(ctx, request.Attributes{User: u, Verb: verb, APIGroup: "certificates.k8s.io", APIVersion: "*", Resource: "signers", Name: name})
		if err == nil && d.Allowed {
			return true
		}
	}
	return false
}
