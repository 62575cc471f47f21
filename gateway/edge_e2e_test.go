// This file holds end-to-end tests of how the gateway and the API service
// answer writes that Kubernetes refuses, compared with what kube-apiserver
// v1.33 answers to the same requests.

package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestUIDWrites: a patch changing metadata.uid is 422 (the field is
// immutable), a PUT naming another uid is 409 (a failed precondition), and
// neither changes the object, as on kube-apiserver.
func TestUIDWrites(t *testing.T) {
	srv, _, client := startImpersonating(t)
	c := client(nil)
	do := func(method, path, contentType, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer admin-token")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const path = "/api/v1/namespaces/default/configmaps"
	if code, body := do("POST", path, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"u"},"data":{"a":"1"}}`); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	const other = "00000000-0000-4000-8000-000000000001"
	code, body := do("PATCH", path+"/u", "application/merge-patch+json", `{"metadata":{"uid":"`+other+`"},"data":{"a":"2"}}`)
	if want := `ConfigMap \"u\" is invalid: metadata.uid: Invalid value: \"` + other + `\": field is immutable`; code != 422 || !strings.Contains(body, want) || !strings.Contains(body, `"field":"metadata.uid"`) {
		t.Errorf("merge patch of the uid: got %d %s, want 422 with %s", code, body, want)
	}
	code, body = do("PUT", path+"/u", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"u","uid":"`+other+`"},"data":{"a":"3"}}`)
	if code != 409 || !strings.Contains(body, `Precondition failed: UID in precondition: `+other) {
		t.Errorf("PUT with another uid: got %d %s, want 409 Precondition failed", code, body)
	}
	if code, body := do("GET", path+"/u", "", ""); code != 200 || !strings.Contains(body, `"a":"1"`) {
		t.Errorf("after the refused writes: %d %s, want data a=1", code, body)
	}
}
