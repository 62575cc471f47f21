// Package jwtauthn authenticates bearer tokens issued by external OpenID
// Connect providers (people's identities: a company's identity provider,
// Dex, Keycloak...), configured as kube-apiserver configures them: the
// legacy --oidc-* flags, or a structured AuthenticationConfiguration file
// (apiserver.config.k8s.io, --authentication-config) with several issuers,
// audiences, claim validation rules and CEL claim mappings.
//
// The verification itself (discovery of the issuer's keys, signature,
// expiry, audiences, claim mappings, the "system:" prefix ban) is
// k8s.io/apiserver's JWT authenticator, the one kube-apiserver runs; this
// package loads and checks the configuration, builds one authenticator per
// issuer, and answers for the API's audiences as kube-apiserver does (a
// token of a configured issuer is valid for the API, whatever audiences
// the API accepts for ServiceAccount tokens).
package jwtauthn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	apiserverinstall "k8s.io/apiserver/pkg/apis/apiserver/install"
	apiservervalidation "k8s.io/apiserver/pkg/apis/apiserver/validation"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/oidc"

	"github.com/kplane/kplane/services/apiserver/request"
)

// Flags are kube-apiserver's --oidc-* flags: one issuer, one audience.
type Flags struct {
	IssuerURL      string            // --oidc-issuer-url (https)
	ClientID       string            // --oidc-client-id: the audience tokens must carry
	CAFile         string            // --oidc-ca-file: the issuer's CA (PEM); empty: the host's roots
	UsernameClaim  string            // --oidc-username-claim (default "sub")
	UsernamePrefix string            // --oidc-username-prefix; "-" for none
	GroupsClaim    string            // --oidc-groups-claim
	GroupsPrefix   string            // --oidc-groups-prefix
	RequiredClaims map[string]string // --oidc-required-claim key=value
}

// set reports whether any flag was given.
func (f Flags) set() bool {
	return f.IssuerURL != "" || f.ClientID != "" || f.CAFile != "" || f.UsernamePrefix != "" ||
		f.GroupsClaim != "" || f.GroupsPrefix != "" || len(f.RequiredClaims) > 0 ||
		(f.UsernameClaim != "" && f.UsernameClaim != "sub")
}

// Options configure New.
type Options struct {
	// ConfigFile is an AuthenticationConfiguration file
	// (apiserver.config.k8s.io/v1beta1 or v1alpha1); it excludes Flags.
	ConfigFile string
	Flags      Flags
	// SigningAlgs are the JOSE algorithms accepted (--oidc-signing-algs;
	// default RS256).
	SigningAlgs []string
	// APIAudiences are the audiences the API accepts (--api-audiences):
	// what a token of a configured issuer is valid for.
	APIAudiences []string
	// DisallowedIssuers are the ServiceAccount token issuers: no external
	// issuer may take their place.
	DisallowedIssuers []string
}

// Enabled reports whether o configures any issuer.
func (o Options) Enabled() bool { return o.ConfigFile != "" || o.Flags.set() }

// Authenticator authenticates tokens of the configured issuers.
type Authenticator struct {
	token  authenticator.Token
	checks []func() error
	auds   []string
}

// New loads and validates the configuration and starts the discovery of
// every issuer's keys, which lasts as long as ctx. A token is refused
// until its issuer's keys are known (HealthCheck says so).
func New(ctx context.Context, o Options) (*Authenticator, error) {
	cfg, err := o.configuration()
	if err != nil {
		return nil, err
	}
	compiler := authenticationcel.NewDefaultCompiler()
	if errs := apiservervalidation.ValidateAuthenticationConfiguration(compiler, cfg, o.DisallowedIssuers); len(errs) > 0 {
		return nil, fmt.Errorf("jwtauthn: invalid authentication configuration: %w", errs.ToAggregate())
	}
	a := &Authenticator{auds: slices.Clone(o.APIAudiences)}
	var tokens []authenticator.Token
	for _, jwt := range cfg.JWT {
		var ca oidc.CAContentProvider
		if jwt.Issuer.CertificateAuthority != "" {
			ca = staticCA(jwt.Issuer.CertificateAuthority)
		}
		t, err := oidc.New(ctx, oidc.Options{JWTAuthenticator: jwt, CAContentProvider: ca, Compiler: compiler,
			SupportedSigningAlgs: o.SigningAlgs, DisallowedIssuers: o.DisallowedIssuers})
		if err != nil {
			return nil, fmt.Errorf("jwtauthn: issuer %s: %w", jwt.Issuer.URL, err)
		}
		tokens = append(tokens, t)
		a.checks = append(a.checks, t.HealthCheck)
	}
	a.token = failOnError(tokens)
	return a, nil
}

// configuration is the AuthenticationConfiguration o describes: the file,
// or the one kube-apiserver builds from its --oidc-* flags.
func (o Options) configuration() (*apiserverapi.AuthenticationConfiguration, error) {
	if o.ConfigFile != "" {
		if o.Flags.set() {
			return nil, errors.New("jwtauthn: authentication-config file and oidc-* flags are mutually exclusive")
		}
		data, err := os.ReadFile(o.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("jwtauthn: %w", err)
		}
		return Load(data)
	}
	f := o.Flags
	if f.IssuerURL == "" || f.ClientID == "" {
		return nil, errors.New("jwtauthn: oidc-issuer-url and oidc-client-id must be specified together when any oidc-* flags are set")
	}
	claim := f.UsernameClaim
	if claim == "" {
		claim = "sub"
	}
	// As kube-apiserver: without a prefix, every claim but email is
	// prefixed with the issuer URL and "#"; "-" means no prefix at all.
	prefix := f.UsernamePrefix
	switch {
	case prefix == "-":
		prefix = ""
	case prefix == "" && claim != "email":
		prefix = f.IssuerURL + "#"
	}
	jwt := apiserverapi.JWTAuthenticator{
		Issuer:        apiserverapi.Issuer{URL: f.IssuerURL, Audiences: []string{f.ClientID}},
		ClaimMappings: apiserverapi.ClaimMappings{Username: apiserverapi.PrefixedClaimOrExpression{Claim: claim, Prefix: &prefix}},
	}
	if f.GroupsClaim != "" {
		gp := f.GroupsPrefix
		jwt.ClaimMappings.Groups = apiserverapi.PrefixedClaimOrExpression{Claim: f.GroupsClaim, Prefix: &gp}
	}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("jwtauthn: oidc-ca-file: %w", err)
		}
		jwt.Issuer.CertificateAuthority = string(pem)
	}
	keys := make([]string, 0, len(f.RequiredClaims))
	for k := range f.RequiredClaims {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		jwt.ClaimValidationRules = append(jwt.ClaimValidationRules, apiserverapi.ClaimValidationRule{Claim: k, RequiredValue: f.RequiredClaims[k]})
	}
	return &apiserverapi.AuthenticationConfiguration{JWT: []apiserverapi.JWTAuthenticator{jwt}}, nil
}

// Load decodes an AuthenticationConfiguration strictly (an unknown field
// is an error), at any version kube-apiserver v1.33 reads. Its anonymous
// section is refused: kplane's anonymous access is --anonymous-auth.
func Load(data []byte) (*apiserverapi.AuthenticationConfiguration, error) {
	if len(data) == 0 {
		return nil, errors.New("jwtauthn: empty authentication configuration")
	}
	scheme := runtime.NewScheme()
	apiserverinstall.Install(scheme)
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	obj, err := runtime.Decode(codecs.UniversalDecoder(), data)
	if err != nil {
		return nil, fmt.Errorf("jwtauthn: authentication configuration: %w", err)
	}
	cfg, ok := obj.(*apiserverapi.AuthenticationConfiguration)
	if !ok {
		return nil, fmt.Errorf("jwtauthn: expected AuthenticationConfiguration, got %T", obj)
	}
	if cfg.Anonymous != nil {
		return nil, errors.New("jwtauthn: authentication configuration: anonymous is not supported by kplane; use --anonymous-auth")
	}
	return cfg, nil
}

// HealthCheck is nil once every issuer's keys are known.
func (a *Authenticator) HealthCheck() error {
	var errs []error
	for _, c := range a.checks {
		if err := c(); err != nil {
			errs = append(errs, err)
		}
	}
	return utilerrors.NewAggregate(errs)
}

// AuthenticateToken authenticates token for audiences (nil: the API's
// own). ok is false, with no error, for a token no configured issuer
// issued; an error says why a token of a configured issuer was refused.
// validFor are the audiences asked for that the token is valid for.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string, audiences []string) (_ request.User, validFor []string, ok bool, _ error) {
	validFor = slices.Clone(a.auds)
	if audiences != nil {
		validFor = nil
		for _, aud := range audiences {
			if len(a.auds) == 0 || slices.Contains(a.auds, aud) {
				validFor = append(validFor, aud)
			}
		}
		if len(validFor) == 0 {
			return request.User{}, nil, false, nil
		}
	}
	resp, ok, err := a.token.AuthenticateToken(ctx, token)
	if err != nil || !ok {
		return request.User{}, nil, false, err
	}
	info := resp.User
	u := request.User{Name: info.GetName(), UID: info.GetUID(), Groups: slices.Clone(info.GetGroups())}
	if extra := info.GetExtra(); len(extra) > 0 {
		u.Extra = make(map[string][]string, len(extra))
		for k, v := range extra {
			u.Extra[k] = slices.Clone(v)
		}
	}
	return u, validFor, true, nil
}

// staticCA is an issuer's CA bundle (PEM), read once.
type staticCA []byte

func (c staticCA) CurrentCABundleContent() []byte { return c }

// failOnError tries each authenticator in turn and stops at the first
// that knows the token (ok) or refuses it (an error), as kube-apiserver's
// union of JWT authenticators does.
func failOnError(ts []authenticator.Token) authenticator.Token {
	return authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		for _, t := range ts {
			resp, ok, err := t.AuthenticateToken(ctx, token)
			if err != nil {
				return nil, false, err
			}
			if ok {
				return resp, true, nil
			}
		}
		return nil, false, nil
	})
}

// ParseRequiredClaims parses --oidc-required-claim values (key=value).
func ParseRequiredClaims(values []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range values {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("jwtauthn: --oidc-required-claim %q: want key=value", v)
		}
		out[k] = val
	}
	return out, nil
}
