// This file holds the tests of the encryption transformers: round trips,
// keys bound to their ciphertext, key rotation, the choice per resource, and
// configuration errors.

package encryption

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

func b64(n int, fill byte) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{fill}, n))
}

func config(providers ...string) []byte {
	return []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n" + strings.Join(providers, ""))
}

func keys(provider string, names ...string) string {
	s := fmt.Sprintf("  - %s:\n      keys:\n", provider)
	for i, n := range names {
		size := 32
		s += fmt.Sprintf("      - name: %s\n        secret: %s\n", n, b64(size, byte('a'+i)))
	}
	return s
}

const identity = "  - identity: {}\n"

func TestRoundTrip(t *testing.T) {
	const key = "/registry/secrets/default/s"
	plain := []byte("the secret value")
	for _, p := range []string{"aescbc", "aesgcm", "secretbox"} {
		t.Run(p, func(t *testing.T) {
			ts, err := Parse(config(keys(p, "k1")))
			if err != nil {
				t.Fatal(err)
			}
			tr := ts.For("secrets", "")
			stored, err := tr.ToStorage(key, plain)
			if err != nil {
				t.Fatal(err)
			}
			if want := "k8s:enc:" + p + ":v1:k1:"; !bytes.HasPrefix(stored, []byte(want)) {
				t.Errorf("stored value starts %q, want prefix %q", stored[:min(len(stored), 30)], want)
			}
			if bytes.Contains(stored, plain) {
				t.Error("the stored value contains the plaintext")
			}
			got, err := tr.FromStorage(key, stored)
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("FromStorage: %q, %v", got, err)
			}
			if again, _ := tr.ToStorage(key, plain); bytes.Equal(again, stored) {
				t.Error("two encryptions of one value are equal: no random nonce")
			}
			// The authenticated providers detect tampering (aescbc has no
			// authentication, as in Kubernetes).
			bad := bytes.Clone(stored)
			bad[len(bad)-1] ^= 0xff
			if _, err := tr.FromStorage(key, bad); p != "aescbc" && err == nil {
				t.Error("a tampered value decrypted")
			}
		})
	}
}

func TestGCMBindsTheKey(t *testing.T) {
	ts, err := Parse(config(keys("aesgcm", "k1")))
	if err != nil {
		t.Fatal(err)
	}
	tr := ts.For("secrets", "")
	stored, _ := tr.ToStorage("/registry/secrets/a/s", []byte("x"))
	if _, err := tr.FromStorage("/registry/secrets/b/s", stored); err == nil {
		t.Error("an aesgcm value copied to another key decrypted")
	}
}

// TestRotation: a configuration with a new first key reads what the old
// one wrote and writes with the new key; identity last reads plaintext.
func TestRotation(t *testing.T) {
	const key = "/registry/secrets/default/s"
	old, _ := Parse(config(keys("aescbc", "k1")))
	stored, _ := old.For("secrets", "").ToStorage(key, []byte("v"))
	rotated, err := Parse(config(keys("secretbox", "k2"), keys("aescbc", "k1"), identity))
	if err != nil {
		t.Fatal(err)
	}
	tr := rotated.For("secrets", "")
	if got, err := tr.FromStorage(key, stored); err != nil || string(got) != "v" {
		t.Fatalf("old value after rotation: %q, %v", got, err)
	}
	if got, err := tr.FromStorage(key, []byte("plain")); err != nil || string(got) != "plain" {
		t.Fatalf("plaintext through identity: %q, %v", got, err)
	}
	now, _ := tr.ToStorage(key, []byte("v"))
	if !bytes.HasPrefix(now, []byte("k8s:enc:secretbox:v1:k2:")) {
		t.Errorf("new write starts %q, want the new first key", now[:24])
	}
	// Without the old key, its values cannot be read, even with identity.
	newOnly, _ := Parse(config(keys("secretbox", "k2"), identity))
	if _, err := newOnly.For("secrets", "").FromStorage(key, stored); err == nil {
		t.Error("a value of a dropped key was read")
	}
	// Without identity, plaintext is refused.
	if _, err := old.For("secrets", "").FromStorage(key, []byte("plain")); err == nil {
		t.Error("plaintext read without the identity provider")
	}
}

func TestFor(t *testing.T) {
	ts, err := Parse([]byte(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets, deployments.apps]
  providers: [{identity: {}}]
- resources: ["*.rbac.authorization.k8s.io"]
  providers: [{identity: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		res, group string
		want       bool
	}{
		{"secrets", "", true}, {"configmaps", "", false}, {"deployments", "apps", true}, {"replicasets", "apps", false},
		{"roles", "rbac.authorization.k8s.io", true}, {"secrets", "apps", false},
	} {
		if got := ts.For(tc.res, tc.group) != nil; got != tc.want {
			t.Errorf("For(%s, %q) = %v, want %v", tc.res, tc.group, got, tc.want)
		}
	}
	all, _ := Parse([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: ['*.*']\n  providers: [{identity: {}}]\n"))
	if all.For("leases", "coordination.k8s.io") == nil || all.For("pods", "") == nil {
		t.Error("*.* does not cover every resource")
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"wrong kind", "apiVersion: v1\nkind: ConfigMap\n", "want kind EncryptionConfiguration"},
		{"unknown field", string(config(identity)) + "extra: 1\n", "unknown field"},
		{"no providers", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n", "at least one provider"},
		{"two in one provider", string(config("  - identity: {}\n    aescbc: {keys: [{name: k, secret: " + b64(32, 'a') + "}]}\n")), "exactly one provider"},
		{"bad key size", string(config("  - aescbc: {keys: [{name: k, secret: " + b64(10, 'a') + "}]}\n")), "16, 24 or 32-byte key"},
		{"secretbox key size", string(config("  - secretbox: {keys: [{name: k, secret: " + b64(16, 'a') + "}]}\n")), "32-byte key"},
		{"not base64", string(config("  - aesgcm: {keys: [{name: k, secret: '!!'}]}\n")), "not base64"},
		{"duplicate key name", string(config(keys("aescbc", "k", "k"))), "duplicate key name"},
		{"no keys", string(config("  - aescbc: {keys: []}\n")), "at least one key"},
		{"kms", string(config("  - kms: {name: x}\n")), "kms: not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
