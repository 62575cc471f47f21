// This file holds the tests of the gateway in impersonation mode: it
// authenticates HTTP clients itself and reaches the API service with its own
// certificate, and the API service authorizes the end user; discovery and
// OpenAPI need credentials too.

package gateway_test

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/proto/identity"
	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/apiserver/authn"
)

// TestImpersonation runs the gateway in impersonation mode: it reaches the
// API service with its own certificate in system:kplane-gateways,
// authenticates HTTP clients (client certificates, bearer tokens) itself,
// and the API service authorizes the end user.
func TestImpersonation(t *testing.T) {
	srv, users, client := startImpersonating(t)
	carol := users.Issue(t, "carol", []string{"system:masters"}, false)
	dave := users.Issue(t, "dave", nil, false)
	foreign := apiservertest.NewCA(t).Issue(t, "mallory", []string{"system:masters"}, false)
	tests := []struct {
		name     string
		cert     *tls.Certificate
		token    string
		wantCode int
		wantBody string
	}{
		{name: "token of an admin", token: "admin-token", wantCode: 200, wantBody: `"kind":"PodList"`},
		{name: "token of a user without bindings", token: "bob-token", wantCode: 403, wantBody: `User \"bob\" cannot list`},
		{name: "unknown token", token: "nope", wantCode: 401, wantBody: `"reason":"Unauthorized"`},
		{name: "no credentials", wantCode: 401, wantBody: `"reason":"Unauthorized"`},
		{name: "client certificate of an admin", cert: &carol, wantCode: 200, wantBody: `"kind":"PodList"`},
		{name: "client certificate without bindings", cert: &dave, wantCode: 403, wantBody: `User \"dave\" cannot list`},
		{name: "certificate from an unknown CA", cert: &foreign, wantCode: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", srv.URL+"/api/v1/namespaces/default/pods", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := client(tt.cert).Do(req)
			if err != nil {
				if tt.wantCode == 401 && tt.cert != nil {
					return // the TLS layer refused the certificate: also fine
				}
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tt.wantCode)
			}
			if !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("got body %s, want it to contain %s", body, tt.wantBody)
			}
		})
	}
}

// startImpersonating starts an API service with TLS and a gateway in
// impersonation mode in front of it, which knows the tokens admin-token
// (admin, system:masters) and bob-token (bob, no bindings) and client
// certificates from users. client gives an HTTPS client presenting cert.
func startImpersonating(t *testing.T) (srv *httptest.Server, users *apiservertest.CA, client func(cert *tls.Certificate) *http.Client) {
	t.Helper()
	return startImpersonatingWith(t, gateway.Config{}, nil)
}

// startImpersonatingWith is startImpersonating with more of the gateway's
// configuration (Conn and Authenticator are set here) and, if configure is
// set, of the API service's, and a third token: prom-token (prometheus, in
// system:monitoring).
func startImpersonatingWith(t *testing.T, cfg gateway.Config, configure func(*apiserver.Config)) (srv *httptest.Server, users *apiservertest.CA, client func(cert *tls.Certificate) *http.Client) {
	t.Helper()
	env := apiservertest.Start(t, apiservertest.Options{TLS: true, Configure: configure})
	conn := env.DialCert(t, "kplane-gateway", identity.DefaultFrontProxyGroup)
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("admin-token,admin,1,\"system:masters\"\nbob-token,bob,2\nprom-token,prometheus,3,\"system:monitoring\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	an, err := authn.New(authn.Config{TokenFile: tokens})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Conn, cfg.Authenticator = conn, an
	gw, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	users = apiservertest.NewCA(t)
	srv = httptest.NewUnstartedServer(gw)
	srv.TLS = &tls.Config{ClientCAs: users.Pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)

	client = func(cert *tls.Certificate) *http.Client {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		if cert != nil {
			tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: tr}
	}
	return srv, users, client
}

// TestDiscoveryNeedsCredentials: discovery and OpenAPI, which the gateway
// answers itself, are for authenticated callers that RBAC lets get the path
// (system:discovery); health and version stay open, as in Kubernetes.
func TestDiscoveryNeedsCredentials(t *testing.T) {
	srv, _, client := startImpersonating(t)
	get := func(path, token string) (int, string) {
		req, err := http.NewRequest("GET", srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if path == "/openapi/v2" {
			req.Header.Set("Accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
		}
		resp, err := client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/openapi/v3", "/openapi/v3/apis/apps/v1", "/openapi/v2"} {
		if code, body := get(path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without credentials: got %d %.200s, want 401", path, code, body)
		}
		if code, body := get(path, "nope"); code != http.StatusUnauthorized {
			t.Errorf("%s with an unknown token: got %d %.200s, want 401", path, code, body)
		}
		if code, body := get(path, "bob-token"); code != http.StatusOK {
			t.Errorf("%s as an authenticated user: got %d %.200s, want 200", path, code, body)
		}
	}
	for _, path := range []string{"/version", "/healthz", "/readyz", "/livez"} {
		if code, body := get(path, ""); code != http.StatusOK {
			t.Errorf("%s without credentials: got %d %.200s, want 200", path, code, body)
		}
	}
}
