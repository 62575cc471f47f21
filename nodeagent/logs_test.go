package nodeagent

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kplane/kplane/nodeagent/crilog"
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
		{"waiting container", "/containerLogs/default/web/waiting", 404, ""},
		{"no previous", "/containerLogs/default/web/waiting?previous=true", 404, ""},
		{"unknown container", "/containerLogs/default/web/nope", 404, ""},
		{"unknown pod", "/containerLogs/default/nope/app", 404, ""},
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
			if tt.code == 200 && string(b) != tt.body {
				t.Errorf("body: got %q, want %q", b, tt.body)
			}
		})
	}
}
