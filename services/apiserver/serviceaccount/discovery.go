// This file holds the service account issuer discovery documents
// (/.well-known/openid-configuration and /openid/v1/jwks), as
// kube-apiserver serves them.
package serviceaccount

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"

	jose "github.com/go-jose/go-jose/v4"
)

// Paths of the discovery documents.
const (
	OpenIDConfigPath = "/.well-known/openid-configuration"
	JWKSPath         = "/openid/v1/jwks"
)

// Discovery holds the two documents, built once.
type Discovery struct {
	Config []byte // the OpenID configuration, application/json
	JWKS   []byte // the key set, application/jwk-set+json
}

// NewDiscovery builds the documents of issuer (an https URL without query
// or fragment, as Kubernetes requires for discovery) whose keys are at
// jwksURI (https) and verify with keys.
func NewDiscovery(issuer, jwksURI string, keys []PublicKey) (*Discovery, error) {
	iss, err := url.Parse(issuer)
	if err != nil {
		return nil, fmt.Errorf("serviceaccount: issuer URL: %w", err)
	}
	switch {
	case iss.Scheme != "https":
		return nil, fmt.Errorf("serviceaccount: issuer URL must use https scheme, got: %s", issuer)
	case iss.RawQuery != "":
		return nil, fmt.Errorf("serviceaccount: issuer URL may not include a query, got: %s", issuer)
	case iss.Fragment != "":
		return nil, fmt.Errorf("serviceaccount: issuer URL may not include a fragment, got: %s", issuer)
	}
	if u, err := url.Parse(jwksURI); err != nil || u.Scheme != "https" {
		return nil, fmt.Errorf("serviceaccount: jwksURI requires https scheme, got: %q", jwksURI)
	}
	if len(keys) == 0 {
		return nil, errors.New("serviceaccount: no keys provided for validating keyset")
	}
	var set jose.JSONWebKeySet
	var algs []string
	for i, k := range keys {
		alg, err := algorithmOf(k)
		if err != nil {
			return nil, fmt.Errorf("serviceaccount: key #%d: %w", i, err)
		}
		set.Keys = append(set.Keys, jose.JSONWebKey{Algorithm: alg, Key: k.Key, KeyID: k.KeyID, Use: "sig"})
		if !slices.Contains(algs, alg) {
			algs = append(algs, alg)
		}
	}
	slices.Sort(algs)
	cfg, err := json.Marshal(struct {
		Issuer        string   `json:"issuer"`
		JWKSURI       string   `json:"jwks_uri"`
		ResponseTypes []string `json:"response_types_supported"`
		SubjectTypes  []string `json:"subject_types_supported"`
		SigningAlgs   []string `json:"id_token_signing_alg_values_supported"`
	}{issuer, jwksURI, []string{"id_token"}, []string{"public"}, algs})
	if err != nil {
		return nil, fmt.Errorf("serviceaccount: openid configuration: %w", err)
	}
	jwks, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("serviceaccount: jwks: %w", err)
	}
	return &Discovery{Config: cfg, JWKS: jwks}, nil
}

func algorithmOf(k PublicKey) (string, error) {
	switch pk := k.Key.(type) {
	case *rsa.PublicKey:
		return string(jose.RS256), nil
	case *ecdsa.PublicKey:
		switch pk.Curve {
		case elliptic.P256():
			return string(jose.ES256), nil
		case elliptic.P384():
			return string(jose.ES384), nil
		case elliptic.P521():
			return string(jose.ES512), nil
		}
		return "", errors.New("unknown curve, must be 256, 384, or 521")
	}
	return "", fmt.Errorf("unknown public key type %T", k.Key)
}
