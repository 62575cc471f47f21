// Command recordinvalid records how kube-apiserver refuses the objects of
// gateway/testdata/invalid/corpus.yaml: for each entry it creates the
// object in the default namespace (or, for an entry with a patch, creates
// it and then sends the patch as a JSON merge patch) and keeps the HTTP
// code and the Status kube-apiserver answered, then deletes what it made.
// It writes gateway/testdata/invalid/recorded.json, which gateway's
// validation test compares kplane's answers with. scripts/record-tables.sh
// runs it (RECORDER=./gateway/internal/recordinvalid) against a fresh
// kube-apiserver.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// Entry is one refused request of the corpus.
type Entry struct {
	Name     string         `json:"name"`
	Resource string         `json:"resource"` // "batch/v1/jobs"
	Object   map[string]any `json:"object"`
	Patch    map[string]any `json:"patch,omitempty"`
	// Cluster: the resource is cluster-scoped (no namespace in the path).
	Cluster bool `json:"cluster,omitempty"`
}

// collection is the REST path of an entry's collection: resource is
// "<group>/<version>/<resource>", or "v1/<resource>" for the core group; a
// namespaced one is in the default namespace.
func collection(resource string, cluster bool) string {
	i := strings.LastIndex(resource, "/")
	gv, res := resource[:max(i, 0)], resource[i+1:]
	prefix := "/apis/" + gv
	if !strings.Contains(gv, "/") {
		prefix = "/api/" + gv
	}
	if cluster {
		return prefix + "/" + res
	}
	return prefix + "/namespaces/default/" + res
}

// Recorded is kube-apiserver's answer to one entry's last request.
type Recorded struct {
	Name   string          `json:"name"`
	Code   int             `json:"code"`
	Status json.RawMessage `json:"status"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the kube-apiserver to record")
	corpus := flag.String("corpus", "gateway/testdata/invalid/corpus.yaml", "the corpus")
	out := flag.String("out", "gateway/testdata/invalid/recorded.json", "where the answers go")
	flag.Parse()
	if err := run(context.Background(), *kubeconfig, *corpus, *out); err != nil {
		slog.Error("recordinvalid", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, corpus, out string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(corpus)
	if err != nil {
		return err
	}
	var entries []Entry
	if err := yaml.Unmarshal(raw, &entries); err != nil {
		return fmt.Errorf("corpus: %w", err)
	}
	send := func(method, path, ctype string, body any) (int, []byte, error) {
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				return 0, nil, err
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, cfg.Host+path, rd)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Accept", "application/json")
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	var recorded []Recorded
	for _, e := range entries {
		coll := collection(e.Resource, e.Cluster)
		name, _ := e.Object["metadata"].(map[string]any)["name"].(string)
		code, body, err := send(http.MethodPost, coll, "application/json", e.Object)
		if err != nil {
			return err
		}
		if e.Patch != nil {
			if code != http.StatusCreated {
				return fmt.Errorf("%s: create before the patch: %d %s", e.Name, code, body)
			}
			if code, body, err = send(http.MethodPatch, coll+"/"+name, "application/merge-patch+json", e.Patch); err != nil {
				return err
			}
		}
		if code < 300 {
			return fmt.Errorf("%s: kube-apiserver took it: %d %s", e.Name, code, body)
		}
		if c, b, err := send(http.MethodDelete, coll+"/"+name, "application/json", map[string]any{"propagationPolicy": "Background"}); err != nil {
			return err
		} else if c >= 300 && c != http.StatusNotFound {
			return fmt.Errorf("%s: delete: %d %s", e.Name, c, b)
		}
		recorded = append(recorded, Recorded{Name: e.Name, Code: code, Status: body})
		slog.Info("recorded", "entry", e.Name, "code", code)
	}
	b, err := json.MarshalIndent(recorded, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}
