// Command recordtables records kube-apiserver's server-side Tables for the
// objects of gateway/testdata/tables/corpus.yaml: it creates each object in
// the cluster its kubeconfig names, writes its status through the status
// subresource, deletes it when asked, and reads it back as a
// meta.k8s.io/v1 Table with the whole object. It writes the Tables
// (recorded.json, which gateway's table test compares kplane's rows with)
// and the column definitions per resource (gateway/tablecolumns.json,
// which the gateway serves). scripts/record-tables.sh runs it against a
// fresh kube-apiserver.
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
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// entry is one object of the corpus.
type entry struct {
	Object map[string]any `json:"object"`
	Status map[string]any `json:"status,omitempty"`
	Delete bool           `json:"delete,omitempty"`
}

// Recorded is one object's Table as kube-apiserver answered it.
type Recorded struct {
	Resource string          `json:"resource"`
	Name     string          `json:"name"`
	Date     string          `json:"date"`
	Table    json.RawMessage `json:"table"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the kube-apiserver to record")
	corpus := flag.String("corpus", "gateway/testdata/tables/corpus.yaml", "the corpus")
	out := flag.String("out", "gateway/testdata/tables/recorded.json", "where the recorded Tables go")
	columns := flag.String("columns", "gateway/tablecolumns.json", "where the column definitions go")
	flag.Parse()
	if err := run(context.Background(), *kubeconfig, *corpus, *out, *columns); err != nil {
		slog.Error("recordtables", "err", err)
		os.Exit(1)
	}
}

// relative matches ${now}, ${now-5m}, ${now+90s}, and ${micronow-5m} for
// a MicroTime (six fractional digits).
var relative = regexp.MustCompile(`\$\{(micro)?now([+-][0-9]+[smh])?\}`)

func run(ctx context.Context, kubeconfig, corpusPath, out, columnsPath string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("http client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	raw, err := os.ReadFile(corpusPath)
	if err != nil {
		return err
	}
	start := time.Now().UTC().Truncate(time.Second)
	raw = relative.ReplaceAllFunc(raw, func(m []byte) []byte {
		sub := relative.FindSubmatch(m)
		t := start
		if len(sub[2]) > 0 {
			d, err := time.ParseDuration(string(sub[2]))
			if err == nil {
				t = t.Add(d)
			}
		}
		if len(sub[1]) > 0 {
			return []byte(t.Format("2006-01-02T15:04:05.000000Z07:00"))
		}
		return []byte(t.Format(time.RFC3339))
	})
	var entries []entry
	if err := yaml.Unmarshal(raw, &entries); err != nil {
		return fmt.Errorf("corpus: %w", err)
	}
	c := &client{hc: hc, host: cfg.Host}
	// Pods need their namespace's default service account (no controller
	// manager runs beside the recording apiserver).
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", map[string]any{
		"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default"}}); err != nil {
		slog.Info("default service account", "err", err)
	}
	var recorded []Recorded
	columns := map[string]json.RawMessage{}
	for _, e := range entries {
		apiVersion, _ := e.Object["apiVersion"].(string)
		kind, _ := e.Object["kind"].(string)
		md, _ := e.Object["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			return err
		}
		m, err := mapper.RESTMapping(gv.WithKind(kind).GroupKind(), gv.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", kind, name, err)
		}
		coll := collectionPath(m)
		if _, err := c.do(ctx, http.MethodPost, coll, e.Object); err != nil {
			return fmt.Errorf("create %s %s: %w", kind, name, err)
		}
		item := coll + "/" + name
		if e.Status != nil {
			if err := c.writeStatus(ctx, item, e.Status); err != nil {
				return fmt.Errorf("status of %s %s: %w", kind, name, err)
			}
		}
		if e.Delete {
			if _, err := c.do(ctx, http.MethodDelete, item, nil); err != nil {
				return fmt.Errorf("delete %s %s: %w", kind, name, err)
			}
		}
	}
	// Read every Table once all writes are done, each at the start of a
	// second, so that the Date header names the second the rows were
	// printed in; a Deployment's and a ReplicaSet's scale too.
	for _, e := range entries {
		apiVersion, _ := e.Object["apiVersion"].(string)
		kind, _ := e.Object["kind"].(string)
		name, _ := e.Object["metadata"].(map[string]any)["name"].(string)
		gv, _ := schema.ParseGroupVersion(apiVersion)
		m, err := mapper.RESTMapping(gv.WithKind(kind).GroupKind(), gv.Version)
		if err != nil {
			return err
		}
		item := collectionPath(m) + "/" + name
		rec, cols, err := c.record(ctx, item, m.Resource.Resource, name)
		if err != nil {
			return err
		}
		recorded, columns[m.Resource.Resource] = append(recorded, rec), cols
		// The scale subresource has a Table of its own.
		if kind == "Deployment" || kind == "ReplicaSet" || kind == "ReplicationController" {
			rec, cols, err := c.record(ctx, item+"/scale", m.Resource.Resource+"/scale", name)
			if err != nil {
				return err
			}
			recorded, columns["scale"] = append(recorded, rec), cols
		}
	}
	if err := writeJSON(out, recorded); err != nil {
		return err
	}
	return writeJSON(columnsPath, columns)
}

// record reads the Table of path at the start of the next second and
// returns it (recorded as resource), with its column definitions.
func (c *client) record(ctx context.Context, path, resource, name string) (Recorded, json.RawMessage, error) {
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second + 100*time.Millisecond).Sub(now))
	body, date, err := c.table(ctx, path+"?includeObject=Object")
	if err != nil {
		return Recorded{}, nil, fmt.Errorf("table of %s: %w", path, err)
	}
	var t map[string]any
	if err := json.Unmarshal(body, &t); err != nil {
		return Recorded{}, nil, err
	}
	// managedFields say nothing about rows; keep the corpus small.
	for _, r := range t["rows"].([]any) {
		md, _ := r.(map[string]any)["object"].(map[string]any)["metadata"].(map[string]any)
		delete(md, "managedFields")
	}
	var cols struct {
		ColumnDefinitions json.RawMessage `json:"columnDefinitions"`
	}
	if err := json.Unmarshal(body, &cols); err != nil {
		return Recorded{}, nil, err
	}
	if body, err = json.Marshal(t); err != nil {
		return Recorded{}, nil, err
	}
	slog.Info("recorded", "resource", resource, "name", name)
	return Recorded{Resource: resource, Name: name, Date: date, Table: body}, cols.ColumnDefinitions, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func collectionPath(m *meta.RESTMapping) string {
	p := "/apis/" + m.Resource.Group + "/" + m.Resource.Version
	if m.Resource.Group == "" {
		p = "/api/" + m.Resource.Version
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		p += "/namespaces/default"
	}
	return p + "/" + m.Resource.Resource
}

// client sends JSON requests to the kube-apiserver.
type client struct {
	hc   *http.Client
	host string
}

// writeStatus puts status on the object at item through its status
// subresource, reading it again after a conflict (the server's own
// controllers may write the status too: a FlowSchema's Dangling
// condition), a few times at most.
func (c *client) writeStatus(ctx context.Context, item string, status map[string]any) error {
	var err error
	for range 5 {
		var cur []byte
		if cur, err = c.do(ctx, http.MethodGet, item, nil); err != nil {
			return err
		}
		var obj map[string]any
		if err := json.Unmarshal(cur, &obj); err != nil {
			return err
		}
		obj["status"] = status
		if _, err = c.do(ctx, http.MethodPut, item+"/status", obj); err == nil || !strings.Contains(err.Error(), "409 Conflict") {
			return err
		}
	}
	return err
}

func (c *client) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	b, _, err := c.send(ctx, method, path, body, "application/json")
	return b, err
}

func (c *client) table(ctx context.Context, path string) ([]byte, string, error) {
	return c.send(ctx, http.MethodGet, path, nil, "application/json;as=Table;v=v1;g=meta.k8s.io")
}

func (c *client) send(ctx context.Context, method, path string, body any, accept string) ([]byte, string, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, "", err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.host+path, rd)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Accept", accept)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode >= 300 {
		return nil, "", fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	return b, resp.Header.Get("Date"), nil
}
