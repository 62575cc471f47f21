// This file holds the test comparing kplane's answers to writes of custom
// resources (Gateway API's published HTTPRoute CRD and a CRD with the
// shapes operators use: defaults, pattern and CEL refusals, int-or-string,
// preserved fields, list-map keys, unknown fields warned about or refused)
// with kube-apiserver's recorded answers to the same requests.
package kubectltest

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/internal/apidiff"
	"github.com/kplane/kplane/services/client/clienttest"
	"github.com/kplane/kplane/services/controllers"
)

func TestCustomResourcesLikeKubernetes(t *testing.T) {
	env := clienttest.Start(t, clienttest.Options{})
	startControlPlane(t, env, false, controllers.CRD)
	gw, err := gateway.New(gateway.Config{Conn: env.Dial(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(gw)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c := srv.Client()
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
		req.Header.Set("Authorization", "Bearer "+clienttest.AdminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b, err
	}
	cases, err := apidiff.Load("testdata/crcases/corpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	recRaw, err := os.ReadFile("testdata/crcases/recorded.json")
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
					g, _ := json.Marshal(o.Answers[i])
					k, _ := json.Marshal(w.Answers[i])
					t.Errorf("request %d:\n got %s\nkube %s", i, g, k)
				}
			}
		})
	}
}
