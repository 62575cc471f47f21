// This file holds the API service's flags for external OpenID Connect
// issuers, as kube-apiserver's: the --oidc-* flags, or a structured
// --authentication-config file.
package main

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/kplane/kplane/services/apiserver/jwtauthn"
)

type oidcFlags struct {
	configFile     string
	flags          jwtauthn.Flags
	signingAlgs    []string
	requiredClaims []string
}

func (o *oidcFlags) register(f *pflag.FlagSet) {
	f.StringVar(&o.configFile, "authentication-config", "", "AuthenticationConfiguration file (apiserver.config.k8s.io/v1beta1): JWT issuers with audiences, claim validation rules and claim mappings (CEL), as kube-apiserver's; excludes the --oidc-* flags")
	f.StringVar(&o.flags.IssuerURL, "oidc-issuer-url", "", "https URL of the OpenID Connect issuer whose ID tokens are accepted as bearer tokens")
	f.StringVar(&o.flags.ClientID, "oidc-client-id", "", "the client ID tokens must be issued for (their aud claim); needs --oidc-issuer-url")
	f.StringVar(&o.flags.CAFile, "oidc-ca-file", "", "PEM CA that verifies the issuer's HTTPS server; default the host's roots")
	f.StringVar(&o.flags.UsernameClaim, "oidc-username-claim", "sub", "the claim that is the user name; any claim but email is prefixed with the issuer URL and '#' unless --oidc-username-prefix says otherwise")
	f.StringVar(&o.flags.UsernamePrefix, "oidc-username-prefix", "", "prefix of user names from tokens; '-' for none")
	f.StringVar(&o.flags.GroupsClaim, "oidc-groups-claim", "", "the claim (a string or a list of strings) holding the user's groups")
	f.StringVar(&o.flags.GroupsPrefix, "oidc-groups-prefix", "", "prefix of group names from tokens")
	f.StringSliceVar(&o.signingAlgs, "oidc-signing-algs", []string{"RS256"}, "JOSE signing algorithms accepted")
	f.StringArrayVar(&o.requiredClaims, "oidc-required-claim", nil, "key=value a token's claims must hold; repeat it for several")
}

// build returns the authenticator of the configured issuers, nil when none
// is configured. ServiceAccount issuers may not be configured as external
// ones.
func (o *oidcFlags) build(ctx context.Context, apiAudiences, saIssuers []string) (*jwtauthn.Authenticator, error) {
	claims, err := jwtauthn.ParseRequiredClaims(o.requiredClaims)
	if err != nil {
		return nil, err
	}
	o.flags.RequiredClaims = claims
	opts := jwtauthn.Options{ConfigFile: o.configFile, Flags: o.flags, SigningAlgs: o.signingAlgs,
		APIAudiences: apiAudiences, DisallowedIssuers: saIssuers}
	if !opts.Enabled() {
		return nil, nil
	}
	return jwtauthn.New(ctx, opts)
}
