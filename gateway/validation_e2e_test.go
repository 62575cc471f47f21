// This file holds the test comparing kplane's refusals of invalid Jobs and
// CronJobs with kube-apiserver's recorded answers.

package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// statusAnswer is the part of a refusal the validation test compares.
type statusAnswer struct {
	Reason  string
	Message string
	Code    int
	Details struct {
		Causes []struct{ Reason, Message, Field string }
	}
}

// TestRefusalsLikeKubernetes sends the requests of testdata/invalid
// through the gateway, as RECORDER=./gateway/internal/recordinvalid
// scripts/record-tables.sh sent them to kube-apiserver v1.33.13, and
// compares kplane's answer (code, reason, message and every cause, in
// order) with kube-apiserver's.
func TestRefusalsLikeKubernetes(t *testing.T) {
	srv, _, client := startImpersonating(t)
	c := client(nil)
	do := func(method, path, ctype string, body any) (int, []byte) {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer admin-token")
		req.Header.Set("Content-Type", ctype)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	raw, err := os.ReadFile("testdata/invalid/corpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var corpus []struct {
		Name     string
		Resource string
		Object   map[string]any
		Patch    map[string]any
		Cluster  bool
	}
	if err := yaml.Unmarshal(raw, &corpus); err != nil {
		t.Fatal(err)
	}
	recRaw, err := os.ReadFile("testdata/invalid/recorded.json")
	if err != nil {
		t.Fatal(err)
	}
	var recorded []struct {
		Name   string
		Code   int
		Status json.RawMessage
	}
	if err := json.Unmarshal(recRaw, &recorded); err != nil {
		t.Fatal(err)
	}
	want := map[string]statusAnswer{}
	for _, r := range recorded {
		var s statusAnswer
		if err := json.Unmarshal(r.Status, &s); err != nil {
			t.Fatal(err)
		}
		want[r.Name] = s
	}
	for _, e := range corpus {
		t.Run(e.Name, func(t *testing.T) {
			w, ok := want[e.Name]
			if !ok {
				t.Fatalf("recorded.json has no %s: record it again", e.Name)
			}
			i := strings.LastIndex(e.Resource, "/")
			gv, res := e.Resource[:max(i, 0)], e.Resource[i+1:]
			prefix := "/apis/" + gv
			if !strings.Contains(gv, "/") {
				prefix = "/api/" + gv
			}
			coll := prefix + "/namespaces/default/" + res
			if e.Cluster {
				coll = prefix + "/" + res
			}
			code, out := do(http.MethodPost, coll, "application/json", e.Object)
			if e.Patch != nil {
				if code != http.StatusCreated {
					t.Fatalf("create before the patch: %d %s", code, out)
				}
				name := e.Object["metadata"].(map[string]any)["name"].(string)
				code, out = do(http.MethodPatch, coll+"/"+name, "application/merge-patch+json", e.Patch)
			}
			var got statusAnswer
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("answer %d %s: %v", code, out, err)
			}
			if code != w.Code || got.Reason != w.Reason || got.Message != w.Message {
				t.Errorf("got %d %s %q,\nkube-apiserver answered %d %s %q", code, got.Reason, got.Message, w.Code, w.Reason, w.Message)
			}
			if g, k := fmt.Sprint(got.Details.Causes), fmt.Sprint(w.Details.Causes); g != k {
				t.Errorf("causes:\n got %s\nwant %s", g, k)
			}
		})
	}
}
