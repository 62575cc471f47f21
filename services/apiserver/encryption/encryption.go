// Package encryption encrypts objects at rest as kube-apiserver does: an
// EncryptionConfiguration (apiserver.config.k8s.io/v1) file, given with
// --encryption-provider-config, lists per resource the providers aescbc,
// aesgcm, secretbox and identity. The first provider (its first key)
// encrypts what is written; every listed provider can read, so a new key
// is rotated in by listing it first. An encrypted value is stored as
// "k8s:enc:<provider>:v1:<key name>:" followed by the provider's nonce and
// ciphertext, Kubernetes' format.
package encryption

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/nacl/secretbox"
	"sigs.k8s.io/yaml"
)

// Config is an EncryptionConfiguration, as kube-apiserver reads it.
type Config struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Resources  []ResourceConfig `json:"resources"`
}

// ResourceConfig lists the providers for some resources.
type ResourceConfig struct {
	Resources []string         `json:"resources"`
	Providers []ProviderConfig `json:"providers"`
}

// ProviderConfig is exactly one provider.
type ProviderConfig struct {
	AESCBC    *KeysConfig `json:"aescbc,omitempty"`
	AESGCM    *KeysConfig `json:"aesgcm,omitempty"`
	Secretbox *KeysConfig `json:"secretbox,omitempty"`
	Identity  *struct{}   `json:"identity,omitempty"`
	KMS       any         `json:"kms,omitempty"`
}

// KeysConfig holds a provider's keys, the first one used to encrypt.
type KeysConfig struct {
	Keys []Key `json:"keys"`
}

// Key is a named key, base64-encoded.
type Key struct {
	Name   string `json:"name"`
	Secret string `json:"secret"`
}

// Transformer turns an object's stored bytes into their form at rest and
// back. key is the object's store key (authenticated by aesgcm).
type Transformer interface {
	ToStorage(key string, plain []byte) ([]byte, error)
	FromStorage(key string, stored []byte) ([]byte, error)
}

// Transformers maps resources to their transformer.
type Transformers struct {
	rules []rule
}

type rule struct {
	patterns []string // "secrets", "deployments.apps", "*.", "*.apps", "*.*"
	t        *prefixTransformer
}

// For returns the transformer of a resource of API group group ("" for
// core), or nil if its objects are stored as they are.
func (ts *Transformers) For(resource, group string) Transformer {
	if ts == nil {
		return nil
	}
	for _, r := range ts.rules {
		for _, p := range r.patterns {
			res, grp, _ := strings.Cut(p, ".")
			if (res == "*" || res == resource) && (grp == group || (res == "*" && grp == "*")) {
				return r.t
			}
		}
	}
	return nil
}

// Load reads an EncryptionConfiguration file.
func Load(path string) (*Transformers, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("encryption provider config: %w", err)
	}
	ts, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("encryption provider config %s: %w", path, err)
	}
	return ts, nil
}

// Parse reads an EncryptionConfiguration document.
func Parse(doc []byte) (*Transformers, error) {
	var c Config
	if err := yaml.UnmarshalStrict(doc, &c); err != nil {
		return nil, err
	}
	if c.Kind != "EncryptionConfiguration" || c.APIVersion != "apiserver.config.k8s.io/v1" {
		return nil, fmt.Errorf("want kind EncryptionConfiguration of apiserver.config.k8s.io/v1, got %q of %q", c.Kind, c.APIVersion)
	}
	ts := &Transformers{}
	for i, rc := range c.Resources {
		if len(rc.Resources) == 0 {
			return nil, fmt.Errorf("resources[%d].resources: must have at least one resource", i)
		}
		if len(rc.Providers) == 0 {
			return nil, fmt.Errorf("resources[%d].providers: must have at least one provider", i)
		}
		pt := &prefixTransformer{}
		for j, pc := range rc.Providers {
			ps, err := providers(pc)
			if err != nil {
				return nil, fmt.Errorf("resources[%d].providers[%d]: %w", i, j, err)
			}
			pt.providers = append(pt.providers, ps...)
		}
		for _, r := range rc.Resources {
			if r == "" {
				return nil, fmt.Errorf("resources[%d].resources: an empty resource", i)
			}
		}
		ts.rules = append(ts.rules, rule{patterns: rc.Resources, t: pt})
	}
	return ts, nil
}

// provider is one key of one provider: prefix "" is identity.
type provider struct {
	prefix []byte
	seal   func(key string, plain []byte) ([]byte, error)
	open   func(key string, body []byte) ([]byte, error)
}

func providers(pc ProviderConfig) ([]provider, error) {
	n := 0
	for _, set := range []bool{pc.AESCBC != nil, pc.AESGCM != nil, pc.Secretbox != nil, pc.Identity != nil, pc.KMS != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("exactly one provider must be given")
	}
	var (
		name string
		kc   *KeysConfig
		mk   func(secret []byte) (seal func(string, []byte) ([]byte, error), open func(string, []byte) ([]byte, error), err error)
	)
	switch {
	case pc.Identity != nil:
		return []provider{{
			seal: func(_ string, p []byte) ([]byte, error) { return p, nil },
			open: func(_ string, b []byte) ([]byte, error) { return b, nil },
		}}, nil
	case pc.KMS != nil:
		return nil, errors.New("kms: not supported by kplane")
	case pc.AESCBC != nil:
		name, kc, mk = "aescbc", pc.AESCBC, aesCBC
	case pc.AESGCM != nil:
		name, kc, mk = "aesgcm", pc.AESGCM, aesGCM
	case pc.Secretbox != nil:
		name, kc, mk = "secretbox", pc.Secretbox, secretBox
	}
	if len(kc.Keys) == 0 {
		return nil, fmt.Errorf("%s.keys: must have at least one key", name)
	}
	var out []provider
	seen := map[string]bool{}
	for i, k := range kc.Keys {
		if k.Name == "" || strings.Contains(k.Name, ":") {
			return nil, fmt.Errorf("%s.keys[%d].name: must be non-empty and contain no ':'", name, i)
		}
		if seen[k.Name] {
			return nil, fmt.Errorf("%s.keys[%d].name: duplicate key name %q", name, i, k.Name)
		}
		seen[k.Name] = true
		secret, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("%s.keys[%d].secret: not base64: %w", name, i, err)
		}
		seal, open, err := mk(secret)
		if err != nil {
			return nil, fmt.Errorf("%s.keys[%d].secret: %w", name, i, err)
		}
		out = append(out, provider{prefix: []byte("k8s:enc:" + name + ":v1:" + k.Name + ":"), seal: seal, open: open})
	}
	return out, nil
}

// prefixTransformer writes with its first provider and reads with the one
// whose prefix the value carries (identity: any value).
type prefixTransformer struct {
	providers []provider
}

func (t *prefixTransformer) ToStorage(key string, plain []byte) ([]byte, error) {
	p := t.providers[0]
	body, err := p.seal(key, plain)
	if err != nil {
		return nil, fmt.Errorf("encrypting %s: %w", key, err)
	}
	return append(append(make([]byte, 0, len(p.prefix)+len(body)), p.prefix...), body...), nil
}

func (t *prefixTransformer) FromStorage(key string, stored []byte) ([]byte, error) {
	for _, p := range t.providers {
		if len(p.prefix) == 0 {
			if bytes.HasPrefix(stored, []byte("k8s:enc:")) {
				continue // encrypted with a key this configuration lacks
			}
			return stored, nil
		}
		if body, ok := bytes.CutPrefix(stored, p.prefix); ok {
			plain, err := p.open(key, body)
			if err != nil {
				return nil, fmt.Errorf("decrypting %s with %s: %w", key, strings.TrimSuffix(string(p.prefix), ":"), err)
			}
			return plain, nil
		}
	}
	return nil, fmt.Errorf("decrypting %s: no provider of the encryption configuration matches the stored value", key)
}

// aesCBC: a random 16-byte IV, then AES-CBC of the PKCS#7-padded data.
func aesCBC(secret []byte) (func(string, []byte) ([]byte, error), func(string, []byte) ([]byte, error), error) {
	block, err := aesBlock(secret)
	if err != nil {
		return nil, nil, err
	}
	bs := block.BlockSize()
	seal := func(_ string, plain []byte) ([]byte, error) {
		pad := bs - len(plain)%bs
		out := make([]byte, bs+len(plain)+pad)
		if _, err := rand.Read(out[:bs]); err != nil {
			return nil, err
		}
		copy(out[bs:], plain)
		for i := bs + len(plain); i < len(out); i++ {
			out[i] = byte(pad)
		}
		cipher.NewCBCEncrypter(block, out[:bs]).CryptBlocks(out[bs:], out[bs:])
		return out, nil
	}
	open := func(_ string, body []byte) ([]byte, error) {
		if len(body) < 2*bs || len(body)%bs != 0 {
			return nil, errors.New("the stored value is not a whole number of blocks")
		}
		out := make([]byte, len(body)-bs)
		cipher.NewCBCDecrypter(block, body[:bs]).CryptBlocks(out, body[bs:])
		pad := int(out[len(out)-1])
		if pad == 0 || pad > bs || pad > len(out) {
			return nil, errors.New("invalid padding")
		}
		for _, b := range out[len(out)-pad:] {
			if int(b) != pad {
				return nil, errors.New("invalid padding")
			}
		}
		return out[:len(out)-pad], nil
	}
	return seal, open, nil
}

// aesGCM: a random 12-byte nonce, then AES-GCM with the store key as
// additional authenticated data (a value copied to another key fails).
func aesGCM(secret []byte) (func(string, []byte) ([]byte, error), func(string, []byte) ([]byte, error), error) {
	block, err := aesBlock(secret)
	if err != nil {
		return nil, nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, nil, err
	}
	ns := aead.NonceSize()
	seal := func(key string, plain []byte) ([]byte, error) {
		nonce := make([]byte, ns, ns+len(plain)+aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return nil, err
		}
		return aead.Seal(nonce, nonce, plain, []byte(key)), nil
	}
	open := func(key string, body []byte) ([]byte, error) {
		if len(body) < ns {
			return nil, errors.New("the stored value is shorter than a nonce")
		}
		return aead.Open(nil, body[:ns], body[ns:], []byte(key))
	}
	return seal, open, nil
}

// secretBox: a random 24-byte nonce, then NaCl secretbox (XSalsa20 and
// Poly1305) with a 32-byte key.
func secretBox(secret []byte) (func(string, []byte) ([]byte, error), func(string, []byte) ([]byte, error), error) {
	if len(secret) != 32 {
		return nil, nil, fmt.Errorf("secretbox needs a 32-byte key, got %d bytes", len(secret))
	}
	var k [32]byte
	copy(k[:], secret)
	seal := func(_ string, plain []byte) ([]byte, error) {
		var nonce [24]byte
		if _, err := rand.Read(nonce[:]); err != nil {
			return nil, err
		}
		return secretbox.Seal(nonce[:], plain, &nonce, &k), nil
	}
	open := func(_ string, body []byte) ([]byte, error) {
		if len(body) < 24 {
			return nil, errors.New("the stored value is shorter than a nonce")
		}
		var nonce [24]byte
		copy(nonce[:], body[:24])
		out, ok := secretbox.Open(nil, body[24:], &nonce, &k)
		if !ok {
			return nil, errors.New("secretbox: authentication failed")
		}
		return out, nil
	}
	return seal, open, nil
}

func aesBlock(secret []byte) (cipher.Block, error) {
	switch len(secret) {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("AES needs a 16, 24 or 32-byte key, got %d bytes", len(secret))
	}
	return aes.NewCipher(secret)
}
