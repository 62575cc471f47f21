// This file holds the key material of ServiceAccount tokens: the signing
// key (kube-apiserver's --service-account-signing-key-file), the
// verification keys (--service-account-key-file) and their key IDs.
package serviceaccount

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// PublicKey is one verification key with its key ID.
type PublicKey struct {
	KeyID string
	Key   crypto.PublicKey
}

// KeyID is the key ID Kubernetes gives a public key: the unpadded base64url
// SHA-256 of its PKIX DER encoding. Tokens carry it in the kid header, the
// JWKS under kid.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("serviceaccount: marshal public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// LoadSigningKey reads a PEM RSA or ECDSA private key (PKCS#1, SEC 1 or
// PKCS#8), as --service-account-signing-key-file takes.
func LoadSigningKey(file string) (crypto.Signer, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("serviceaccount: signing key: %w", err)
	}
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, fmt.Errorf("serviceaccount: signing key %s: no PEM private key", file)
		}
		if k, ok := parsePrivate(blk); ok {
			return k, nil
		}
	}
}

// LoadPublicKeys reads every RSA and ECDSA public key in the PEM files (public
// keys, certificates or private keys, whose public half is taken), as
// --service-account-key-file takes. A file without any is an error.
func LoadPublicKeys(files ...string) ([]PublicKey, error) {
	var keys []PublicKey
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("serviceaccount: verification keys: %w", err)
		}
		n := 0
		for rest := b; ; {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			pub, err := parsePublic(blk)
			if err != nil {
				return nil, fmt.Errorf("serviceaccount: %s: %w", f, err)
			}
			if pub == nil {
				continue
			}
			id, err := KeyID(pub)
			if err != nil {
				return nil, err
			}
			keys = append(keys, PublicKey{KeyID: id, Key: pub})
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("serviceaccount: %s: no RSA or ECDSA key in it", f)
		}
	}
	return keys, nil
}

func parsePrivate(blk *pem.Block) (crypto.Signer, bool) {
	switch blk.Type {
	case "RSA PRIVATE KEY":
		k, err := x509.ParsePKCS1PrivateKey(blk.Bytes)
		return k, err == nil
	case "EC PRIVATE KEY":
		k, err := x509.ParseECPrivateKey(blk.Bytes)
		return k, err == nil
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, false
		}
		switch k := k.(type) {
		case *rsa.PrivateKey:
			return k, true
		case *ecdsa.PrivateKey:
			return k, true
		}
	}
	return nil, false
}

// parsePublic returns the public key in blk, nil for a block holding none
// (EC PARAMETERS, ...).
func parsePublic(blk *pem.Block) (crypto.PublicKey, error) {
	var pub crypto.PublicKey
	switch blk.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key: %w", err)
		}
		pub = k
	case "RSA PUBLIC KEY":
		k, err := x509.ParsePKCS1PublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("RSA public key: %w", err)
		}
		pub = k
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate: %w", err)
		}
		pub = c.PublicKey
	default:
		k, ok := parsePrivate(blk)
		if !ok {
			return nil, nil
		}
		pub = k.Public()
	}
	switch pub.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey:
		return pub, nil
	}
	return nil, errors.New("only RSA and ECDSA keys are supported")
}
