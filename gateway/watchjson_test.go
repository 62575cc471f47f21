// This file holds the tests of plain JSON watches through the gateway,
// served from the API service's JSON watch stream.

package gateway_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/gateway"
)

type watchLine struct {
	Type   string `json:"type"`
	Object struct {
		Kind       string            `json:"kind"`
		APIVersion string            `json:"apiVersion"`
		Metadata   map[string]any    `json:"metadata"`
		Data       map[string]string `json:"data"`
	} `json:"object"`
}

// TestWatchJSON: a plain JSON watch through the gateway gets Kubernetes'
// watch stream: the initial ADDED event of a large object whole (it travels
// in pieces), then MODIFIED and DELETED; an unauthorized watch gets a 403
// Status, not a stream.
func TestWatchJSON(t *testing.T) {
	srv, _, client := startImpersonatingWith(t, gateway.Config{}, nil)
	do := func(method, path, token, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		switch {
		case method == "PATCH":
			req.Header.Set("Content-Type", "application/merge-patch+json")
		case body != "":
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	big := strings.Repeat("x", 300<<10) // ten pieces of the stream
	resp := do("POST", "/api/v1/namespaces/default/configmaps", "admin-token",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"watched"},"data":{"blob":"`+big+`"}}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %s", resp.Status)
	}

	resp = do("GET", "/api/v1/namespaces/default/configmaps?watch=1&fieldSelector=metadata.name%3Dwatched", "admin-token", "")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("watch: %s %v", resp.Status, resp.Header)
	}
	lines := make(chan watchLine, 10)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			var l watchLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Errorf("watch line %.200q: %v", sc.Text(), err)
				return
			}
			lines <- l
		}
	}()
	next := func(want string) watchLine {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || l.Type != want {
				t.Fatalf("watch event: got %+v (open %v), want %s", l.Type, ok, want)
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s event", want)
		}
		return watchLine{}
	}
	added := next("ADDED")
	if added.Object.Kind != "ConfigMap" || added.Object.APIVersion != "v1" || added.Object.Data["blob"] != big {
		t.Errorf("ADDED: kind %q apiVersion %q, %d bytes of blob, want the whole ConfigMap", added.Object.Kind, added.Object.APIVersion, len(added.Object.Data["blob"]))
	}
	resp2 := do("PATCH", "/api/v1/namespaces/default/configmaps/watched", "admin-token", `{"data":{"blob":"small"}}`)
	resp2.Body.Close()
	if l := next("MODIFIED"); l.Object.Data["blob"] != "small" {
		t.Errorf("MODIFIED: %+v", l.Object.Data)
	}
	resp2 = do("DELETE", "/api/v1/namespaces/default/configmaps/watched", "admin-token", "")
	resp2.Body.Close()
	next("DELETED")

	// bob may not watch: a 403 Status, not a stream.
	resp4 := do("GET", "/api/v1/namespaces/default/configmaps?watch=1", "bob-token", "")
	body, _ := io.ReadAll(resp4.Body)
	resp4.Body.Close()
	if resp4.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `cannot watch resource \"configmaps\"`) {
		t.Errorf("bob's watch: %s %s, want 403", resp4.Status, body)
	}
}
