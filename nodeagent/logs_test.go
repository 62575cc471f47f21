// This file holds the tests of the log server over hand-made pod records:
// paths, query parameters, which instance is served, and the client
// certificate check.

package nodeagent

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kplane/kplane/nodeagent/crilog"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
)

// TestLogServer: paths, query parameters and which instance is served,
// over records made by hand (the e2e tests cover real pods).
func TestLogServer(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := crilog.WriteLines(f, time.Unix(1_700_000_000, 0), crilog.Stdout, lines); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cur, prev := write("1.log", "new-1", "new-2"), write("0.log", "old")
	a := &Agent{records: map[string]*podRecord{
		"default/web": {ctrs: map[string]*ctrState{
			"app":     {name: "app", logPath: cur, lastLog: prev},
			"waiting": {name: "waiting"},
			"crashed": {name: "crashed", lastLog: prev},
			"pull":    {name: "pull", waiting: ReasonImagePullBackOff},
		}},
	}}
	srv := httptest.NewServer(NewLogServer(a))
	defer srv.Close()
	tests := []struct {
		name, path string
		code       int
		body       string
	}{
		{"current", "/containerLogs/default/web/app", 200, "new-1\nnew-2\n"},
		{"tail", "/containerLogs/default/web/app?tailLines=1", 200, "new-2\n"},
		{"tail zero", "/containerLogs/default/web/app?tailLines=0", 200, ""},
		{"previous", "/containerLogs/default/web/app?previous=true", 200, "old\n"},
		{"timestamps", "/containerLogs/default/web/app?tailLines=1&timestamps=true", 200, "2023-11-14T22:13:20Z new-2\n"},
		{"crash-looping: the last instance", "/containerLogs/default/web/crashed", 200, "old\n"},
		{"waiting container", "/containerLogs/default/web/waiting", 400, `container "waiting" in pod "web" is waiting to start: ContainerCreating` + "\n"},
		{"pulling fails", "/containerLogs/default/web/pull", 400, `container "pull" in pod "web" is waiting to start: trying and failing to pull image` + "\n"},
		{"no previous", "/containerLogs/default/web/waiting?previous=true", 400, `previous terminated container "waiting" in pod "web" not found` + "\n"},
		{"unknown container", "/containerLogs/default/web/nope", 404, `container "nope" not found in pod "web"` + "\n"},
		{"unknown pod", "/containerLogs/default/nope/app", 404, `pod "nope" does not exist` + "\n"},
		{"bad path", "/containerLogs/default/web", 404, ""},
		{"bad tail", "/containerLogs/default/web/app?tailLines=x", 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Fatalf("status: got %d, want %d (%s)", resp.StatusCode, tt.code, b)
			}
			if (tt.code == 200 || tt.body != "") && string(b) != tt.body {
				t.Errorf("body: got %q, want %q", b, tt.body)
			}
		})
	}
}

// TestLogServerClientCert: after RequireClientCert only a client whose
// verified certificate names an allowed user reads logs; no certificate is
// 401, another user (even a node of the same CA) 403, another CA's
// certificate fails the handshake.
func TestLogServerClientCert(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "1.log")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := crilog.WriteLines(f, time.Now(), crilog.Stdout, []string{"hi"}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	a := &Agent{records: map[string]*podRecord{"default/web": {ctrs: map[string]*ctrState{"app": {name: "app", lastLog: p}}}}}
	ca := apiservertest.NewCA(t)
	srv := httptest.NewUnstartedServer(NewLogServer(a).RequireClientCert("kube-apiserver-kubelet-client"))
	srv.TLS = LogServerTLS(ca.Issue(t, "kplane-nodeagent", nil, true), ca.Pool)
	srv.StartTLS()
	defer srv.Close()
	tests := []struct {
		name    string
		certs   []tls.Certificate
		code    int
		wantErr bool
	}{
		{name: "the API service", certs: []tls.Certificate{ca.Issue(t, "kube-apiserver-kubelet-client", nil, false)}, code: 200},
		{name: "no certificate", code: 401},
		{name: "a node", certs: []tls.Certificate{ca.Issue(t, "system:node:n1", []string{"system:nodes"}, false)}, code: 403},
		{name: "another CA", certs: []tls.Certificate{apiservertest.NewCA(t).Issue(t, "kube-apiserver-kubelet-client", nil, false)}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, Certificates: tt.certs}}}
			resp, err := hc.Get(srv.URL + "/containerLogs/default/web/app")
			if tt.wantErr {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("got %d, want a TLS handshake failure", resp.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Fatalf("got %d %q, want %d", resp.StatusCode, b, tt.code)
			}
			if tt.code == 200 && string(b) != "hi\n" {
				t.Errorf("body: got %q, want %q", b, "hi\n")
			}
		})
	}
}
