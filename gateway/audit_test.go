// This file holds the test of what the audit log records of an HTTP
// request that came through the gateway.

package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/services/apiserver"
	"github.com/kplane/kplane/services/apiserver/audit"
)

// TestAuditRecordsTheHTTPRequest: every response carries an Audit-Id header
// (the client's own, if it sent one, as kube-apiserver honours it), and the
// API service's audit event under that ID records the HTTP request URI,
// the client's User-Agent and addresses (X-Forwarded-For, then the peer),
// and the end user, as kube-apiserver's would.
func TestAuditRecordsTheHTTPRequest(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "audit.log")
	al, err := audit.New(audit.Config{Path: logPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	srv, _, client := startImpersonatingWith(t, gateway.Config{}, func(c *apiserver.Config) { c.Auditor = al })
	do := func(auditID string) string {
		req, err := http.NewRequest("GET", srv.URL+"/api/v1/namespaces/default/configmaps?limit=5", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer admin-token")
		req.Header.Set("User-Agent", "audit-test/1.0")
		req.Header.Set("X-Forwarded-For", "203.0.113.7")
		if auditID != "" {
			req.Header.Set("Audit-Id", auditID)
		}
		resp, err := client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("list: %d %s", resp.StatusCode, body)
		}
		return resp.Header.Get("Audit-Id")
	}
	generated := do("")
	if len(generated) != 36 {
		t.Fatalf("Audit-Id header: got %q, want a UUID", generated)
	}
	if got := do("my-own-audit-id"); got != "my-own-audit-id" {
		t.Errorf("Audit-Id with the client's own: got %q", got)
	}

	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev audit.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if ev.AuditID != generated && ev.AuditID != "my-own-audit-id" {
			continue
		}
		found[ev.AuditID] = true
		if ev.RequestURI != "/api/v1/namespaces/default/configmaps?limit=5" || ev.UserAgent != "audit-test/1.0" ||
			len(ev.SourceIPs) != 2 || ev.SourceIPs[0] != "203.0.113.7" || ev.SourceIPs[1] != "127.0.0.1" ||
			ev.User.Username != "admin" || ev.Verb != "list" {
			t.Errorf("audit event: got %s", line)
		}
	}
	if !found[generated] || !found["my-own-audit-id"] {
		t.Errorf("audit events for %s and my-own-audit-id: found %v in\n%s", generated, found, b)
	}
}
