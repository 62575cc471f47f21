// This file holds the test of the audit Policy on the API service: levels,
// stages and the bodies recorded, read back from the audit log.

package apiserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/audit"
)

const testAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  users: ["system:node:a"]
- level: RequestResponse
  resources: [{group: "", resources: ["configmaps"]}]
  omitManagedFields: true
- level: Request
  resources: [{group: "", resources: ["secrets"]}]
  omitStages: ["RequestReceived"]
- level: Metadata
`

// auditLine is what the test reads of an audit event.
type auditLine struct {
	Level          string          `json:"level"`
	AuditID        string          `json:"auditID"`
	Stage          string          `json:"stage"`
	Verb           string          `json:"verb"`
	User           audit.UserInfo  `json:"user"`
	ResponseStatus *audit.Status   `json:"responseStatus"`
	RequestObject  json.RawMessage `json:"requestObject"`
	ResponseObject json.RawMessage `json:"responseObject"`
}

func readAudit(t *testing.T, path string) map[string][]auditLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byID := map[string][]auditLine{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		byID[l.AuditID] = append(byID[l.AuditID], l)
	}
	return byID
}

// TestAuditPolicy: Kubernetes' audit Policy decides, first rule wins, which
// requests are logged, at which stages, and with which bodies.
func TestAuditPolicy(t *testing.T) {
	p, err := audit.ParsePolicy([]byte(testAuditPolicy))
	if err != nil {
		t.Fatal(err)
	}
	conn, path := startStackWith(t, p)
	cms, secrets, nodes := corev1.NewConfigMapServiceClient(conn), corev1.NewSecretServiceClient(conn), corev1.NewNodeServiceClient(conn)
	admin := withToken(t, "admintoken")
	id := func(h metadata.MD) string {
		t.Helper()
		if v := h.Get("audit-id"); len(v) == 1 && v[0] != "" {
			return v[0]
		}
		t.Fatalf("audit-id header: %v", h)
		return ""
	}

	var cmH, secretH, nodeH, listH metadata.MD
	cm := &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: "audited", Namespace: "default",
		ManagedFields: []*metav1.ManagedFieldsEntry{{Manager: "test", Operation: "Update", ApiVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{}}`)}}}},
		Data: map[string]string{"greeting": "hello"}}
	if _, err := cms.CreateConfigMap(admin, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm}, grpc.Header(&cmH)); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.CreateSecret(admin, &corev1.CreateSecretRequest{Namespace: "default", Secret: &corev1.Secret{
		Metadata: &metav1.ObjectMeta{Name: "audited", Namespace: "default"}, StringData: map[string]string{"k": "v"}}}, grpc.Header(&secretH)); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.ListNodes(withToken(t, "nodeatoken"), &corev1.ListNodesRequest{}, grpc.Header(&nodeH)); err != nil {
		t.Fatal(err)
	}
	if _, err := corev1.NewPodServiceClient(conn).ListPods(admin, &corev1.ListPodsRequest{Namespace: "kube-system"}, grpc.Header(&listH)); err != nil {
		t.Fatal(err)
	}
	log := readAudit(t, path)

	// configmaps: RequestResponse, both stages, bodies without managedFields.
	evs := log[id(cmH)]
	if len(evs) != 2 || evs[0].Stage != "RequestReceived" || evs[1].Stage != "ResponseComplete" {
		t.Fatalf("configmap create: got %+v, want RequestReceived then ResponseComplete", evs)
	}
	if evs[0].Level != "RequestResponse" || evs[0].ResponseStatus != nil || evs[0].User.Username != "admin" {
		t.Errorf("RequestReceived: got %+v", evs[0])
	}
	done := evs[1]
	if done.ResponseStatus == nil || done.ResponseStatus.Code != 201 || done.Verb != "create" {
		t.Errorf("ResponseComplete: got %+v, want a create answered 201", done)
	}
	var req, resp struct {
		Kind     string `json:"kind"`
		Metadata struct {
			UID           string            `json:"uid"`
			ManagedFields []json.RawMessage `json:"managedFields"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(done.RequestObject, &req); err != nil || req.Data["greeting"] != "hello" || req.Metadata.ManagedFields != nil {
		t.Errorf("requestObject: %s (%v), want the ConfigMap without managedFields", done.RequestObject, err)
	}
	if err := json.Unmarshal(done.ResponseObject, &resp); err != nil || resp.Kind != "ConfigMap" || resp.Metadata.UID == "" || resp.Metadata.ManagedFields != nil {
		t.Errorf("responseObject: %s (%v), want the stored ConfigMap without managedFields", done.ResponseObject, err)
	}

	// secrets: Request, ResponseComplete only, the request body only.
	evs = log[id(secretH)]
	if len(evs) != 1 || evs[0].Stage != "ResponseComplete" || evs[0].Level != "Request" ||
		len(evs[0].RequestObject) == 0 || len(evs[0].ResponseObject) != 0 {
		t.Errorf("secret create: got %+v, want one ResponseComplete at Request with the request body only", evs)
	}

	// The node's requests: level None, nothing logged.
	if evs := log[id(nodeH)]; len(evs) != 0 {
		t.Errorf("node's list: got %+v, want nothing", evs)
	}

	// Everything else: Metadata, both stages, no bodies.
	evs = log[id(listH)]
	if len(evs) != 2 || evs[1].Level != "Metadata" || evs[1].RequestObject != nil || evs[1].ResponseObject != nil {
		t.Errorf("pod list in kube-system: got %+v, want two Metadata events without bodies", evs)
	}

	// A watch, long-running, has a ResponseStarted stage too.
	wctx, cancel := context.WithCancel(admin)
	stream, err := corev1.NewPodServiceClient(conn).WatchPods(wctx, &corev1.WatchPodsRequest{Namespace: "kube-system"})
	if err != nil {
		t.Fatal(err)
	}
	watchH, err := stream.Header()
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	watchID := id(watchH)
	var stages []string
	for range 100 { // the ResponseComplete event is written when the server sees the cancel
		stages = nil
		for _, ev := range readAudit(t, path)[watchID] {
			stages = append(stages, ev.Stage)
		}
		if len(stages) == 3 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Join(stages, ",") != "RequestReceived,ResponseStarted,ResponseComplete" {
		t.Errorf("watch stages: %v, want RequestReceived, ResponseStarted, ResponseComplete", stages)
	}
}
