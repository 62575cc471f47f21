// This file tests that API Priority and Fairness shows through the
// gateway as on kube-apiserver: a response names the FlowSchema and
// priority level the request was classified into in the
// X-Kubernetes-PF-FlowSchema-UID and X-Kubernetes-PF-PriorityLevel-UID
// headers (an admin's exempt, a plain user's global-default), on a refusal
// (bob may not list ConfigMaps) as on a success.
package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/services/apiserver"
)

func TestPriorityAndFairnessHeaders(t *testing.T) {
	srv, _, client := startImpersonatingWith(t, gateway.Config{}, func(c *apiserver.Config) { c.EnablePriorityAndFairness = true })
	get := func(path, token string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	uid := func(path string) string {
		resp, b := get(path, "admin-token")
		var o struct{ Metadata struct{ UID string } }
		if err := json.Unmarshal(b, &o); resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return o.Metadata.UID
	}
	const fc = "/apis/flowcontrol.apiserver.k8s.io/v1/"
	for _, c := range []struct{ token, schema, level string }{
		{"admin-token", "exempt", "exempt"}, {"bob-token", "global-default", "global-default"},
	} {
		wantFS, wantPL := uid(fc+"flowschemas/"+c.schema), uid(fc+"prioritylevelconfigurations/"+c.level)
		var resp *http.Response
		// The service classifies once its watch brought it the schemas.
		for range 200 {
			resp, _ = get("/api/v1/namespaces/default/configmaps", c.token)
			if resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") == wantFS {
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
		if got := resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"); got != wantFS {
			t.Errorf("%s: X-Kubernetes-PF-FlowSchema-UID %q, want %s's %q", c.token, got, c.schema, wantFS)
		}
		if got := resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID"); got != wantPL {
			t.Errorf("%s: X-Kubernetes-PF-PriorityLevel-UID %q, want %s's %q", c.token, got, c.level, wantPL)
		}
	}
}
