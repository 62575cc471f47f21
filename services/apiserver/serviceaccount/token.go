// Package serviceaccount issues and authenticates ServiceAccount tokens:
// JWTs with the claims Kubernetes puts in them (iss, sub
// system:serviceaccount:NS:NAME, aud, exp, iat, nbf, jti and the private
// claim kubernetes.io naming the namespace, the ServiceAccount and the object
// the token is bound to), signed RS256 or ES256/384/512 by the API service's
// signing key and checked against its verification keys, the accepted
// issuers and audiences, and — through a cache the API service's watch
// feeds — the ServiceAccount and bound object still existing with the same
// uid. It also builds the issuer's OpenID discovery documents.
//
// This file holds the claims and the Issuer.
package serviceaccount

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/uuid"
)

// Names of the ServiceAccount user, as Kubernetes gives them.
const (
	UserPrefix     = "system:serviceaccount:"
	AllGroup       = "system:serviceaccounts"
	NamespaceGroup = "system:serviceaccounts:" // + namespace
)

// The keys of a ServiceAccount user's extra, as Kubernetes sets them.
const (
	ExtraPodName      = "authentication.kubernetes.io/pod-name"
	ExtraPodUID       = "authentication.kubernetes.io/pod-uid"
	ExtraNodeName     = "authentication.kubernetes.io/node-name"
	ExtraNodeUID      = "authentication.kubernetes.io/node-uid"
	ExtraCredentialID = "authentication.kubernetes.io/credential-id"
)

// Expirations Kubernetes gives special meaning.
const (
	// MinExpirationSeconds is the shortest TokenRequest.spec.expirationSeconds.
	MinExpirationSeconds = 600
	// DefaultExpirationSeconds is spec.expirationSeconds when not given.
	DefaultExpirationSeconds = 3600
	// WarnOnlyExpirationSeconds is the expiration (one hour and 7 s) the
	// node asks for pod-bound tokens: Kubernetes issues them for
	// ExtendedExpirationSeconds instead, with a warnafter claim at the asked
	// time, so that clients that do not refresh tokens keep working.
	WarnOnlyExpirationSeconds = 60*60 + 7
	// ExtendedExpirationSeconds is one year.
	ExtendedExpirationSeconds = 24 * 365 * 60 * 60
)

// Ref names an object by name and uid.
type Ref struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// Private is the kubernetes.io claim.
type Private struct {
	Namespace      string           `json:"namespace,omitempty"`
	ServiceAccount Ref              `json:"serviceaccount,omitempty"`
	Pod            *Ref             `json:"pod,omitempty"`
	Secret         *Ref             `json:"secret,omitempty"`
	Node           *Ref             `json:"node,omitempty"`
	WarnAfter      *jwt.NumericDate `json:"warnafter,omitempty"`
}

type privateClaims struct {
	Kubernetes Private `json:"kubernetes.io,omitempty"`
}

// Binding is what a token is issued for: a ServiceAccount and at most one
// of a Pod (with the Node it runs on, if scheduled), a Secret or a Node.
type Binding struct {
	Namespace         string
	ServiceAccount    Ref
	Pod, Secret, Node *Ref
	Audiences         []string
	ExpirationSeconds int64
	WarnAfterSeconds  int64 // 0: no warnafter claim
}

// CredentialID is the credential ID of a token with jti, as Kubernetes
// writes it in the user's extra and the audit log ("JTI=<jti>").
func CredentialID(jti string) string {
	if jti == "" {
		return ""
	}
	return "JTI=" + jti
}

// Issuer signs tokens. It is safe for concurrent use.
type Issuer struct {
	iss    string
	signer jose.Signer
}

// NewIssuer returns an Issuer signing as iss with key (RSA: RS256; ECDSA
// P-256, P-384, P-521: ES256, ES384, ES512), the key ID in the kid header.
func NewIssuer(iss string, key crypto.Signer) (*Issuer, error) {
	if iss == "" {
		return nil, errors.New("serviceaccount: an issuer is required")
	}
	var alg jose.SignatureAlgorithm
	switch k := key.(type) {
	case *rsa.PrivateKey:
		alg = jose.RS256
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P256():
			alg = jose.ES256
		case elliptic.P384():
			alg = jose.ES384
		case elliptic.P521():
			alg = jose.ES512
		default:
			return nil, errors.New("serviceaccount: ECDSA keys must be on P-256, P-384 or P-521")
		}
	default:
		return nil, fmt.Errorf("serviceaccount: signing key of type %T: must be RSA or ECDSA", key)
	}
	kid, err := KeyID(key.Public())
	if err != nil {
		return nil, err
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Algorithm: string(alg), Key: key, KeyID: kid, Use: "sig"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("serviceaccount: signer: %w", err)
	}
	return &Issuer{iss: iss, signer: s}, nil
}

// Issuer is the iss claim this Issuer writes.
func (i *Issuer) Issuer() string { return i.iss }

// Issue signs a token for b at now. It returns the token and its jti.
func (i *Issuer) Issue(now time.Time, b Binding) (token, jti string, err error) {
	if b.Secret != nil && (b.Pod != nil || b.Node != nil) {
		return "", "", errors.New("serviceaccount: a token can only be bound to one object type")
	}
	jti = uuid.NewString()
	pub := jwt.Claims{
		Issuer:    i.iss,
		Subject:   UserPrefix + b.Namespace + ":" + b.ServiceAccount.Name,
		Audience:  jwt.Audience(b.Audiences),
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		Expiry:    jwt.NewNumericDate(now.Add(time.Duration(b.ExpirationSeconds) * time.Second)),
		ID:        jti,
	}
	priv := privateClaims{Kubernetes: Private{Namespace: b.Namespace, ServiceAccount: b.ServiceAccount, Pod: b.Pod, Secret: b.Secret, Node: b.Node}}
	if b.WarnAfterSeconds != 0 {
		priv.Kubernetes.WarnAfter = jwt.NewNumericDate(now.Add(time.Duration(b.WarnAfterSeconds) * time.Second))
	}
	token, err = jwt.Signed(i.signer).Claims(priv).Claims(pub).Serialize()
	if err != nil {
		return "", "", fmt.Errorf("serviceaccount: sign: %w", err)
	}
	return token, jti, nil
}
