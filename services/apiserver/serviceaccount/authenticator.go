// This file holds the Authenticator, which validates ServiceAccount tokens
// as kube-apiserver's JWT token authenticator and its ServiceAccount
// validator do.
package serviceaccount

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/kplane/kplane/services/apiserver/request"
)

// AuthenticatorConfig configures an Authenticator.
type AuthenticatorConfig struct {
	// Issuers are the accepted iss claims (--service-account-issuer, every
	// value); at least one.
	Issuers []string
	// Keys verify signatures (--service-account-key-file); at least one.
	Keys []PublicKey
	// APIAudiences are the audiences the API accepts (--api-audiences):
	// a token must name one of them, and a token naming none at all is
	// taken to name them.
	APIAudiences []string
	// Objects is where the ServiceAccount and the bound object are looked
	// up; required.
	Objects *Objects
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Authenticator validates ServiceAccount tokens. It is safe for concurrent
// use.
type Authenticator struct {
	issuers []string
	keys    []PublicKey
	auds    []string
	objects *Objects
	now     func() time.Time
}

// NewAuthenticator checks cfg and returns an Authenticator.
func NewAuthenticator(cfg AuthenticatorConfig) (*Authenticator, error) {
	if len(cfg.Issuers) == 0 || len(cfg.Keys) == 0 || cfg.Objects == nil {
		return nil, errors.New("serviceaccount: an authenticator needs issuers, keys and objects")
	}
	a := &Authenticator{issuers: cfg.Issuers, keys: cfg.Keys, auds: cfg.APIAudiences, objects: cfg.Objects, now: cfg.Now}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

// APIAudiences are the audiences the API accepts.
func (a *Authenticator) APIAudiences() []string { return slices.Clone(a.auds) }

// signatureAlgorithms are those Kubernetes signs with.
var signatureAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.ES384, jose.ES512}

// AuthenticateToken validates token for the audiences (nil: the API's
// own). ok is false, with no error, for a token that is not a JWT of an
// accepted issuer (another authenticator may know it); an error says the
// token is one but is not valid (bad signature, expired, wrong audience,
// its ServiceAccount or bound object gone or replaced). On success it
// returns the ServiceAccount's user and the audiences the token is valid
// for among those asked.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string, audiences []string) (_ request.User, validFor []string, ok bool, _ error) {
	if !a.acceptedIssuer(token) {
		return request.User{}, nil, false, nil
	}
	tok, err := jwt.ParseSigned(token, signatureAlgorithms)
	if err != nil {
		return request.User{}, nil, false, nil
	}
	var kid string
	for _, h := range tok.Headers {
		if h.KeyID != "" {
			kid = h.KeyID
			break
		}
	}
	var pub jwt.Claims
	var priv privateClaims
	var errs []error
	found := false
	for _, k := range a.keys {
		if kid != "" && k.KeyID != kid {
			continue
		}
		if err := tok.Claims(k.Key, &pub, &priv); err != nil {
			errs = append(errs, err)
			continue
		}
		found = true
		break
	}
	if !found {
		if len(errs) == 0 {
			return request.User{}, nil, false, errors.New("invalid signature, no keys found")
		}
		return request.User{}, nil, false, errors.Join(errs...)
	}
	if !slices.Contains(a.issuers, pub.Issuer) {
		return request.User{}, nil, false, fmt.Errorf("token issuer %q is invalid", pub.Issuer)
	}
	tokenAuds := []string(pub.Audience)
	if len(tokenAuds) == 0 {
		tokenAuds = a.auds
	}
	if audiences == nil {
		audiences = a.auds
	}
	for _, t := range tokenAuds {
		if slices.Contains(audiences, t) && !slices.Contains(validFor, t) {
			validFor = append(validFor, t)
		}
	}
	if len(validFor) == 0 && len(a.auds) != 0 {
		return request.User{}, nil, false, fmt.Errorf("token audiences %q is invalid for the target audiences %q", tokenAuds, audiences)
	}
	u, err := a.validate(pub, priv.Kubernetes)
	if err != nil {
		return request.User{}, nil, false, err
	}
	return u, validFor, true, nil
}

// acceptedIssuer peeks at the unverified payload: is this a JWT of one of
// our issuers at all.
func (a *Authenticator) acceptedIssuer(token string) bool {
	if strings.HasPrefix(strings.TrimSpace(token), "{") {
		return false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	if json.Unmarshal(payload, &c) != nil {
		return false
	}
	return slices.Contains(a.issuers, c.Issuer)
}

// validate checks the times, then that the ServiceAccount and the bound
// object still exist with the uids the token names, as Kubernetes'
// ServiceAccount token validator does.
func (a *Authenticator) validate(pub jwt.Claims, k Private) (request.User, error) {
	now := a.now()
	switch err := pub.Validate(jwt.Expected{Time: now}); {
	case err == nil:
	case errors.Is(err, jwt.ErrExpired):
		return request.User{}, errors.New("service account token has expired")
	case errors.Is(err, jwt.ErrNotValidYet):
		return request.User{}, errors.New("service account token is not valid yet")
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return request.User{}, errors.New("service account token is issued in the future")
	default:
		return request.User{}, fmt.Errorf("service account token claims could not be validated: %w", err)
	}
	deletedBefore := now.Add(-jwt.DefaultLeeway)
	gone := func(o Object) bool { return !o.Deleted.IsZero() && o.Deleted.Before(deletedBefore) }
	ns, sa := k.Namespace, k.ServiceAccount
	got, ok := a.objects.Get(KindServiceAccount, ns, sa.Name)
	if !ok {
		return request.User{}, fmt.Errorf("serviceaccounts %q not found", sa.Name)
	}
	if got.UID != sa.UID {
		return request.User{}, fmt.Errorf("service account UID (%s) does not match claim (%s)", got.UID, sa.UID)
	}
	if gone(got) {
		return request.User{}, fmt.Errorf("service account %s/%s has been deleted", ns, sa.Name)
	}
	invalidated := errors.New("service account token has been invalidated")
	if k.Secret != nil {
		s, ok := a.objects.Get(KindSecret, ns, k.Secret.Name)
		switch {
		case !ok:
			return request.User{}, invalidated
		case s.UID != k.Secret.UID:
			return request.User{}, fmt.Errorf("secret UID (%s) does not match service account secret ref claim (%s)", s.UID, k.Secret.UID)
		case gone(s):
			return request.User{}, invalidated
		}
	}
	u := request.User{Name: UserPrefix + ns + ":" + sa.Name, UID: sa.UID, Groups: []string{AllGroup, NamespaceGroup + ns}}
	extra := map[string][]string{}
	if k.Pod != nil {
		p, ok := a.objects.Get(KindPod, ns, k.Pod.Name)
		switch {
		case !ok:
			return request.User{}, invalidated
		case p.UID != k.Pod.UID:
			return request.User{}, fmt.Errorf("pod UID (%s) does not match service account pod ref claim (%s)", p.UID, k.Pod.UID)
		case gone(p):
			return request.User{}, invalidated
		}
		extra[ExtraPodName] = []string{k.Pod.Name}
		extra[ExtraPodUID] = []string{k.Pod.UID}
	}
	if k.Node != nil {
		if k.Pod == nil {
			n, ok := a.objects.Get(KindNode, "", k.Node.Name)
			switch {
			case !ok:
				return request.User{}, invalidated
			case n.UID != k.Node.UID:
				return request.User{}, fmt.Errorf("node UID (%s) does not match service account node ref claim (%s)", n.UID, k.Node.UID)
			case gone(n):
				return request.User{}, invalidated
			}
		}
		extra[ExtraNodeName] = []string{k.Node.Name}
		if k.Node.UID != "" {
			extra[ExtraNodeUID] = []string{k.Node.UID}
		}
	}
	if pub.ID != "" {
		extra[ExtraCredentialID] = []string{CredentialID(pub.ID)}
	}
	if len(extra) > 0 {
		u.Extra = extra
	}
	return u, nil
}
