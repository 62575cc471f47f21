// This file holds the tests of the audit log file: one JSON line per
// request, rotation by size, a nil logger, and a bad path.

package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/kplane/kplane/proto/apierrors"
	"github.com/kplane/kplane/services/apiserver/request"
)

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestLogWritesOneJSONLinePerRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := New(Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	attrs := request.Attributes{
		User: request.User{Name: "bob", UID: "7", Groups: []string{"dev", request.AuthenticatedGroup}},
		Verb: "create", APIGroup: "apps", APIVersion: "v1", Resource: "deployments", Namespace: "default", Name: "web",
	}
	tests := []struct {
		name       string
		err        error
		wantCode   float64
		wantReason string
	}{
		{name: "allowed", wantCode: 200},
		{name: "forbidden", err: apierrors.NewForbidden("apps", "deployments", "web", `User "bob" cannot create resource "deployments"`), wantCode: 403, wantReason: "Forbidden"},
		{name: "conflict", err: apierrors.NewConflict("apps", "deployments", "web", apierrors.ConflictModified), wantCode: 409, wantReason: "Conflict"},
	}
	ids := map[string]bool{}
	for _, tt := range tests {
		id := NewID()
		if _, err := uuid.Parse(id); err != nil || ids[id] {
			t.Fatalf("NewID() = %q: not a fresh UUID (%v)", id, err)
		}
		ids[id] = true
		ev := NewEvent(id, time.Now())
		ev.RequestURI = "/kplane.apps.v1.Deployments/Create"
		ev.Timed("authn", time.Now())
		ev.SetAttributes(attrs)
		ev.Timed("authz", time.Now())
		ev.SetError(tt.err)
		if err := l.Log(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != len(tests) {
		t.Fatalf("got %d lines, want %d", len(lines), len(tests))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := lines[i]
			if !ids[m["auditID"].(string)] {
				t.Errorf("got auditID %v, want one of the IDs issued", m["auditID"])
			}
			user := m["user"].(map[string]any)
			if got := user["username"]; got != "bob" {
				t.Errorf("got username %v, want bob", got)
			}
			if diff := cmp.Diff([]any{"dev", "system:authenticated"}, user["groups"]); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
			wantRef := map[string]any{"resource": "deployments", "namespace": "default", "name": "web", "apiGroup": "apps", "apiVersion": "v1"}
			if diff := cmp.Diff(wantRef, m["objectRef"]); diff != "" {
				t.Errorf("objectRef (-want +got):\n%s", diff)
			}
			if got := m["verb"]; got != "create" {
				t.Errorf("got verb %v, want create", got)
			}
			rs := m["responseStatus"].(map[string]any)
			if rs["code"] != tt.wantCode {
				t.Errorf("got code %v, want %v", rs["code"], tt.wantCode)
			}
			if got, _ := rs["reason"].(string); got != tt.wantReason {
				t.Errorf("got reason %q, want %q", got, tt.wantReason)
			}
			timings := m["stageTimings"].([]any)
			var names []string
			for _, st := range timings {
				names = append(names, st.(map[string]any)["name"].(string))
			}
			if diff := cmp.Diff([]string{"authn", "authz"}, names); diff != "" {
				t.Errorf("stage names (-want +got):\n%s", diff)
			}
			for _, k := range []string{"requestReceivedTimestamp", "stageTimestamp"} {
				if _, err := time.Parse(time.RFC3339Nano, m[k].(string)); err != nil {
					t.Errorf("%s = %v: %v", k, m[k], err)
				}
			}
			if m["kind"] != "Event" || m["apiVersion"] != "audit.k8s.io/v1" || m["stage"] != "ResponseComplete" {
				t.Errorf("got kind/apiVersion/stage %v/%v/%v", m["kind"], m["apiVersion"], m["stage"])
			}
		})
	}
}

func TestLogRotatesBySize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := New(Config{Path: path, MaxSizeMB: 1})
	if err != nil {
		t.Fatal(err)
	}
	// About 2.5 MiB of events in total: at least two rotations' worth.
	msg := strings.Repeat("x", 1000)
	const n = 2600
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				if i%100 < 4 {
					// lumberjack names backups by the millisecond: keep
					// rotations at least a few milliseconds apart.
					time.Sleep(2 * time.Millisecond)
				}
				ev := NewEvent(NewID(), time.Now())
				ev.SetResponse(200, "", msg)
				if err := l.Log(ev); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		fi, _ := os.Stat(p)
		if fi.Size() > 1<<20 {
			t.Errorf("%s is %d bytes, over the 1 MiB limit", e.Name(), fi.Size())
		}
		total += len(readLines(t, p))
	}
	if len(entries) < 3 {
		t.Errorf("got %d files, want the log rotated at least twice", len(entries))
	}
	if total != n {
		t.Errorf("got %d events across the files, want %d (none lost or torn)", total, n)
	}
}

func TestNilLoggerDiscards(t *testing.T) {
	l, err := New(Config{})
	if err != nil || l != nil {
		t.Fatalf("New(empty path) = %v, %v; want nil, nil", l, err)
	}
	if err := l.Log(NewEvent(NewID(), time.Now())); err != nil {
		t.Errorf("nil logger Log: %v", err)
	}
}

func TestNewFailsOnBadPath(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Path: filepath.Join(blocker, "audit.log")}); err == nil {
		t.Error("got no error for a path under a regular file")
	}
}
