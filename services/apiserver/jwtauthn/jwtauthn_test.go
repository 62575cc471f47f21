// This file tests OpenID Connect tokens against a real issuer on loopback:
// the --oidc-* flags' mappings, a structured configuration with CEL, and
// every kind of bad token and bad configuration.
package jwtauthn

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/services/apiserver/jwtauthn/jwtauthntest"
)

// ready starts an authenticator and waits until it knows the issuers' keys.
func ready(t *testing.T, o Options) *Authenticator {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; a.HealthCheck() != nil; i++ {
		if i == 600 {
			t.Fatalf("issuer keys never fetched: %v", a.HealthCheck())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return a
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFlags(t *testing.T) {
	is := jwtauthntest.Start(t)
	a := ready(t, Options{APIAudiences: []string{"https://kplane.test"}, Flags: Flags{
		IssuerURL: is.URL, ClientID: "kplane", CAFile: writeFile(t, "ca.pem", is.CA),
		UsernameClaim: "email", GroupsClaim: "groups", GroupsPrefix: "oidc:",
		RequiredClaims: map[string]string{"hd": "example.com"},
	}})
	now := time.Now()
	claims := func(mod func(map[string]any)) map[string]any {
		c := map[string]any{"iss": is.URL, "aud": "kplane", "sub": "u-1", "email": "jane@example.com", "email_verified": true,
			"groups": []string{"dev", "ops"}, "hd": "example.com", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		if mod != nil {
			mod(c)
		}
		return c
	}
	ctx := context.Background()

	u, validFor, ok, err := a.AuthenticateToken(ctx, is.Sign(t, claims(nil)), nil)
	if err != nil || !ok {
		t.Fatalf("valid token: ok=%v err=%v", ok, err)
	}
	// The email claim is not prefixed (kube-apiserver's legacy rule);
	// groups get --oidc-groups-prefix.
	if u.Name != "jane@example.com" || !slices.Equal(u.Groups, []string{"oidc:dev", "oidc:ops"}) {
		t.Errorf("user: got %+v", u)
	}
	if !slices.Equal(validFor, []string{"https://kplane.test"}) {
		t.Errorf("valid for: got %v, want the API's audiences", validFor)
	}
	// A TokenReview for other audiences: not this authenticator's.
	if _, _, ok, err := a.AuthenticateToken(ctx, is.Sign(t, claims(nil)), []string{"vault"}); ok || err != nil {
		t.Errorf("other audiences: ok=%v err=%v, want not ok", ok, err)
	}

	forger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token, wantErr string
	}{
		{"expired", is.Sign(t, claims(func(c map[string]any) { c["exp"] = now.Add(-time.Hour).Unix() })), "expired"},
		{"wrong audience", is.Sign(t, claims(func(c map[string]any) { c["aud"] = "someone-else" })), "audience"},
		{"unverified email", is.Sign(t, claims(func(c map[string]any) { c["email_verified"] = false })), "email not verified"},
		{"required claim missing", is.Sign(t, claims(func(c map[string]any) { delete(c, "hd") })), "hd"},
		{"required claim wrong", is.Sign(t, claims(func(c map[string]any) { c["hd"] = "evil.com" })), "hd"},
		{"forged signature", jwtauthntest.SignWith(t, forger, "test-key-1", claims(nil)), "signature"},
	} {
		_, _, ok, err := a.AuthenticateToken(ctx, tc.token, nil)
		if ok || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: ok=%v err=%v, want an error about %q", tc.name, ok, err, tc.wantErr)
		}
	}
	// Another issuer's token (a ServiceAccount's, say) is not refused
	// here: it is not this authenticator's to judge.
	other := jwtauthntest.Start(t)
	if _, _, ok, err := a.AuthenticateToken(ctx, other.Sign(t, claims(func(c map[string]any) { c["iss"] = other.URL })), nil); ok || err != nil {
		t.Errorf("other issuer: ok=%v err=%v, want not ok and no error", ok, err)
	}
	if _, _, ok, err := a.AuthenticateToken(ctx, "not-a-jwt", nil); ok || err != nil {
		t.Errorf("opaque token: ok=%v err=%v, want not ok and no error", ok, err)
	}
}

// TestUsernamePrefixes: kube-apiserver's legacy defaults for the username.
func TestUsernamePrefixes(t *testing.T) {
	is := jwtauthntest.Start(t)
	ca := writeFile(t, "ca.pem", is.CA)
	tok := is.Sign(t, map[string]any{"iss": is.URL, "aud": "kplane", "sub": "u-1", "exp": time.Now().Add(time.Hour).Unix()})
	for _, tc := range []struct{ prefix, want string }{
		{"", is.URL + "#u-1"}, // sub (not email) is prefixed with the issuer
		{"-", "u-1"},
		{"corp:", "corp:u-1"},
	} {
		a := ready(t, Options{Flags: Flags{IssuerURL: is.URL, ClientID: "kplane", CAFile: ca, UsernamePrefix: tc.prefix}})
		u, _, ok, err := a.AuthenticateToken(context.Background(), tok, nil)
		if !ok || err != nil || u.Name != tc.want {
			t.Errorf("prefix %q: got %q ok=%v err=%v, want %q", tc.prefix, u.Name, ok, err, tc.want)
		}
	}
}

// TestConfigFile: a structured AuthenticationConfiguration with two
// issuers, CEL mappings and a validation rule.
func TestConfigFile(t *testing.T) {
	corp, partner := jwtauthntest.Start(t), jwtauthntest.Start(t)
	indent := func(pem []byte) string { return strings.ReplaceAll(strings.TrimSpace(string(pem)), "\n", "\n        ") }
	cfg := `apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: ` + corp.URL + `
    audiences: [kplane]
    certificateAuthority: |
        ` + indent(corp.CA) + `
  claimValidationRules:
  - expression: "claims.level >= 2"
    message: "level too low"
  claimMappings:
    username:
      expression: "'corp:' + claims.user"
    groups:
      expression: "dyn(claims.teams).map(t, 'team:' + t)"
    uid:
      claim: sub
    extra:
    - key: corp.example.com/level
      valueExpression: "string(claims.level)"
- issuer:
    url: ` + partner.URL + `
    audiences: [kplane, partner-app]
    audienceMatchPolicy: MatchAny
    certificateAuthority: |
        ` + indent(partner.CA) + `
  claimMappings:
    username:
      claim: sub
      prefix: "partner:"
`
	a := ready(t, Options{ConfigFile: writeFile(t, "authn.yaml", []byte(cfg))})
	exp := time.Now().Add(time.Hour).Unix()
	ctx := context.Background()
	u, _, ok, err := a.AuthenticateToken(ctx, corp.Sign(t, map[string]any{"iss": corp.URL, "aud": "kplane", "sub": "42", "user": "jane", "teams": []string{"a", "b"}, "level": 3, "exp": exp}), nil)
	if !ok || err != nil {
		t.Fatalf("corp token: ok=%v err=%v", ok, err)
	}
	if u.Name != "corp:jane" || u.UID != "42" || !slices.Equal(u.Groups, []string{"team:a", "team:b"}) || !slices.Equal(u.Extra["corp.example.com/level"], []string{"3"}) {
		t.Errorf("corp user: got %+v", u)
	}
	_, _, ok, err = a.AuthenticateToken(ctx, corp.Sign(t, map[string]any{"iss": corp.URL, "aud": "kplane", "sub": "43", "user": "joe", "teams": []string{}, "level": 1, "exp": exp}), nil)
	if ok || err == nil || !strings.Contains(err.Error(), "level too low") {
		t.Errorf("claim validation rule: ok=%v err=%v, want its message", ok, err)
	}
	u, _, ok, err = a.AuthenticateToken(ctx, partner.Sign(t, map[string]any{"iss": partner.URL, "aud": "partner-app", "sub": "p-7", "exp": exp}), nil)
	if !ok || err != nil || u.Name != "partner:p-7" {
		t.Errorf("partner token: got %+v ok=%v err=%v", u, ok, err)
	}
}

// TestBadConfiguration: refusals that name what is wrong, at start-up.
func TestBadConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       Options
		wantErr string
	}{
		{"issuer without client", Options{Flags: Flags{IssuerURL: "https://idp.example.com"}}, "must be specified together"},
		{"plain http issuer", Options{Flags: Flags{IssuerURL: "http://idp.example.com", ClientID: "kplane"}}, "https"},
		{"file and flags", Options{ConfigFile: "x.yaml", Flags: Flags{IssuerURL: "https://idp.example.com", ClientID: "kplane"}}, "mutually exclusive"},
		{"a ServiceAccount issuer", Options{Flags: Flags{IssuerURL: "https://kplane.test", ClientID: "kplane"}, DisallowedIssuers: []string{"https://kplane.test"}}, "disallowed issuers"},
		{"unknown field", Options{ConfigFile: writeFile(t, "a.yaml", []byte("apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\njwt:\n- issuer:\n    url: https://idp.example.com\n    audiences: [kplane]\n    audiance: [x]\n  claimMappings:\n    username:\n      claim: sub\n      prefix: ''\n"))}, "unknown field"},
		{"bad CEL", Options{ConfigFile: writeFile(t, "b.yaml", []byte("apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\njwt:\n- issuer:\n    url: https://idp.example.com\n    audiences: [kplane]\n  claimMappings:\n    username:\n      expression: 'claims.sub +'\n"))}, "compilation failed"},
		{"anonymous", Options{ConfigFile: writeFile(t, "c.yaml", []byte("apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\nanonymous:\n  enabled: true\n"))}, "--anonymous-auth"},
	} {
		_, err := New(context.Background(), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: got %v, want an error about %q", tc.name, err, tc.wantErr)
		}
	}
}
