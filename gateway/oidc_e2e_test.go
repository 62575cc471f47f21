// This file holds the kubectl test of OpenID Connect tokens: an issuer the
// test runs, its ID tokens used with kubectl --token through the gateway,
// RBAC on the mapped user and groups, and refusals of bad tokens.
package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/apiserver/jwtauthn"
	"github.com/kplane/kplane/services/apiserver/jwtauthn/jwtauthntest"
)

func TestKubectlOIDCTokens(t *testing.T) {
	is := jwtauthntest.Start(t)
	ca := filepath.Join(t.TempDir(), "idp-ca.pem")
	if err := os.WriteFile(ca, is.CA, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	jwt, err := jwtauthn.New(ctx, jwtauthn.Options{APIAudiences: []string{apiservertest.ServiceAccountIssuer}, Flags: jwtauthn.Flags{
		IssuerURL: is.URL, ClientID: "kplane", CAFile: ca, UsernameClaim: "email", GroupsClaim: "groups", GroupsPrefix: "oidc:"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; jwt.HealthCheck() != nil; i++ {
		if i == 600 {
			t.Fatalf("issuer keys never fetched: %v", jwt.HealthCheck())
		}
		time.Sleep(50 * time.Millisecond)
	}
	env := apiservertest.Start(t, apiservertest.Options{JWT: jwt})
	admin := kubectltest.StartBinary(t, env.Dial(t, ""), apiservertest.AdminToken, "kubectl.1.33")
	k := &kube{Kubectl: admin, t: t, conn: env.Dial(t, apiservertest.AdminToken)}

	token := func(email string, groups []string, exp time.Time, aud string) string {
		return is.Sign(t, map[string]any{"iss": is.URL, "aud": aud, "sub": email, "email": email, "email_verified": true,
			"groups": groups, "iat": time.Now().Unix(), "exp": exp.Unix()})
	}
	hour := time.Now().Add(time.Hour)
	jane := token("jane@example.com", []string{"viewers"}, hour, "kplane")
	// The group from the token is what RBAC grants to.
	k.ok([]string{"create", "clusterrolebinding", "oidc-viewers", "--clusterrole=view", "--group=oidc:viewers"}, "created")
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			kb := k.withBinary(t, bin)
			if bin == "kubectl.1.33" {
				kb.ok([]string{"auth", "whoami", "--token=" + jane}, "jane@example.com", "[oidc:viewers system:authenticated]")
			}
			kb.ok([]string{"get", "pods", "--token=" + jane}, "No resources found")
			kb.fails([]string{"create", "configmap", "x", "--token=" + jane},
				`error: failed to create configmap: configmaps is forbidden: User "jane@example.com" cannot create resource "configmaps" in API group "" in the namespace "default"`)
			for name, bad := range map[string]string{
				"expired":        token("jane@example.com", []string{"viewers"}, time.Now().Add(-time.Minute), "kplane"),
				"wrong audience": token("jane@example.com", []string{"viewers"}, hour, "another-app"),
			} {
				t.Run(name, func(t *testing.T) {
					kb.with(t).fails([]string{"get", "pods", "--token=" + bad}, "error: You must be logged in to the server (Unauthorized)")
				})
			}
		})
	}
}
