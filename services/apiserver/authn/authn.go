// Package authn authenticates a gRPC request to the API service from its
// context: a verified TLS client certificate, a bearer token from a static
// token file or a ServiceAccount token, or (only when enabled) no
// credentials at all.
//
// # Identities
//
//   - A client certificate that the TLS layer verified against the client CA
//     (tls.Config.ClientAuth VerifyClientCertIfGiven or RequireAndVerifyClientCert):
//     the subject's CommonName is the user name, each Organization a group.
//     An unverified certificate is ignored.
//   - A bearer token in the gRPC metadata `authorization: Bearer <token>`,
//     looked up in a token file in Kubernetes' static token CSV format:
//     `token,user,uid,"group1,group2"` (the groups column is optional).
//     A token not in the file goes to the ServiceAccount token authenticator,
//     if one is configured (a JWT signed by the service account key), then
//     to the external OpenID Connect issuers' authenticator, if configured.
//     A presented but unknown or invalid token is refused (Unauthorized,
//     as kube-apiserver, with no reason given), never treated as anonymous.
//   - No credentials: system:anonymous in group system:unauthenticated when
//     anonymous access is enabled, else Unauthorized.
//
// Every authenticated (non-anonymous) user also gets the group
// system:authenticated.
//
// # Front proxies
//
// A trusted front proxy (kplane's gateway) authenticates with its own client
// certificate holding one of Config.FrontProxyGroups (default
// system:kplane-gateways) and passes the end user it authenticated on in the
// metadata keys of package identity (kplane-impersonate-user, -uid, -group).
// The request is then authenticated as that end user (plus
// system:authenticated). Instead, a front proxy may pass on the end user's
// bearer token, which it could not check itself (a ServiceAccount token), in
// kplane-forwarded-token, and the request is authenticated as that token's
// user. Anyone else setting any of these keys is refused with Forbidden, and
// so is a proxy identity that came from a bearer token rather than a
// certificate.
package authn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/kplane/kplane/internal/tokenfile"
	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/proto/identity"
	"github.com/kplane/kplane/services/apiserver/request"
)

// Config configures an Authenticator.
type Config struct {
	// TokenFile is a static token CSV file; empty disables bearer tokens.
	TokenFile string
	// Anonymous lets requests without credentials through as system:anonymous.
	Anonymous bool
	// FrontProxyGroups are the groups whose members, authenticated by a
	// client certificate, may pass an end user on. Nil means
	// [identity.DefaultFrontProxyGroup]; an empty non-nil slice disables front proxies.
	FrontProxyGroups []string
	// Logger records why a token was refused (at debug); nil discards.
	Logger *slog.Logger
	// ServiceAccounts, if set, authenticates the bearer tokens the token
	// file does not hold (ServiceAccount JWTs).
	ServiceAccounts TokenAuthenticator
	// JWT, if set, authenticates the bearer tokens of external OpenID
	// Connect issuers (jwtauthn), tried after ServiceAccount tokens, as
	// kube-apiserver orders them.
	JWT TokenAuthenticator
	// APIAudiences are the API's own audiences (--api-audiences): a
	// TokenReview asking for others does not accept static tokens.
	APIAudiences []string
}

// TokenAuthenticator authenticates one kind of bearer token for audiences
// (nil: the API's own). ok false with a nil error means the token is not of
// its kind; an error means it is, but invalid. validFor are the audiences
// asked for that the token is valid for.
type TokenAuthenticator interface {
	AuthenticateToken(ctx context.Context, token string, audiences []string) (u request.User, validFor []string, ok bool, err error)
}

// Authenticator authenticates requests. It is safe for concurrent use; its
// token table is read once, in New.
type Authenticator struct {
	tokens     tokenfile.Tokens
	anonymous  bool
	proxyGroup []string
	sa         TokenAuthenticator
	jwt        TokenAuthenticator
	auds       []string
	log        *slog.Logger
}

// New reads cfg.TokenFile (if any) and returns an Authenticator.
func New(cfg Config) (*Authenticator, error) {
	a := &Authenticator{anonymous: cfg.Anonymous, proxyGroup: cfg.FrontProxyGroups, sa: cfg.ServiceAccounts, jwt: cfg.JWT, auds: cfg.APIAudiences, log: cfg.Logger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.proxyGroup == nil {
		a.proxyGroup = []string{identity.DefaultFrontProxyGroup}
	}
	if cfg.TokenFile != "" {
		var err error
		if a.tokens, err = tokenfile.Read(cfg.TokenFile); err != nil {
			return nil, fmt.Errorf("authn: %w", err)
		}
	}
	return a, nil
}

// Authenticate returns the user a request comes from, or an *apierrors.StatusError:
// Unauthorized for missing or bad credentials, Forbidden for impersonation
// metadata set by a caller that may not set it.
func (a *Authenticator) Authenticate(ctx context.Context) (request.User, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	caller, viaCert, err := a.authenticateCaller(ctx, md)
	if err != nil {
		return request.User{}, err
	}
	forwarded := md.Get(identity.ForwardedTokenKey)
	if !impersonating(md) && len(forwarded) == 0 {
		return caller, nil
	}
	if !viaCert || !a.isFrontProxy(caller) {
		target := first(md.Get(identity.ImpersonateUserKey))
		return request.User{}, apierrors.NewForbidden("", "users", target,
			fmt.Sprintf("User %q cannot impersonate users: only a front proxy authenticated by a client certificate in one of the groups %q may pass an end user on", caller.Name, a.proxyGroup))
	}
	if len(forwarded) > 0 {
		if impersonating(md) || len(forwarded) != 1 {
			return request.User{}, apierrors.NewBadRequest(fmt.Sprintf("%s must be given exactly once and without %s", identity.ForwardedTokenKey, identity.ImpersonateUserKey))
		}
		u, err := a.tokenUser(ctx, forwarded[0])
		if err != nil {
			return request.User{}, err
		}
		return withAuthenticated(u), nil
	}
	names := md.Get(identity.ImpersonateUserKey)
	if len(names) != 1 || names[0] == "" {
		return request.User{}, apierrors.NewBadRequest(fmt.Sprintf("%s must be given exactly once and not empty", identity.ImpersonateUserKey))
	}
	u := request.User{Name: names[0], UID: first(md.Get(identity.ImpersonateUIDKey))}
	for _, g := range md.Get(identity.ImpersonateGroupKey) {
		if g != "" && !slices.Contains(u.Groups, g) {
			u.Groups = append(u.Groups, g)
		}
	}
	return withAuthenticated(u), nil
}

// authenticateCaller identifies the direct caller. viaCert says the identity
// came from a verified client certificate.
func (a *Authenticator) authenticateCaller(ctx context.Context, md metadata.MD) (u request.User, viaCert bool, err error) {
	if u, ok := fromCertificate(ctx); ok {
		return withAuthenticated(u), true, nil
	}
	if auth := md.Get("authorization"); len(auth) > 0 {
		u, err := a.fromToken(ctx, auth)
		if err != nil {
			return request.User{}, false, err
		}
		return withAuthenticated(u), false, nil
	}
	if a.anonymous {
		return request.User{Name: request.AnonymousUser, Groups: []string{request.UnauthenticatedGroup}}, false, nil
	}
	return request.User{}, false, apierrors.NewUnauthorized("")
}

// fromCertificate returns the identity in the peer's verified client
// certificate, if there is one.
func fromCertificate(ctx context.Context) (request.User, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return request.User{}, false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return request.User{}, false
	}
	leaf := ti.State.VerifiedChains[0][0]
	if leaf.Subject.CommonName == "" {
		return request.User{}, false
	}
	u := request.User{Name: leaf.Subject.CommonName}
	for _, o := range leaf.Subject.Organization {
		if o != "" && !slices.Contains(u.Groups, o) {
			u.Groups = append(u.Groups, o)
		}
	}
	return u, true
}

func (a *Authenticator) fromToken(ctx context.Context, values []string) (request.User, error) {
	if len(values) != 1 {
		return request.User{}, apierrors.NewUnauthorized("")
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(values[0]), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return request.User{}, apierrors.NewUnauthorized("")
	}
	return a.tokenUser(ctx, token)
}

// tokenUser authenticates a bearer token for the API's audiences, or
// answers Unauthorized.
func (a *Authenticator) tokenUser(ctx context.Context, token string) (request.User, error) {
	u, _, err := a.AuthenticateToken(ctx, token, nil)
	if err != nil {
		a.log.DebugContext(ctx, "bearer token refused", "err", err)
		return request.User{}, apierrors.NewUnauthorized("")
	}
	return u, nil
}

// StaticToken returns the user of token in the static token file, if it is
// there.
func (a *Authenticator) StaticToken(token string) (request.User, bool) {
	return a.tokens.StaticToken(token)
}

// AuthenticateToken authenticates token for audiences (nil: the API's own),
// as a TokenReview asks: the static token file (valid for the API's
// audiences only), then ServiceAccount tokens. It returns the user (without
// system:authenticated) and the audiences asked for that the token is valid
// for, or an error saying why the token was refused.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string, audiences []string) (request.User, []string, error) {
	if u, ok := a.StaticToken(token); ok {
		if audiences == nil {
			return u, slices.Clone(a.auds), nil
		}
		if len(a.auds) == 0 {
			return u, audiences, nil
		}
		var validFor []string
		for _, aud := range audiences {
			if slices.Contains(a.auds, aud) {
				validFor = append(validFor, aud)
			}
		}
		if len(validFor) > 0 {
			return u, validFor, nil
		}
		return request.User{}, nil, errors.New("token audiences are invalid for the target audiences")
	}
	if a.sa != nil {
		u, validFor, ok, err := a.sa.AuthenticateToken(ctx, token, audiences)
		if err != nil {
			return request.User{}, nil, fmt.Errorf("[invalid bearer token, %w]", err)
		}
		if ok {
			return u, validFor, nil
		}
	}
	if a.jwt != nil {
		u, validFor, ok, err := a.jwt.AuthenticateToken(ctx, token, audiences)
		if err != nil {
			return request.User{}, nil, fmt.Errorf("[invalid bearer token, %w]", err)
		}
		if ok {
			return u, validFor, nil
		}
	}
	return request.User{}, nil, errors.New("invalid bearer token")
}

func (a *Authenticator) isFrontProxy(u request.User) bool {
	for _, g := range u.Groups {
		if slices.Contains(a.proxyGroup, g) {
			return true
		}
	}
	return false
}

func impersonating(md metadata.MD) bool {
	return len(md.Get(identity.ImpersonateUserKey)) > 0 || len(md.Get(identity.ImpersonateUIDKey)) > 0 || len(md.Get(identity.ImpersonateGroupKey)) > 0
}

func withAuthenticated(u request.User) request.User {
	if !slices.Contains(u.Groups, request.AuthenticatedGroup) {
		u.Groups = append(u.Groups, request.AuthenticatedGroup)
	}
	return u
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
