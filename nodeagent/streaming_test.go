// This file holds the test of the kubelet streaming endpoints' answers
// before an upgrade, client certificate check included.

package nodeagent

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestStreamEndpointErrors: the kubelet's answers before any upgrade, and
// the client certificate check covering the streaming paths too.
func TestStreamEndpointErrors(t *testing.T) {
	a := &Agent{records: map[string]*podRecord{"default/web": {ctrs: map[string]*ctrState{"app": {name: "app"}}}}}
	srv := httptest.NewServer(NewLogServer(a))
	defer srv.Close()
	tests := []struct {
		name, method, path string
		code               int
		body               string
	}{
		{"no such pod", "POST", "/exec/default/nosuch/app?command=true&output=1", 404, "pod does not exist"},
		{"no running instance", "POST", "/exec/default/web/app?command=true&output=1", 500, `container not found ("app")`},
		{"no such container", "POST", "/attach/default/web/nope?output=1", 500, `container not found ("nope")`},
		{"no stream asked for", "POST", "/exec/default/web/app?command=true", 400, "you must specify at least 1 of stdin, stdout, stderr"},
		{"bad path", "POST", "/exec/default/web", 404, "want /exec|attach/{namespace}/{pod}/{container} or /portForward/{namespace}/{pod}"},
		{"no sandbox", "POST", "/portForward/default/web", 500, `pod "web" has no sandbox`},
		{"method", "PUT", "/exec/default/web/app?command=true&output=1", 405, "method not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code || strings.TrimSpace(string(b)) != tt.body {
				t.Errorf("%s %s: got %d %q, want %d %q", tt.method, tt.path, resp.StatusCode, b, tt.code, tt.body)
			}
		})
	}
}
