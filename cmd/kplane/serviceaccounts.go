// This file holds the API service's ServiceAccount token flags, as
// kube-apiserver's: --service-account-issuer, -signing-key-file, -key-file,
// -max-token-expiration, -jwks-uri, -extend-token-expiration and
// --api-audiences.
package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/apiserver/serviceaccount"
)

type saFlags struct {
	issuers          []string
	signingKeyFile   string
	keyFiles         []string
	maxExpiration    time.Duration
	extendExpiration bool
	jwksURI          string
	apiAudiences     []string
}

func (s *saFlags) register(f *pflag.FlagSet) {
	f.StringArrayVar(&s.issuers, "service-account-issuer", nil, "identifier of the ServiceAccount token issuer (the iss claim), as kube-apiserver's: repeat it to accept several; the first one issues. An https URL also serves the issuer discovery documents (/.well-known/openid-configuration, /openid/v1/jwks) at the gateway")
	f.StringVar(&s.signingKeyFile, "service-account-signing-key-file", "", "PEM RSA or ECDSA private key that signs ServiceAccount tokens (TokenRequest, kubectl create token); needs --service-account-issuer")
	f.StringArrayVar(&s.keyFiles, "service-account-key-file", nil, "PEM file of public (or private) keys that verify ServiceAccount tokens; repeat it for several (every replica's signing key, for rotation); default the signing key's public half")
	f.DurationVar(&s.maxExpiration, "service-account-max-token-expiration", 0, "the longest a TokenRequest's token is issued for (longer requests are shortened); 0: no cap")
	f.BoolVar(&s.extendExpiration, "service-account-extend-token-expiration", true, "issue pod-bound tokens asked for 3607 s for a year, with a warnafter claim, as kube-apiserver does")
	f.StringVar(&s.jwksURI, "service-account-jwks-uri", "", "jwks_uri of the discovery document; default https://<advertise-address>:<secure-port>/openid/v1/jwks")
	f.StringSliceVar(&s.apiAudiences, "api-audiences", nil, "audiences the API accepts in tokens (and gives TokenRequests without any); default the --service-account-issuer values")
}

func (s *saFlags) audiences() []string {
	if len(s.apiAudiences) > 0 {
		return s.apiAudiences
	}
	return s.issuers
}

// build loads the keys: the API service's token configuration, the
// ServiceAccount token authenticator and the cache it reads (all nil when
// no flag is set).
func (s *saFlags) build(advertise string, port int) (*apiserver.ServiceAccountTokens, *serviceaccount.Authenticator, *serviceaccount.Objects, error) {
	if len(s.issuers) == 0 {
		if s.signingKeyFile != "" || len(s.keyFiles) > 0 {
			return nil, nil, nil, errors.New("--service-account-signing-key-file and --service-account-key-file need --service-account-issuer")
		}
		return nil, nil, nil, nil
	}
	for _, iss := range s.issuers {
		if iss == "" {
			return nil, nil, nil, errors.New("--service-account-issuer must not be empty")
		}
	}
	if s.maxExpiration < 0 {
		return nil, nil, nil, fmt.Errorf("--service-account-max-token-expiration %s: must not be negative", s.maxExpiration)
	}
	tokens := &apiserver.ServiceAccountTokens{APIAudiences: s.audiences(), MaxExpiration: s.maxExpiration, ExtendExpiration: s.extendExpiration}
	var keys []serviceaccount.PublicKey
	if s.signingKeyFile != "" {
		key, err := serviceaccount.LoadSigningKey(s.signingKeyFile)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--service-account-signing-key-file: %w", err)
		}
		if tokens.Issuer, err = serviceaccount.NewIssuer(s.issuers[0], key); err != nil {
			return nil, nil, nil, err
		}
		if len(s.keyFiles) == 0 {
			id, err := serviceaccount.KeyID(key.Public())
			if err != nil {
				return nil, nil, nil, err
			}
			keys = append(keys, serviceaccount.PublicKey{KeyID: id, Key: key.Public()})
		}
	}
	if len(s.keyFiles) > 0 {
		var err error
		if keys, err = serviceaccount.LoadPublicKeys(s.keyFiles...); err != nil {
			return nil, nil, nil, fmt.Errorf("--service-account-key-file: %w", err)
		}
	}
	if len(keys) == 0 {
		return nil, nil, nil, errors.New("--service-account-key-file or --service-account-signing-key-file must be set with --service-account-issuer")
	}
	if u, err := url.Parse(s.issuers[0]); err == nil && u.Scheme == "https" {
		jwks := s.jwksURI
		if jwks == "" && advertise != "" {
			jwks = (&url.URL{Scheme: "https", Host: net.JoinHostPort(advertise, strconv.Itoa(port)), Path: serviceaccount.JWKSPath}).String()
		}
		if jwks != "" {
			d, err := serviceaccount.NewDiscovery(s.issuers[0], jwks, keys)
			if err != nil {
				return nil, nil, nil, err
			}
			tokens.Discovery = d
		}
	}
	objects := serviceaccount.NewObjects()
	an, err := serviceaccount.NewAuthenticator(serviceaccount.AuthenticatorConfig{Issuers: s.issuers, Keys: keys, APIAudiences: s.audiences(), Objects: objects})
	if err != nil {
		return nil, nil, nil, err
	}
	return tokens, an, objects, nil
}
