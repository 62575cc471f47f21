// This file serves authentication.k8s.io/v1: TokenRequest (the
// serviceaccounts/token subresource), TokenReview, SelfSubjectReview and
// the service account issuer discovery documents.
package apiserver

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kplane/kplane/proto/apierrors"
	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/audit"
	"github.com/kplane/kplane/services/apiserver/authz"
	"github.com/kplane/kplane/services/apiserver/request"
	"github.com/kplane/kplane/services/apiserver/serviceaccount"
)

// TokenAuthenticator authenticates a bearer token for audiences (nil: the
// API's own), as a TokenReview asks; *authn.Authenticator implements it.
// An error says why the token was refused.
type TokenAuthenticator interface {
	AuthenticateToken(ctx context.Context, token string, audiences []string) (request.User, []string, error)
}

// ServiceAccountTokens configures what the API service does with
// ServiceAccount tokens (kube-apiserver's --service-account-* flags).
type ServiceAccountTokens struct {
	// Issuer signs the tokens of TokenRequests; nil: the serviceaccounts/token
	// subresource is not served (NotFound), as kube-apiserver without a
	// signing key.
	Issuer *serviceaccount.Issuer
	// APIAudiences are the audiences a TokenRequest without any gets
	// (--api-audiences; default the issuers).
	APIAudiences []string
	// MaxExpiration caps spec.expirationSeconds (0: no cap).
	MaxExpiration time.Duration
	// ExtendExpiration: a pod-bound token asked for
	// serviceaccount.WarnOnlyExpirationSeconds for the API's audiences is
	// issued for a year with a warnafter claim (Kubernetes'
	// --service-account-extend-token-expiration, default true).
	ExtendExpiration bool
	// Discovery, if set, is served at /.well-known/openid-configuration and
	// /openid/v1/jwks (through the gateway).
	Discovery *serviceaccount.Discovery
}

// issuedCredentialIDAnnotation is the audit annotation of a TokenRequest
// naming the issued token's credential ID.
const issuedCredentialIDAnnotation = "authentication.kubernetes.io/issued-credential-id"

var (
	tokenReviews = &resourceInfo{Group: "authentication.k8s.io", Version: "v1", Kind: "TokenReview", Resource: "tokenreviews"}
	selfReviewsN = &resourceInfo{Group: "authentication.k8s.io", Version: "v1", Kind: "SelfSubjectReview", Resource: "selfsubjectreviews"}
)

// authentications implements the AuthenticationService.
type authentications struct {
	authenticationv1.UnimplementedAuthenticationServiceServer
	s *Server
}

func (x *authentications) CreateServiceAccountToken(ctx context.Context, req *authenticationv1.CreateServiceAccountTokenRequest) (*authenticationv1.CreateServiceAccountTokenResponse, error) {
	tr, err := x.s.createToken(ctx, req.GetNamespace(), req.GetName(), req.GetTokenRequest())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &authenticationv1.CreateServiceAccountTokenResponse{TokenRequest: tr}, nil
}

// createToken issues a token for the ServiceAccount ns/name, as
// kube-apiserver's TokenREST does.
func (s *Server) createToken(ctx context.Context, ns, name string, req *authenticationv1.TokenRequest) (_ *authenticationv1.TokenRequest, err error) {
	sas := s.resources["serviceaccounts"]
	c := s.begin(ctx, "create", sas, "token", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	cfg := s.cfg.ServiceAccountTokens
	if cfg == nil || cfg.Issuer == nil {
		return nil, &apierrors.StatusError{Reason: apierrors.ReasonNotFound, Code: 404, Message: "the server could not find the requested resource"}
	}
	if req == nil {
		req = &authenticationv1.TokenRequest{}
	}
	m := req.GetMetadata()
	if m.GetName() != "" && m.GetName() != name {
		return nil, tokenRequestInvalid(name, "metadata.name", fmt.Sprintf("Invalid value: %q: must match the service account name if specified", m.GetName()))
	}
	if m.GetNamespace() != "" && m.GetNamespace() != ns {
		return nil, tokenRequestInvalid(name, "metadata.namespace", fmt.Sprintf("Invalid value: %q: must match the service account namespace if specified", m.GetNamespace()))
	}
	if node, ok := authz.NodeName(c.attrs.User); ok {
		if err := s.nodeTokenRestriction(ctx, node, ns, name, req); err != nil {
			return nil, err
		}
	}
	obj, err := s.store.get(ctx, sas, ns, name)
	if err != nil {
		return nil, err
	}
	sa := obj.(*corev1.ServiceAccount)
	spec := req.GetSpec()
	if spec == nil {
		spec = &authenticationv1.TokenRequestSpec{}
	}
	if len(spec.GetAudiences()) == 0 {
		spec.Audiences = append([]string(nil), cfg.APIAudiences...)
	}
	if spec.ExpirationSeconds == nil {
		v := int64(serviceaccount.DefaultExpirationSeconds)
		spec.ExpirationSeconds = &v
	}
	now := time.Now()
	switch exp := spec.GetExpirationSeconds(); {
	case exp < serviceaccount.MinExpirationSeconds:
		return nil, tokenRequestInvalid("", "spec.expirationSeconds", fmt.Sprintf("Invalid value: %d: may not specify a duration less than 10 minutes", exp))
	case exp > 1<<32:
		return nil, tokenRequestInvalid("", "spec.expirationSeconds", fmt.Sprintf("Invalid value: %d: may not specify a duration larger than 2^32 seconds", exp))
	}
	b := serviceaccount.Binding{Namespace: ns, ServiceAccount: serviceaccount.Ref{Name: sa.GetMetadata().GetName(), UID: sa.GetMetadata().GetUid()}}
	var pod *corev1.Pod
	if ref := spec.GetBoundObjectRef(); ref != nil {
		pod, err = s.bindToken(ctx, ns, name, ref, &b)
		if err != nil {
			return nil, err
		}
	}
	if maxSec := int64(cfg.MaxExpiration / time.Second); maxSec > 0 && spec.GetExpirationSeconds() > maxSec {
		_ = grpc.SetHeader(ctx, metadata.Pairs(apierrors.WarningHeader,
			apierrors.WarningValue(fmt.Sprintf("requested expiration of %d seconds shortened to %d seconds", spec.GetExpirationSeconds(), maxSec))))
		spec.ExpirationSeconds = &maxSec
	}
	b.Audiences, b.ExpirationSeconds = spec.GetAudiences(), spec.GetExpirationSeconds()
	if cfg.ExtendExpiration && pod != nil && b.ExpirationSeconds == serviceaccount.WarnOnlyExpirationSeconds && subset(b.Audiences, cfg.APIAudiences) {
		b.WarnAfterSeconds, b.ExpirationSeconds = b.ExpirationSeconds, serviceaccount.ExtendedExpirationSeconds
		if maxSec := int64(cfg.MaxExpiration / time.Second); maxSec > b.ExpirationSeconds {
			b.ExpirationSeconds = maxSec
		}
	}
	token, jti, err := cfg.Issuer.Issue(now, b)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("failed to generate token: %w", err))
	}
	// As kube-apiserver: the audit event names the credential ID the
	// token's requests will carry in their user's extra.
	if c.ev.Annotations == nil {
		c.ev.Annotations = map[string]string{}
	}
	c.ev.Annotations[issuedCredentialIDAnnotation] = serviceaccount.CredentialID(jti)
	return &authenticationv1.TokenRequest{
		ApiVersion: "authentication.k8s.io/v1", Kind: "TokenRequest",
		Metadata: &metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: timestamppb.New(now.Truncate(time.Second))},
		Spec:     spec,
		Status: &authenticationv1.TokenRequestStatus{Token: token,
			ExpirationTimestamp: timestamppb.New(now.Add(time.Duration(spec.GetExpirationSeconds()) * time.Second).Truncate(time.Second))},
	}, nil
}

// nodeTokenRestriction is NodeRestriction's rule for a node's
// TokenRequest: the token must be bound to a pod (with its UID) scheduled
// on that node, so a node gets tokens only for its own pods.
func (s *Server) nodeTokenRestriction(ctx context.Context, node, ns, name string, req *authenticationv1.TokenRequest) error {
	forbid := func(why string) error { return apierrors.NewForbidden("", "serviceaccounts", name, why) }
	ref := req.GetSpec().GetBoundObjectRef()
	if ref == nil || ref.GetApiVersion() != "v1" || ref.GetKind() != "Pod" || ref.GetName() == "" {
		return forbid("node requested token not bound to a pod")
	}
	if ref.GetUid() == "" {
		return forbid("node requested token with a pod binding without a uid")
	}
	obj, err := s.store.get(ctx, s.resources["pods"], ns, ref.GetName())
	if apierrors.IsNotFound(err) {
		return err
	}
	if err != nil {
		return forbid(err.Error())
	}
	pod := obj.(*corev1.Pod)
	if pod.GetMetadata().GetUid() != ref.GetUid() {
		return forbid(fmt.Sprintf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.GetUid()))
	}
	if pod.GetSpec().GetNodeName() != node {
		return forbid("node requested token bound to a pod scheduled on a different node")
	}
	return nil
}

// bindToken looks up the object ref names and records it in b; for a
// Pod it also records the Node the pod runs on, and returns the pod.
func (s *Server) bindToken(ctx context.Context, ns, saName string, ref *authenticationv1.BoundObjectReference, b *serviceaccount.Binding) (*corev1.Pod, error) {
	gv, err := schema.ParseGroupVersion(ref.GetApiVersion())
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	gvk := gv.WithKind(ref.GetKind())
	var uid string
	var pod *corev1.Pod
	switch {
	case gvk.Group == "" && gvk.Kind == serviceaccount.KindPod:
		obj, err := s.store.get(ctx, s.resources["pods"], ns, ref.GetName())
		if err != nil {
			return nil, err
		}
		pod = obj.(*corev1.Pod)
		if pod.GetSpec().GetServiceAccountName() != saName {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("cannot bind token for serviceaccount %q to pod running with different serviceaccount name.", saName))
		}
		uid = pod.GetMetadata().GetUid()
		b.Pod = &serviceaccount.Ref{Name: pod.GetMetadata().GetName(), UID: uid}
		if node := pod.GetSpec().GetNodeName(); node != "" {
			b.Node = &serviceaccount.Ref{Name: node}
			switch obj, err := s.store.get(ctx, s.resources["nodes"], "", node); {
			case err == nil:
				b.Node.UID = obj.(*corev1.Node).GetMetadata().GetUid()
			case apierrors.ReasonOf(err) != apierrors.ReasonNotFound:
				return nil, apierrors.NewInternalError(err)
			}
		}
	case gvk.Group == "" && gvk.Kind == serviceaccount.KindNode:
		obj, err := s.store.get(ctx, s.resources["nodes"], "", ref.GetName())
		if err != nil {
			return nil, err
		}
		uid = obj.(*corev1.Node).GetMetadata().GetUid()
		b.Node = &serviceaccount.Ref{Name: ref.GetName(), UID: uid}
	case gvk.Group == "" && gvk.Kind == serviceaccount.KindSecret:
		obj, err := s.store.get(ctx, s.resources["secrets"], ns, ref.GetName())
		if err != nil {
			return nil, err
		}
		uid = obj.(*corev1.Secret).GetMetadata().GetUid()
		b.Secret = &serviceaccount.Ref{Name: ref.GetName(), UID: uid}
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s", gvk.String()))
	}
	if ref.GetUid() != "" && ref.GetUid() != uid {
		return nil, apierrors.NewConflict(gvk.Group, gvk.Kind, ref.GetName(),
			fmt.Sprintf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.GetUid()))
	}
	return pod, nil
}

// tokenRequestInvalid is Kubernetes' Invalid for a TokenRequest (its
// message names the kind with its group, as every Invalid's does).
func tokenRequestInvalid(name, field, msg string) error {
	return apierrors.NewInvalid("authentication.k8s.io", "TokenRequest", name, []apierrors.Cause{{Type: "FieldValueInvalid", Field: field, Message: msg}})
}

// subset says every element of a is in of.
func subset(a, of []string) bool {
	for _, x := range a {
		if !slices.Contains(of, x) {
			return false
		}
	}
	return true
}

func (x *authentications) CreateTokenReview(ctx context.Context, req *authenticationv1.CreateTokenReviewRequest) (*authenticationv1.CreateTokenReviewResponse, error) {
	tr, err := x.s.tokenReview(ctx, req.GetTokenReview())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &authenticationv1.CreateTokenReviewResponse{TokenReview: tr}, nil
}

// tokenReview authenticates spec.token for spec.audiences, as
// kube-apiserver's TokenReview REST does.
func (s *Server) tokenReview(ctx context.Context, review *authenticationv1.TokenReview) (_ *authenticationv1.TokenReview, err error) {
	c := s.begin(ctx, "create", tokenReviews, "", "", "")
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	if review.GetSpec().GetToken() == "" {
		return nil, apierrors.NewBadRequest("token is required for TokenReview in authentication")
	}
	out := &authenticationv1.TokenReview{ApiVersion: "authentication.k8s.io/v1", Kind: "TokenReview", Metadata: review.GetMetadata(), Spec: review.GetSpec(),
		Status: &authenticationv1.TokenReviewStatus{User: &authenticationv1.UserInfo{}}}
	if s.cfg.TokenAuthenticator == nil {
		out.Status.Error = "invalid bearer token"
		return out, nil
	}
	auds := review.GetSpec().GetAudiences()
	if len(auds) == 0 {
		auds = nil
	}
	u, validFor, aerr := s.cfg.TokenAuthenticator.AuthenticateToken(ctx, review.GetSpec().GetToken(), auds)
	if aerr != nil {
		out.Status.Error = aerr.Error()
		return out, nil
	}
	out.Status.Authenticated = true
	out.Status.User = userInfo(withAuthenticatedGroup(u))
	out.Status.Audiences = validFor
	return out, nil
}

func (x *authentications) CreateSelfSubjectReview(ctx context.Context, req *authenticationv1.CreateSelfSubjectReviewRequest) (*authenticationv1.CreateSelfSubjectReviewResponse, error) {
	r, err := x.s.selfSubjectReview(ctx, req.GetSelfSubjectReview())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &authenticationv1.CreateSelfSubjectReviewResponse{SelfSubjectReview: r}, nil
}

// selfSubjectReview answers who the caller is (after impersonation), as
// kube-apiserver does.
func (s *Server) selfSubjectReview(ctx context.Context, review *authenticationv1.SelfSubjectReview) (_ *authenticationv1.SelfSubjectReview, err error) {
	c := s.begin(ctx, "create", selfReviewsN, "", "", "")
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	m := review.GetMetadata()
	if m == nil {
		m = &metav1.ObjectMeta{}
	}
	m.CreationTimestamp = timestamppb.New(time.Now().Truncate(time.Second))
	return &authenticationv1.SelfSubjectReview{ApiVersion: "authentication.k8s.io/v1", Kind: "SelfSubjectReview", Metadata: m,
		Status: &authenticationv1.SelfSubjectReviewStatus{UserInfo: userInfo(c.attrs.User)}}, nil
}

func (x *authentications) GetServiceAccountIssuerOpenIDConfiguration(ctx context.Context, _ *authenticationv1.GetServiceAccountIssuerOpenIDConfigurationRequest) (*authenticationv1.GetServiceAccountIssuerOpenIDConfigurationResponse, error) {
	d, err := x.s.discovery(ctx, serviceaccount.OpenIDConfigPath)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &authenticationv1.GetServiceAccountIssuerOpenIDConfigurationResponse{Json: d.Config}, nil
}

func (x *authentications) GetServiceAccountIssuerJWKS(ctx context.Context, _ *authenticationv1.GetServiceAccountIssuerJWKSRequest) (*authenticationv1.GetServiceAccountIssuerJWKSResponse, error) {
	d, err := x.s.discovery(ctx, serviceaccount.JWKSPath)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &authenticationv1.GetServiceAccountIssuerJWKSResponse{Json: d.JWKS}, nil
}

// discovery authorizes a get of the non-resource path and returns the
// discovery documents (NotFound when not configured, as kube-apiserver
// without an https issuer).
func (s *Server) discovery(ctx context.Context, path string) (_ *serviceaccount.Discovery, err error) {
	c := &call{ev: audit.NewEvent(audit.NewID(), time.Now()), attrs: request.Attributes{Verb: "get", Path: path}}
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	cfg := s.cfg.ServiceAccountTokens
	if cfg == nil || cfg.Discovery == nil {
		return nil, &apierrors.StatusError{Reason: apierrors.ReasonNotFound, Code: 404, Message: "the server could not find the requested resource"}
	}
	return cfg.Discovery, nil
}

func userInfo(u request.User) *authenticationv1.UserInfo {
	ui := &authenticationv1.UserInfo{Username: u.Name, Uid: u.UID, Groups: u.Groups}
	for k, v := range u.Extra {
		if ui.Extra == nil {
			ui.Extra = map[string]*authenticationv1.ExtraValue{}
		}
		ui.Extra[k] = &authenticationv1.ExtraValue{Items: v}
	}
	return ui
}

func withAuthenticatedGroup(u request.User) request.User {
	if slices.Contains(u.Groups, request.AuthenticatedGroup) {
		return u
	}
	u.Groups = append(append([]string(nil), u.Groups...), request.AuthenticatedGroup)
	return u
}
