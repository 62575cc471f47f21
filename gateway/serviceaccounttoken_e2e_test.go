// This file holds the kubectl tests of ServiceAccount tokens through the
// gateway in impersonation mode (as kplane up runs it): kubectl create
// token, kubectl --token=... getting what RBAC allows and 403 for the rest,
// kubectl auth whoami for a certificate user and a token, the warning of a
// shortened expiration, discovery and the issuer discovery documents.
package gateway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
)

// certKubectl runs one kubectl binary against srv with a kubeconfig that
// holds no credentials: each command brings its own (a client certificate
// or --token).
type certKubectl struct {
	t                   *testing.T
	bin, dir, cert, key string
}

func newCertKubectl(t *testing.T, bin, server string, admin tls.Certificate) *certKubectl {
	t.Helper()
	dir := t.TempDir()
	k := &certKubectl{t: t, bin: kubectltest.Binary(t, bin), dir: dir, cert: filepath.Join(dir, "admin.crt"), key: filepath.Join(dir, "admin.key")}
	der, err := x509.MarshalPKCS8PrivateKey(admin.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		k.cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: admin.Certificate[0]}),
		k.key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		filepath.Join(dir, "kubeconfig"): fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: kplane
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: nobody
  user: {}
contexts:
- name: kplane
  context: {cluster: kplane, user: nobody, namespace: default}
current-context: kplane
`, server),
	}
	for f, b := range files {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// run runs kubectl with args; as "" is the admin's client certificate,
// otherwise a bearer token.
func (k *certKubectl) run(as string, args ...string) (string, error) {
	k.t.Helper()
	if as == "" {
		args = append(args, "--client-certificate="+k.cert, "--client-key="+k.key)
	} else {
		args = append(args, "--token="+as)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(k.dir, "kubeconfig"), "KUBECACHEDIR="+filepath.Join(k.dir, "cache"), "HOME="+k.dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (k *certKubectl) ok(as string, args ...string) string {
	k.t.Helper()
	out, err := k.run(as, args...)
	if err != nil {
		k.t.Fatalf("%s %v: %v\n%s", filepath.Base(k.bin), args, err, out)
	}
	return out
}

func (k *certKubectl) fails(as string, args []string, want string) {
	k.t.Helper()
	out, err := k.run(as, args...)
	if err == nil || !strings.Contains(out, want) {
		k.t.Fatalf("%s %v: got %v\n%s\nwant a failure containing %q", filepath.Base(k.bin), args, err, out, want)
	}
}

func tokenClaims(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", token)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestKubectlServiceAccountTokens(t *testing.T) {
	srv, users, client := startImpersonatingWith(t, gateway.Config{Metrics: http.NotFoundHandler()}, func(c *apiserver.Config) { c.ServiceAccountTokens.MaxExpiration = 2 * time.Hour })
	carol := users.Issue(t, "carol", []string{"system:masters"}, false)
	for i, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := newCertKubectl(t, bin, srv.URL, carol)
			sa := fmt.Sprintf("robot%d", i)
			k.ok("", "create", "serviceaccount", sa)
			k.ok("", "create", "secret", "generic", sa+"-s")
			k.fails("", []string{"create", "token", "nope"}, `serviceaccounts "nope" not found`)
			k.fails("", []string{"create", "token", sa, "--duration=1m"}, "may not specify a duration less than 10 minutes")

			tok := strings.TrimSpace(k.ok("", "create", "token", sa, "--duration=20m", "--audience=vault", "--audience="+apiservertest.ServiceAccountIssuer))
			c := tokenClaims(t, tok)
			if c["sub"] != "system:serviceaccount:default:"+sa || int64(c["exp"].(float64))-int64(c["iat"].(float64)) != 1200 || len(c["aud"].([]any)) != 2 {
				t.Errorf("claims: got %v", c)
			}
			// --service-account-max-token-expiration 2h: a warning, as
			// kube-apiserver gives it.
			if out := k.ok("", "create", "token", sa, "--duration=3h"); !strings.Contains(out, "Warning: requested expiration of 10800 seconds shortened to 7200 seconds") {
				t.Errorf("create token --duration=3h: got\n%s\nwant the warning", out)
			}
			bound := strings.TrimSpace(k.ok("", "create", "token", sa, "--bound-object-kind=Secret", "--bound-object-name="+sa+"-s"))
			if k8s, _ := json.Marshal(tokenClaims(t, bound)["kubernetes.io"]); !strings.Contains(string(k8s), `"secret":{"name":"`+sa+`-s"`) {
				t.Errorf("bound token's kubernetes.io claim: got %s", k8s)
			}
			k.fails("", []string{"create", "token", sa, "--bound-object-kind=Pod", "--bound-object-name=nope"}, `pods "nope" not found`)

			// RBAC: view in default lets the token list pods, not secrets.
			k.ok("", "create", "rolebinding", sa+"-view", "--clusterrole=view", "--serviceaccount=default:"+sa)
			deadline := time.Now().Add(20 * time.Second)
			for {
				out, err := k.run(tok, "get", "pods")
				if err == nil && strings.Contains(out, "No resources found") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("kubectl --token get pods: %v\n%s", err, out)
				}
				time.Sleep(50 * time.Millisecond)
			}
			k.ok(bound, "get", "serviceaccounts", sa)
			k.fails(tok, []string{"get", "secrets"},
				`Error from server (Forbidden): secrets is forbidden: User "system:serviceaccount:default:`+sa+`" cannot list resource "secrets" in API group "" in the namespace "default"`)
			k.fails(tok[:len(tok)-4]+"AAAA", []string{"get", "pods"}, "error: You must be logged in to the server (Unauthorized)")

			if bin == "kubectl.1.27" {
				// kubectl 1.27 asks for v1beta1 and v1alpha1 SelfSubjectReviews,
				// which kube-apiserver 1.33 does not serve by default either.
				k.fails("", []string{"auth", "whoami"}, "the selfsubjectreviews API is not enabled in the cluster")
				return
			}
			out := k.ok("", "auth", "whoami")
			for _, want := range []string{"Username", "carol", "[system:masters system:authenticated]"} {
				if !strings.Contains(out, want) {
					t.Errorf("whoami (certificate): got\n%s\nwant %q", out, want)
				}
			}
			out = k.ok(bound, "auth", "whoami", "-o", "json")
			var review struct {
				Kind   string
				Status struct {
					UserInfo struct {
						Username, UID string
						Groups        []string
						Extra         map[string][]string
					} `json:"userInfo"`
				}
			}
			if err := json.Unmarshal([]byte(out), &review); err != nil {
				t.Fatalf("whoami -o json: %v\n%s", err, out)
			}
			u := review.Status.UserInfo
			if review.Kind != "SelfSubjectReview" || u.Username != "system:serviceaccount:default:"+sa || u.UID == "" ||
				strings.Join(u.Groups, ",") != "system:serviceaccounts,system:serviceaccounts:default,system:authenticated" ||
				len(u.Extra["authentication.kubernetes.io/credential-id"]) != 1 {
				t.Errorf("whoami (token): got %s", out)
			}
			if out := k.ok("", "api-resources", "--api-group=authentication.k8s.io"); !strings.Contains(out, "selfsubjectreviews") || !strings.Contains(out, "tokenreviews") {
				t.Errorf("api-resources: got\n%s", out)
			}

			// Issuer discovery: ServiceAccounts may read it, as Kubernetes'
			// system:service-account-issuer-discovery binding allows.
			jwks := k.ok(tok, "get", "--raw", "/openid/v1/jwks")
			if !strings.Contains(jwks, `"alg":"ES256"`) || !strings.Contains(jwks, `"use":"sig"`) {
				t.Errorf("jwks: got %s", jwks)
			}
			k.ok(tok, "get", "--raw", "/.well-known/openid-configuration")
			// A path RBAC does not give it, refused naming the
			// ServiceAccount (only the API service knows whose the token is).
			k.fails(tok, []string{"get", "--raw", "/metrics"}, `forbidden: User "system:serviceaccount:default:`+sa+`" cannot get path "/metrics"`)
		})
	}

	// Discovery, as kube-apiserver v1.33 serves it.
	get := func(path string) string {
		t.Helper()
		resp, err := client(&carol).Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var list struct {
		Resources []map[string]any `json:"resources"`
	}
	if err := json.Unmarshal([]byte(get("/apis/authentication.k8s.io/v1")), &list); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(list.Resources)
	want := `[{"kind":"SelfSubjectReview","name":"selfsubjectreviews","namespaced":false,"singularName":"selfsubjectreview","verbs":["create"]},` +
		`{"kind":"TokenReview","name":"tokenreviews","namespaced":false,"singularName":"tokenreview","verbs":["create"]}]`
	if string(got) != want {
		t.Errorf("authentication.k8s.io/v1 resources: got %s, want %s", got, want)
	}
	if err := json.Unmarshal([]byte(get("/api/v1")), &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range list.Resources {
		if r["name"] == "serviceaccounts/token" {
			found = true
			got, _ := json.Marshal(r)
			if want := `{"group":"authentication.k8s.io","kind":"TokenRequest","name":"serviceaccounts/token","namespaced":true,"singularName":"","verbs":["create"],"version":"v1"}`; string(got) != want {
				t.Errorf("serviceaccounts/token: got %s, want %s", got, want)
			}
		}
	}
	if !found {
		t.Error("serviceaccounts/token is not in /api/v1")
	}

	// The discovery documents' media types and caching, and 401 without
	// credentials.
	for path, ct := range map[string]string{"/openid/v1/jwks": "application/jwk-set+json", "/.well-known/openid-configuration": "application/json"} {
		resp, err := client(&carol).Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != ct || resp.Header.Get("Cache-Control") != "public, max-age=3600" {
			t.Errorf("%s: got %d %q %q %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"), body)
		}
		resp, err = client(nil).Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("%s without credentials: got %d, want 401", path, resp.StatusCode)
		}
	}
}

// TestKubectlTokensForwarding: in forwarding mode (no Authenticator: the
// gateway passes the Authorization header on) the API service
// authenticates ServiceAccount tokens itself; TokenReview from a file.
func TestKubectlTokensForwarding(t *testing.T) {
	k := startKube(t, "kubectl.1.33")
	k.ok([]string{"create", "serviceaccount", "robot"}, "serviceaccount/robot created")
	tok := strings.TrimSpace(k.ok([]string{"create", "token", "robot"}))
	k.ok([]string{"auth", "whoami", "--token=" + tok}, "system:serviceaccount:default:robot", "[system:serviceaccounts system:serviceaccounts:default system:authenticated]")
	k.fails([]string{"get", "pods", "--token=" + tok},
		`Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:default:robot" cannot list resource "pods" in API group "" in the namespace "default"`)
	review := k.file("review.yaml", "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: "+tok+"\n")
	k.ok([]string{"create", "-f", review, "-o", "jsonpath={.status.authenticated} {.status.user.username} {.status.audiences}"},
		`true system:serviceaccount:default:robot ["`+apiservertest.ServiceAccountIssuer+`"]`)
	// --validate=false: kubectl would first list CRDs, which bob may not
	// (as against kube-apiserver).
	k.fails([]string{"create", "--validate=false", "-f", review, "--token=bob-token"},
		`tokenreviews.authentication.k8s.io is forbidden: User "bob" cannot create resource "tokenreviews" in API group "authentication.k8s.io" at the cluster scope`)
}
