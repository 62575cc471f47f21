// This file holds the tests of the audit webhook backend against a real
// HTTPS server reading what it is sent.

package audit

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// receiver is an HTTPS server collecting the EventLists POSTed to it.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	events []map[string]any
	kinds  []string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var list struct {
			Kind       string           `json:"kind"`
			APIVersion string           `json:"apiVersion"`
			Items      []map[string]any `json:"items"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.kinds = append(r.kinds, list.APIVersion+"/"+list.Kind)
		r.events = append(r.events, list.Items...)
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// kubeconfig writes a kubeconfig naming the receiver, trusting its CA.
func (r *receiver) kubeconfig(t *testing.T) string {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "webhook.kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: audit
  cluster: {server: %q, certificate-authority: %q}
users:
- name: apiserver
  user: {}
contexts:
- name: audit
  context: {cluster: audit, user: apiserver}
current-context: audit
`, r.srv.URL, caFile)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (r *receiver) received() ([]map[string]any, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.events...), append([]string(nil), r.kinds...)
}

func testEvent(id string) *Event {
	e := NewEvent(id, time.Now())
	e.Level, e.Stage, e.Verb = LevelRequest, StageResponseComplete, "create"
	e.User = UserInfo{Username: "alice", Groups: []string{"devs"}}
	e.ObjectRef = &ObjectRef{Resource: "configmaps", Namespace: "default", Name: "cm", APIVersion: "v1"}
	e.RequestObject = []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm"}}`)
	e.SetResponse(201, "", "")
	e.StageTimings = []StageTiming{{Name: "authn", Micros: 12}, {Name: "store", Micros: 900}}
	return e
}

// TestWebhookBlocking: in blocking mode each event reaches the webhook as
// an audit.k8s.io/v1 EventList before Log returns, with the request body
// embedded and the stage timings as an annotation.
func TestWebhookBlocking(t *testing.T) {
	r := newReceiver(t)
	w, err := NewWebhook(WebhookConfig{ConfigFile: r.kubeconfig(t), Mode: WebhookBlocking})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	if err := w.Run(stop); err != nil {
		t.Fatal(err)
	}
	defer func() { close(stop); w.Shutdown() }()
	if err := w.Log(testEvent("id-1")); err != nil {
		t.Fatal(err)
	}
	events, kinds := r.received()
	if len(events) != 1 || kinds[0] != "audit.k8s.io/v1/EventList" {
		t.Fatalf("received %v in %v, want one event in an audit.k8s.io/v1 EventList", events, kinds)
	}
	e := events[0]
	obj, _ := e["requestObject"].(map[string]any)
	ann, _ := e["annotations"].(map[string]any)
	user, _ := e["user"].(map[string]any)
	if e["auditID"] != "id-1" || e["level"] != "Request" || e["verb"] != "create" || user["username"] != "alice" ||
		obj["kind"] != "ConfigMap" || ann[StageTimingsAnnotation] != "authn=12µs,store=900µs" {
		t.Errorf("received event %v", e)
	}
}

// TestWebhookBatch: in batch mode events are buffered and sent together;
// Shutdown sends what is left.
func TestWebhookBatch(t *testing.T) {
	r := newReceiver(t)
	w, err := NewWebhook(WebhookConfig{ConfigFile: r.kubeconfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	if err := w.Run(stop); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := w.Log(testEvent(fmt.Sprintf("id-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	w.Shutdown()
	if events, _ := r.received(); len(events) != 5 {
		t.Errorf("received %d events, want 5", len(events))
	}
}

func TestWebhookRefusesUnknownMode(t *testing.T) {
	r := newReceiver(t)
	if _, err := NewWebhook(WebhookConfig{ConfigFile: r.kubeconfig(t), Mode: "blocking-strict"}); err == nil {
		t.Error("mode blocking-strict: accepted, want a refusal")
	}
}
