// This file holds the test comparing kplane's admission (LimitRange,
// ResourceQuota, Priority, Pod Security) with kube-apiserver's recorded
// answers to the same cases.

package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kplane/kplane/gateway/internal/admissioncorpus"
)

// TestAdmissionLikeKubernetes runs the cases of testdata/admission through
// the gateway, as RECORDER=./gateway/internal/recordadmission
// scripts/record-tables.sh ran them against kube-apiserver v1.33.13, and
// compares every answer: the code, a refusal's reason and message, the
// Warning headers, and the fields each case names of what was created
// (defaults a LimitRange set, the priority resolved...).
func TestAdmissionLikeKubernetes(t *testing.T) {
	srv, _, client := startImpersonating(t)
	c := client(nil)
	send := func(method, path string, body any) (int, http.Header, []byte, error) {
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				return 0, nil, nil, err
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, srv.URL+path, rd)
		if err != nil {
			return 0, nil, nil, err
		}
		req.Header.Set("Authorization", "Bearer admin-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b, err
	}
	raw, err := os.ReadFile("testdata/admission/corpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []admissioncorpus.Case
	if err := yaml.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	recRaw, err := os.ReadFile("testdata/admission/recorded.json")
	if err != nil {
		t.Fatal(err)
	}
	var recorded []admissioncorpus.Outcome
	if err := json.Unmarshal(recRaw, &recorded); err != nil {
		t.Fatal(err)
	}
	want := map[string]admissioncorpus.Outcome{}
	for _, o := range recorded {
		want[o.Name] = o
	}
	got, err := admissioncorpus.Run(cases, send)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range got {
		t.Run(o.Name, func(t *testing.T) {
			w, ok := want[o.Name]
			if !ok {
				t.Fatalf("recorded.json has no %s: record it again", o.Name)
			}
			if len(o.Answers) != len(w.Answers) {
				t.Fatalf("got %d answers, recorded %d", len(o.Answers), len(w.Answers))
			}
			for i := range o.Answers {
				// Compared as JSON: an empty list of fields is none.
				if g, k := describe(o.Answers[i]), describe(w.Answers[i]); g != k {
					t.Errorf("request %d:\n got %s\nkube %s", i, g, k)
				}
			}
		})
	}
}

// describe renders an answer for a failure message.
func describe(a admissioncorpus.Answer) string {
	b, _ := json.Marshal(a)
	return string(b)
}
