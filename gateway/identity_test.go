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
	"github.com/kplane/kplane/services/apiserver/authn"
	"github.com/kplane/kplane/services/client/clienttest"
)

// TestImpersonation runs the gateway in impersonation mode: it reaches the
// API service with its own certificate in system:kplane-gateways,
// authenticates HTTP clients (client certificates, bearer tokens) itself,
// and the API service authorizes the end user.
func TestImpersonation(t *testing.T) {
	env := clienttest.Start(t, clienttest.Options{TLS: true})
	conn := env.DialCert(t, "kplane-gateway", authn.DefaultFrontProxyGroup)
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("admin-token,admin,1,\"system:masters\"\nbob-token,bob,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	an, err := authn.New(authn.Config{TokenFile: tokens})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Conn: conn, Authenticator: an})
	if err != nil {
		t.Fatal(err)
	}
	users := clienttest.NewCA(t)
	srv := httptest.NewUnstartedServer(gw)
	srv.TLS = &tls.Config{ClientCAs: users.Pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)

	client := func(cert *tls.Certificate) *http.Client {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		if cert != nil {
			tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: tr}
	}
	carol := users.Issue(t, "carol", []string{"system:masters"}, false)
	dave := users.Issue(t, "dave", nil, false)
	foreign := clienttest.NewCA(t).Issue(t, "mallory", []string{"system:masters"}, false)
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
