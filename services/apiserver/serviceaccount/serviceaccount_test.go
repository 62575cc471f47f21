// This file holds the unit tests of the serviceaccount package: key files
// in each PEM form Kubernetes reads, key IDs, tokens signed with RSA and
// ECDSA keys validated against the cache, audiences, and the discovery
// documents.
package serviceaccount

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

const iss = "https://kubernetes.default.svc.cluster.local"

func writePEM(t *testing.T, blocks ...*pem.Block) string {
	t.Helper()
	var b []byte
	for _, blk := range blocks {
		b = append(b, pem.EncodeToMemory(blk)...)
	}
	f := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestKeyFiles(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, _ := x509.MarshalECPrivateKey(ecKey)
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	rsaPub, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	for _, tc := range []struct {
		name    string
		blocks  []*pem.Block
		signing bool // also a signing key
		want    crypto.PublicKey
	}{
		{name: "PKCS#1 RSA private key", blocks: []*pem.Block{{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}}, signing: true, want: &rsaKey.PublicKey},
		{name: "SEC 1 EC private key after EC PARAMETERS", blocks: []*pem.Block{{Type: "EC PARAMETERS", Bytes: []byte{6, 8, 42, 134, 72, 206, 61, 3, 1, 7}}, {Type: "EC PRIVATE KEY", Bytes: ecDER}}, signing: true, want: &ecKey.PublicKey},
		{name: "PKCS#8 private key", blocks: []*pem.Block{{Type: "PRIVATE KEY", Bytes: pkcs8}}, signing: true, want: &rsaKey.PublicKey},
		{name: "PKIX public key", blocks: []*pem.Block{{Type: "PUBLIC KEY", Bytes: rsaPub}}, want: &rsaKey.PublicKey},
		{name: "PKCS#1 public key", blocks: []*pem.Block{{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&rsaKey.PublicKey)}}, want: &rsaKey.PublicKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := writePEM(t, tc.blocks...)
			keys, err := LoadPublicKeys(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != 1 || !keys[0].Key.(interface{ Equal(crypto.PublicKey) bool }).Equal(tc.want) {
				t.Fatalf("got %v, want the one key", keys)
			}
			der, _ := x509.MarshalPKIXPublicKey(tc.want)
			sum := sha256.Sum256(der)
			if want := base64.RawURLEncoding.EncodeToString(sum[:]); keys[0].KeyID != want {
				t.Errorf("key ID: got %s, want %s", keys[0].KeyID, want)
			}
			_, err = LoadSigningKey(f)
			if (err == nil) != tc.signing {
				t.Errorf("as a signing key: got %v, want usable %v", err, tc.signing)
			}
		})
	}
	if _, err := LoadPublicKeys(writePEM(t, &pem.Block{Type: "EC PARAMETERS", Bytes: []byte{1}})); err == nil {
		t.Error("a file without keys: got no error")
	}
}

// fixture is an Authenticator over a cache holding default/robot (and
// whatever the test adds), and an Issuer of the same key.
type fixture struct {
	objects *Objects
	auth    *Authenticator
	issuer  *Issuer
	now     time.Time
}

func newFixture(t *testing.T, key crypto.Signer) *fixture {
	t.Helper()
	kid, err := KeyID(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{objects: NewObjects(), now: time.Unix(1_800_000_000, 0)}
	f.objects.Upsert(&corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "robot", Uid: "sa-uid"}})
	f.auth, err = NewAuthenticator(AuthenticatorConfig{Issuers: []string{"https://old.example", iss}, Keys: []PublicKey{{KeyID: kid, Key: key.Public()}},
		APIAudiences: []string{iss}, Objects: f.objects, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	if f.issuer, err = NewIssuer(iss, key); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) issue(t *testing.T, b Binding) string {
	t.Helper()
	b.Namespace, b.ServiceAccount = "default", Ref{Name: "robot", UID: "sa-uid"}
	if b.ExpirationSeconds == 0 {
		b.ExpirationSeconds = 3600
	}
	tok, _, err := f.issuer.Issue(f.now, b)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTokensRSAAndECDSA(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for alg, key := range map[string]crypto.Signer{"RS256": rsaKey, "ES384": ecKey} {
		t.Run(alg, func(t *testing.T) {
			f := newFixture(t, key)
			tok := f.issue(t, Binding{Audiences: []string{iss}})
			header, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
			kid, _ := KeyID(key.Public())
			if want := `{"alg":"` + alg + `","kid":"` + kid + `"}`; string(header) != want {
				t.Errorf("header: got %s, want %s", header, want)
			}
			u, auds, ok, err := f.auth.AuthenticateToken(context.Background(), tok, nil)
			if err != nil || !ok {
				t.Fatalf("got %v, %v", ok, err)
			}
			if u.Name != "system:serviceaccount:default:robot" || u.UID != "sa-uid" || len(auds) != 1 || auds[0] != iss {
				t.Errorf("got %+v for %v", u, auds)
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, key)
	f.objects.Upsert(&corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "p", Uid: "pod-uid"}})
	f.objects.Upsert(&corev1.Node{Metadata: &metav1.ObjectMeta{Name: "n", Uid: "node-uid"}})
	f.objects.Upsert(&corev1.Secret{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "s", Uid: "secret-uid"}})
	f.objects.Upsert(&corev1.Secret{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "going", Uid: "going-uid",
		DeletionTimestamp: timestamppb.New(f.now.Add(-2 * time.Minute))}})
	user := func(extra map[string][]string) request.User {
		return request.User{Name: "system:serviceaccount:default:robot", UID: "sa-uid", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:default"}, Extra: extra}
	}
	for _, tc := range []struct {
		name      string
		b         Binding
		audiences []string
		later     time.Duration // authenticate this long after issuing
		want      request.User
		wantErr   string
	}{
		{name: "plain", b: Binding{Audiences: []string{iss}}, want: user(nil)},
		{name: "pod and its node", b: Binding{Audiences: []string{iss}, Pod: &Ref{Name: "p", UID: "pod-uid"}, Node: &Ref{Name: "n", UID: "node-uid"}},
			want: user(map[string][]string{ExtraPodName: {"p"}, ExtraPodUID: {"pod-uid"}, ExtraNodeName: {"n"}, ExtraNodeUID: {"node-uid"}})},
		{name: "node", b: Binding{Audiences: []string{iss}, Node: &Ref{Name: "n", UID: "node-uid"}},
			want: user(map[string][]string{ExtraNodeName: {"n"}, ExtraNodeUID: {"node-uid"}})},
		{name: "secret", b: Binding{Audiences: []string{iss}, Secret: &Ref{Name: "s", UID: "secret-uid"}}, want: user(nil)},
		{name: "pod of another uid", b: Binding{Audiences: []string{iss}, Pod: &Ref{Name: "p", UID: "old"}},
			wantErr: "pod UID (pod-uid) does not match service account pod ref claim (old)"},
		{name: "missing node", b: Binding{Audiences: []string{iss}, Node: &Ref{Name: "gone", UID: "x"}}, wantErr: "service account token has been invalidated"},
		{name: "secret deleted two minutes ago", b: Binding{Audiences: []string{iss}, Secret: &Ref{Name: "going", UID: "going-uid"}},
			wantErr: "service account token has been invalidated"},
		{name: "no audience: the API's", b: Binding{}, want: user(nil)},
		{name: "asked for another audience", b: Binding{Audiences: []string{iss}}, audiences: []string{"vault"},
			wantErr: `token audiences ["` + iss + `"] is invalid for the target audiences ["vault"]`},
		{name: "expired past the leeway", b: Binding{Audiences: []string{iss}, ExpirationSeconds: 600}, later: 661 * time.Second,
			wantErr: "service account token has expired"},
		{name: "expired within the leeway", b: Binding{Audiences: []string{iss}, ExpirationSeconds: 600}, later: 659 * time.Second, want: user(nil)},
		{name: "not valid yet", b: Binding{Audiences: []string{iss}}, later: -2 * time.Minute, wantErr: "service account token is not valid yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := f.issue(t, tc.b)
			issued := f.now
			f.now = issued.Add(tc.later)
			defer func() { f.now = issued }()
			u, _, ok, err := f.auth.AuthenticateToken(context.Background(), tok, tc.audiences)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("got %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !ok {
				t.Fatalf("got %v, %v", ok, err)
			}
			delete(u.Extra, ExtraCredentialID)
			if len(u.Extra) == 0 {
				u.Extra = nil
			}
			if diff := cmp.Diff(tc.want, u); diff != "" {
				t.Errorf("user (-want +got):\n%s", diff)
			}
		})
	}
	// Not ours: another issuer's JWT or no JWT at all is left to other
	// authenticators.
	other, _ := NewIssuer("https://elsewhere.example", key)
	tok, _, _ := other.Issue(f.now, Binding{Namespace: "default", ServiceAccount: Ref{Name: "robot", UID: "sa-uid"}, ExpirationSeconds: 3600})
	for _, tok := range []string{tok, "static-token", "a.b.c"} {
		if _, _, ok, err := f.auth.AuthenticateToken(context.Background(), tok, nil); ok || err != nil {
			t.Errorf("%.20s: got %v, %v, want not ours", tok, ok, err)
		}
	}
	// The ServiceAccount replaced: same name, another uid.
	tok = f.issue(t, Binding{Audiences: []string{iss}})
	f.objects.Upsert(&corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "robot", Uid: "new-uid"}})
	if _, _, _, err := f.auth.AuthenticateToken(context.Background(), tok, nil); err == nil || err.Error() != "service account UID (new-uid) does not match claim (sa-uid)" {
		t.Errorf("replaced ServiceAccount: got %v", err)
	}
	f.objects.Delete(&corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "robot"}})
	if _, _, _, err := f.auth.AuthenticateToken(context.Background(), tok, nil); err == nil || err.Error() != `serviceaccounts "robot" not found` {
		t.Errorf("deleted ServiceAccount: got %v", err)
	}
}

func TestDiscovery(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kid, _ := KeyID(&key.PublicKey)
	keys := []PublicKey{{KeyID: kid, Key: &key.PublicKey}}
	for _, bad := range []string{"http://x", "https://x?a=b", "https://x#f"} {
		if _, err := NewDiscovery(bad, "https://x/openid/v1/jwks", keys); err == nil {
			t.Errorf("issuer %s: got no error", bad)
		}
	}
	d, err := NewDiscovery(iss, "https://10.0.0.1:6443/openid/v1/jwks", keys)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"issuer":"` + iss + `","jwks_uri":"https://10.0.0.1:6443/openid/v1/jwks","response_types_supported":["id_token"],"subject_types_supported":["public"],"id_token_signing_alg_values_supported":["ES256"]}`
	if string(d.Config) != want {
		t.Errorf("config: got %s, want %s", d.Config, want)
	}
	if !strings.Contains(string(d.JWKS), `"kid":"`+kid+`"`) || !strings.Contains(string(d.JWKS), `"alg":"ES256"`) {
		t.Errorf("jwks: got %s", d.JWKS)
	}
}

// TestObjectsFallback: an object the cache does not hold yet (written
// through another replica) is read through the fallback; one the fallback
// does not find either, or finds of another kind, is not there.
func TestObjectsFallback(t *testing.T) {
	o := NewObjects()
	if _, ok := o.Get(KindServiceAccount, "default", "new"); ok {
		t.Fatal("found an object in an empty cache without a fallback")
	}
	var asked []string
	o.SetFallback(func(kind, namespace, name string) (any, error) {
		asked = append(asked, kind+" "+namespace+"/"+name)
		switch name {
		case "new":
			return &corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Namespace: namespace, Name: name, Uid: "new-uid"}}, nil
		case "odd":
			return &corev1.Secret{Metadata: &metav1.ObjectMeta{Namespace: namespace, Name: name, Uid: "x"}}, nil
		}
		return nil, nil
	})
	o.Upsert(&corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "cached", Uid: "cached-uid"}})
	if got, ok := o.Get(KindServiceAccount, "default", "cached"); !ok || got.UID != "cached-uid" {
		t.Errorf("cached: got %+v, %v", got, ok)
	}
	if got, ok := o.Get(KindServiceAccount, "default", "new"); !ok || got.UID != "new-uid" {
		t.Errorf("through the fallback: got %+v, %v", got, ok)
	}
	for _, name := range []string{"gone", "odd"} {
		if got, ok := o.Get(KindServiceAccount, "default", name); ok {
			t.Errorf("%s: got %+v, want not found", name, got)
		}
	}
	if want := []string{"ServiceAccount default/new", "ServiceAccount default/gone", "ServiceAccount default/odd"}; !slices.Equal(asked, want) {
		t.Errorf("the fallback was asked %v, want %v (never for a cached object)", asked, want)
	}
}
