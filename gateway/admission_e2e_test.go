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

	"github.com/kplane/kplane/internal/apidiff"
)

// TestAdmissionLikeKubernetes runs the cases of testdata/admission through
// the gateway, as RECORDER=./internal/apidiff/record
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
	cases, err := apidiff.Load("testdata/admission/corpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	recRaw, err := os.ReadFile("testdata/admission/recorded.json")
	if err != nil {
		t.Fatal(err)
	}
	var recorded []apidiff.Outcome
	if err := json.Unmarshal(recRaw, &recorded); err != nil {
		t.Fatal(err)
	}
	want := map[string]apidiff.Outcome{}
	for _, o := range recorded {
		want[o.Name] = o
	}
	got, err := apidiff.Run(cases, send)
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
				if !apidiff.Same(o.Answers[i], w.Answers[i]) {
					t.Errorf("request %d:\n got %s\nkube %s", i, describe(o.Answers[i]), describe(w.Answers[i]))
				}
			}
		})
	}
}

// describe renders an answer for a failure message.
func describe(a apidiff.Answer) string {
	b, _ := json.Marshal(a)
	return string(b)
}
