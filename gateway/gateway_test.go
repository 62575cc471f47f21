// This file holds the gateway's tests without an API service behind it: the
// static endpoints, refused and slow bodies, field validation, Status errors
// and patch application.

package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// offline returns a Gateway whose API service is unreachable: enough for
// everything answered before a call (discovery, decoding, errors).
func offline(t testing.TB) *Gateway {
	t.Helper()
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g, err := New(Config{Conn: conn})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func do(g *Gateway, method, target, contentType, accept, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	return w
}

func TestStaticEndpoints(t *testing.T) {
	g := offline(t)
	tests := []struct {
		name, path, accept string
		wantCode           int
		wantType           string
		wantBody           []string
		wantHeader         [2]string
	}{
		{name: "version", path: "/version?timeout=5s", wantCode: 200, wantBody: []string{`"major":"1"`, `"minor":"32"`},
			wantHeader: [2]string{"Cache-Control", "no-cache, private"}},
		{name: "healthz", path: "/healthz", wantCode: 200, wantBody: []string{"ok"}},
		{name: "legacy api", path: "/api", wantCode: 200, wantType: "application/json", wantBody: []string{`"kind":"APIVersions"`}},
		{name: "legacy apis", path: "/apis", wantCode: 200, wantBody: []string{`"kind":"APIGroupList"`, `"groupVersion":"apps/v1"`}},
		{name: "aggregated api", path: "/api", accept: "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
			wantCode: 200, wantType: aggregatedType, wantBody: []string{`"resource":"pods"`, `"shortNames":["po"]`}},
		{name: "v2beta1 only is legacy", path: "/apis", accept: "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
			wantCode: 200, wantType: "application/json", wantBody: []string{`"kind":"APIGroupList"`}},
		{name: "api/v1 resources", path: "/api/v1", wantCode: 200, wantBody: []string{`"name":"pods"`, `"name":"pods/status"`, `"namespaced":true`}},
		{name: "apps/v1 resources", path: "/apis/apps/v1", wantCode: 200, wantBody: []string{`"name":"deployments/scale"`, `"group":"autoscaling"`}},
		{name: "openapi root", path: "/openapi/v3", wantCode: 200, wantBody: []string{`"apis/apps/v1"`, `serverRelativeURL`}},
		{name: "openapi gv", path: "/openapi/v3/apis/apps/v1", wantCode: 200,
			wantBody: []string{`"x-kubernetes-group-version-kind"`, `"fieldValidation"`, `"apps.v1.Deployment"`}},
		{name: "openapi inline and raw fields", path: "/openapi/v3/api/v1", wantCode: 200,
			wantBody: []string{`"core.v1.Volume":{"description":"Volume represents a named volume in a pod that may be accessed by any container in the pod.","properties":{"awsElasticBlockStore":`,
				`"type":"object"},"manager":{`}},
		{name: "openapi v2 json", path: "/openapi/v2", wantCode: 200, wantType: "application/json",
			wantBody: []string{`"swagger":"2.0"`, `"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"`, `"x-kubernetes-group-version-kind"`}},
		{name: "unknown group", path: "/apis/nosuch/v1", wantCode: 404, wantBody: []string{`"reason":"NotFound"`}},
		{name: "unknown resource", path: "/api/v1/namespaces/default/widgets", wantCode: 404, wantBody: []string{`"reason":"NotFound"`}},
		{name: "bad limit", path: "/api/v1/pods?limit=x", wantCode: 400, wantBody: []string{`"reason":"BadRequest"`, "limit"}},
		{name: "pod log: bad tailLines", path: "/api/v1/namespaces/default/pods/p/log?tailLines=x", wantCode: 400,
			wantBody: []string{`"reason":"BadRequest"`, `tailLines: invalid integer \"x\"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(g, http.MethodGet, tt.path, "", tt.accept, "")
			if w.Code != tt.wantCode {
				t.Fatalf("got code %d, want %d; body %s", w.Code, tt.wantCode, w.Body)
			}
			if tt.wantType != "" && w.Header().Get("Content-Type") != tt.wantType {
				t.Errorf("got Content-Type %q, want %q", w.Header().Get("Content-Type"), tt.wantType)
			}
			for _, s := range tt.wantBody {
				if !strings.Contains(w.Body.String(), s) {
					t.Errorf("got body %s, want it to contain %s", w.Body, s)
				}
			}
			if h := tt.wantHeader; h[0] != "" && w.Header().Get(h[0]) != h[1] {
				t.Errorf("got %s %q, want %q", h[0], w.Header().Get(h[0]), h[1])
			}
		})
	}
}

func TestRejectedBodies(t *testing.T) {
	g := offline(t)
	big := `{"metadata":{"name":"x","annotations":{"a":"` + strings.Repeat("x", MaxBodyBytes) + `"}}}`
	tests := []struct {
		name, method, target, contentType, body string
		wantCode                                int
		wantMsg                                 string
	}{
		{name: "too large", target: "/api/v1/namespaces/default/pods", contentType: "application/json", body: big, wantCode: 413},
		{name: "malformed json", target: "/api/v1/namespaces/default/pods", contentType: "application/json", body: `{"metadata":`, wantCode: 400, wantMsg: "not valid JSON"},
		{name: "malformed yaml", target: "/api/v1/namespaces/default/pods", contentType: "application/yaml", body: "a: [b\n", wantCode: 400, wantMsg: "not valid YAML"},
		{name: "strict unknown field", target: "/api/v1/namespaces/default/pods?fieldValidation=Strict", contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"foo":1}}`, wantCode: 400, wantMsg: `strict decoding error: unknown field \"spec.foo\"`},
		{name: "wrong kind", target: "/api/v1/namespaces/default/pods", contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"p"}}`, wantCode: 400, wantMsg: "does not match"},
		{name: "bad fieldValidation", target: "/api/v1/namespaces/default/pods?fieldValidation=Maybe", contentType: "application/json",
			body: `{"metadata":{"name":"p"}}`, wantCode: 400, wantMsg: "fieldValidation"},
		{name: "text/plain", target: "/api/v1/namespaces/default/configmaps", contentType: "text/plain", body: `{"metadata":{"name":"c"}}`, wantCode: 415,
			wantMsg: `the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf`},
		{name: "xml", target: "/api/v1/namespaces/default/configmaps", contentType: "application/xml", body: `<c/>`, wantCode: 415, wantMsg: `"reason":"UnsupportedMediaType"`},
		{name: "a patch type on create", target: "/api/v1/namespaces/default/configmaps", contentType: "application/merge-patch+json", body: `{}`, wantCode: 415},
		{name: "malformed type", target: "/api/v1/namespaces/default/configmaps", contentType: "application/json; =x", body: `{}`, wantCode: 415},
		{name: "replace as text", method: http.MethodPut, target: "/api/v1/namespaces/default/configmaps/c", contentType: "text/plain", body: `{"metadata":{"name":"c"}}`, wantCode: 415},
		{name: "patch as text", method: http.MethodPatch, target: "/api/v1/namespaces/default/configmaps/c", contentType: "text/plain", body: `{"data":{"a":"b"}}`, wantCode: 415,
			wantMsg: `accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml`},
		{name: "patch without a type", method: http.MethodPatch, target: "/api/v1/namespaces/default/configmaps/c", body: `{"data":{"a":"b"}}`, wantCode: 415},
		{name: "delete options as xml", method: http.MethodDelete, target: "/api/v1/namespaces/default/configmaps/c", contentType: "application/xml", body: `<x/>`, wantCode: 415},
		{name: "strict: every unknown and duplicate field", target: "/api/v1/namespaces/default/pods?fieldValidation=Strict", contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","name":"q"},"spec":{"foo":1,"containers":[{"name":"a","image":"b","bar":2}]}}`, wantCode: 400,
			wantMsg: `Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: duplicate field \"metadata.name\", unknown field \"spec.foo\", unknown field \"spec.containers[0].bar\"`},
		{name: "a type error in Kubernetes' words", target: "/api/v1/namespaces/default/configmaps", contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d"},"data":{"a":true}}`, wantCode: 400,
			wantMsg: `ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal bool into Go struct field ConfigMap.data of type string`},
		{name: "strict in apps/v1", target: "/apis/apps/v1/namespaces/default/deployments?fieldValidation=Strict", contentType: "application/json",
			body: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"foo":1}}`, wantCode: 400,
			wantMsg: `Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.foo\"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			w := do(g, method, tt.target, tt.contentType, "", tt.body)
			if w.Code != tt.wantCode {
				t.Fatalf("got code %d, want %d; body %.300s", w.Code, tt.wantCode, w.Body)
			}
			var st map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || st["kind"] != "Status" {
				t.Fatalf("got body %.300s, want a Status", w.Body)
			}
			if !strings.Contains(w.Body.String(), tt.wantMsg) {
				t.Errorf("got %s, want message containing %s", w.Body, tt.wantMsg)
			}
		})
	}
}

func TestFieldValidation(t *testing.T) {
	body := []byte(`{"metadata":{"name":"p"},"spec":{"foo":1,"containers":[{"name":"a","image":"b"}]}}`)
	mt := (&corev1.Pod{}).ProtoReflect().Type()
	tests := []struct {
		name, validation string
		wantErr          bool
		wantWarnings     int
	}{
		{name: "strict rejects", validation: "Strict", wantErr: true},
		{name: "warn warns", validation: "Warn", wantWarnings: 1},
		{name: "default warns", validation: "", wantWarnings: 1},
		{name: "ignore ignores", validation: "Ignore"},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, warnings, err := decodeObject(body, mt, tt.validation)
			if (err != nil) != tt.wantErr {
				t.Fatalf("got err %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if len(warnings) != tt.wantWarnings {
				t.Errorf("got warnings %q, want %d", warnings, tt.wantWarnings)
			}
			if got := m.(*corev1.Pod).GetSpec().GetContainers()[0].GetImage(); got != "b" {
				t.Errorf("got image %q, want b", got)
			}
		})
	}
}

// TestFieldValidationNamesEveryProblem: every unknown and duplicate field is
// named, in Kubernetes' order (the document's) when client-go knows the kind,
// and the last of duplicates wins under Warn.
func TestFieldValidationNamesEveryProblem(t *testing.T) {
	mt := (&corev1.Pod{}).ProtoReflect().Type()
	tests := []struct {
		name, body   string
		wantWarnings []string
	}{
		{name: "kind known", body: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"foo":1,"bar":2,"containers":[{"name":"a","image":"x","image":"b"}]}}`,
			wantWarnings: []string{`unknown field "spec.foo"`, `unknown field "spec.bar"`, `duplicate field "spec.containers[0].image"`}},
		{name: "no kind", body: `{"metadata":{"name":"p"},"spec":{"foo":1,"bar":2,"containers":[{"name":"a","image":"x","image":"b"}]}}`,
			wantWarnings: []string{`unknown field "spec.bar"`, `unknown field "spec.foo"`, `duplicate field "spec.containers[0].image"`}},
		{name: "duplicates only", body: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"a":"1","a":"2"}},"spec":{"containers":[{"name":"a","image":"x","image":"b"}]}}`,
			wantWarnings: []string{`duplicate field "metadata.labels.a"`, `duplicate field "spec.containers[0].image"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, warnings, err := decodeObject([]byte(tt.body), mt, "Warn")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(warnings, tt.wantWarnings) {
				t.Errorf("got warnings %q\nwant %q", warnings, tt.wantWarnings)
			}
			if got := m.(*corev1.Pod).GetSpec().GetContainers()[0].GetImage(); got != "b" {
				t.Errorf("got image %q, want the last one, b", got)
			}
			_, _, err = decodeObject([]byte(tt.body), mt, "Strict")
			if want := "strict decoding error: " + strings.Join(tt.wantWarnings, ", "); err == nil || err.Error() != want {
				t.Errorf("strict: got %v\nwant %s", err, want)
			}
		})
	}
}

func TestStatusOf(t *testing.T) {
	err := apierrors.NewInvalid("", "Pod", "p", []apierrors.Cause{{Type: "FieldValueRequired", Message: "Required value", Field: "spec.containers"}})
	w := httptest.NewRecorder()
	writeError(w, err)
	var st map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if w.Code != 422 || st["reason"] != "Invalid" || st["kind"] != "Status" || st["apiVersion"] != "v1" || st["status"] != "Failure" {
		t.Fatalf("got %d %s, want 422 Invalid Status", w.Code, w.Body)
	}
	if _, ok := st["metadata"].(map[string]any); !ok {
		t.Errorf("got %s, want metadata {}", w.Body)
	}
	d, _ := st["details"].(map[string]any)
	causes, _ := d["causes"].([]any)
	if d["kind"] != "Pod" || d["name"] != "p" || len(causes) != 1 {
		t.Errorf("got details %v, want kind Pod, name p, one cause", d)
	}
}

// TestTooLargeResourceVersionStatus: the Status client-go's reflector
// recognises (504, cause ResourceVersionTooLarge) with a Retry-After header.
func TestTooLargeResourceVersionStatus(t *testing.T) {
	w := httptest.NewRecorder()
	writeError(w, apierrors.NewTooLargeResourceVersion(100, 42))
	if w.Code != http.StatusGatewayTimeout || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("got %d Retry-After %q, want 504 and 1", w.Code, w.Header().Get("Retry-After"))
	}
	var st map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	d, _ := st["details"].(map[string]any)
	causes, _ := d["causes"].([]any)
	if st["reason"] != "Timeout" || st["message"] != "Timeout: Too large resource version: 100, current: 42" || len(causes) != 1 ||
		causes[0].(map[string]any)["reason"] != "ResourceVersionTooLarge" || d["retryAfterSeconds"] != float64(1) {
		t.Errorf("got %s", w.Body)
	}
}

func TestApplyPatch(t *testing.T) {
	cur := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"containers":[{"name":"c","image":"i1"},{"name":"d","image":"j1"}]}}`)
	tests := []struct {
		name, ct, patch string
		want            []string
		wantErr         bool
	}{
		{name: "json patch", ct: jsonPatchType, patch: `[{"op":"replace","path":"/metadata/labels/a","value":"2"}]`, want: []string{`"a":"2"`}},
		{name: "json patch bad op", ct: jsonPatchType, patch: `[{"op":"nope","path":"/x"}]`, wantErr: true},
		{name: "merge patch replaces lists", ct: mergePatchType, patch: `{"spec":{"containers":[{"name":"c","image":"i2"}]}}`, want: []string{`"i2"`}},
		{name: "strategic merges by name", ct: strategicPatchType, patch: `{"spec":{"containers":[{"name":"c","image":"i2"}]}}`, want: []string{`"i2"`, `"j1"`}},
		{name: "apply as strategic", ct: applyPatchType, patch: `{"metadata":{"labels":{"b":"x"}}}`, want: []string{`"a":"1"`, `"b":"x"`}},
		{name: "merge patch not an object", ct: mergePatchType, patch: `[1]`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := applyPatch(testScheme(t), tt.ct, cur, []byte(tt.patch), podGVK)
			if (err != nil) != tt.wantErr {
				t.Fatalf("got err %v, want error %v", err, tt.wantErr)
			}
			for _, s := range tt.want {
				if !strings.Contains(string(out), s) {
					t.Errorf("got %s, want it to contain %s", out, s)
				}
			}
		})
	}
}

// TestSlowBodyCutOff: a client that sends its headers and then trickles its
// body gets 504 once BodyTimeout passes, and its connection is closed; a
// request on time on the same server is unaffected.
func TestSlowBodyCutOff(t *testing.T) {
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g, err := New(Config{Conn: conn, BodyTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	// Keep trickling in the background until the server hangs up.
	go func() {
		for range 100 {
			time.Sleep(50 * time.Millisecond)
			if _, err := io.WriteString(c, " "); err != nil {
				return
			}
		}
	}()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), `"reason":"Timeout"`) {
		t.Fatalf("got %d %s, want 504 Timeout", resp.StatusCode, body)
	}
	// Closed: EOF, or a reset when the trickle's next byte reached the
	// closed socket before this read.
	if _, err := br.ReadByte(); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("after the 504 the connection read gave %v, want EOF or a reset (closed)", err)
	}

	// A body that arrives in time is read as usual (the offline gateway then
	// fails upstream, which is past the body).
	w := do(g, http.MethodPost, "/api/v1/namespaces/default/configmaps", "application/json", "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}`)
	if w.Code == http.StatusGatewayTimeout {
		t.Errorf("an on-time body got 504: %s", w.Body)
	}
}

// BenchmarkDecodeObject decodes a typical pod body as a create does, under
// the default field validation (Warn).
func BenchmarkDecodeObject(b *testing.B) {
	body := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"default","labels":{"app":"web","tier":"front"}},` +
		`"spec":{"containers":[{"name":"web","image":"nginx:1.27","ports":[{"containerPort":80,"protocol":"TCP"}],` +
		`"resources":{"requests":{"cpu":"100m","memory":"64Mi"}},"env":[{"name":"A","value":"1"},{"name":"B","value":"2"}]}],"restartPolicy":"Always"}}`)
	mt := (&corev1.Pod{}).ProtoReflect().Type()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := decodeObject(body, mt, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWatchEventLarge renders one MODIFIED event of a 1 MiB ConfigMap
// as each watcher's stream does (its own decoded copy, then the event
// line), the case of many watchers on one large object.
func BenchmarkWatchEventLarge(b *testing.B) {
	g := offline(b)
	cmap := &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: "big", Namespace: "default", Uid: "u-1", ResourceVersion: "42"},
		Data: map[string]string{"blob": strings.Repeat("x", 1<<20)}}
	wire, err := proto.Marshal(&corev1.WatchConfigMapsResponse{Type: "MODIFIED", Object: cmap})
	if err != nil {
		b.Fatal(err)
	}
	ctx := withInfo(context.Background(), &requestInfo{})
	km := &kubeMarshaler{tab: g.tab}
	b.ReportAllocs()
	for b.Loop() {
		var ev corev1.WatchConfigMapsResponse
		if err := proto.Unmarshal(wire, &ev); err != nil { // each stream decodes its own copy
			b.Fatal(err)
		}
		v, err := g.rewrite(ctx, &ev)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := km.Marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}

// testScheme is the gateway's scheme of Kubernetes' Go types.
func testScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s, err := kubeScheme()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
