// This file holds how a corpus reaches an API over HTTP, and the check a
// test makes of its answers against the recorded ones.

package apidiff

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"testing"
)

// HTTPSender sends a case's requests to base with c, as JSON, with the
// bearer token (none when empty: c authenticates).
func HTTPSender(ctx context.Context, c *http.Client, base, token string) Send {
	return func(method, path string, body any) (int, http.Header, []byte, error) {
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				return 0, nil, nil, err
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return 0, nil, nil, err
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b, err
	}
}

// Check runs the corpus with send and fails t on every answer that is not
// the one recorded (in recordedFile) for the same request.
func Check(t *testing.T, corpus, recordedFile string, send Send) {
	t.Helper()
	cases, err := Load(corpus)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(recordedFile)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []Outcome
	if err := json.Unmarshal(raw, &recorded); err != nil {
		t.Fatal(err)
	}
	want := map[string]Outcome{}
	for _, o := range recorded {
		want[o.Name] = o
	}
	got, err := Run(cases, send)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range got {
		t.Run(o.Name, func(t *testing.T) {
			w, ok := want[o.Name]
			if !ok {
				t.Fatalf("%s has no %s: record it again", recordedFile, o.Name)
			}
			if len(o.Answers) != len(w.Answers) {
				t.Fatalf("got %d answers, recorded %d", len(o.Answers), len(w.Answers))
			}
			for i := range o.Answers {
				if !Same(o.Answers[i], w.Answers[i]) {
					g, _ := json.Marshal(o.Answers[i])
					k, _ := json.Marshal(w.Answers[i])
					t.Errorf("request %d:\n got %s\nkube %s", i, g, k)
				}
			}
		})
	}
}
