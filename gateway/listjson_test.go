// This file holds the tests of the JSON list (listjson.go): every list it
// serves is byte for byte the typed path's answer (reached here with
// "TE: trailers", which keeps a request on the typed path), for several
// kinds, selectors, pages and resourceVersions, errors included.

package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
)

// listEnv is a gateway in front of an API service over a connection that
// records the methods the gateway calls.
type listEnv struct {
	t   *testing.T
	url string
	mu  sync.Mutex
	rpc []string
}

func newListEnv(t *testing.T) *listEnv {
	env := apiservertest.Start(t, apiservertest.Options{})
	e := &listEnv{t: t}
	record := func(method string) {
		e.mu.Lock()
		e.rpc = append(e.rpc, method)
		e.mu.Unlock()
	}
	conn, err := grpc.NewClient(env.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			record(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			record(method)
			return streamer(ctx, desc, cc, method, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	gw, err := gateway.New(gateway.Config{Conn: conn})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// calls returns the methods called since the last call of calls.
func (e *listEnv) calls() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.rpc
	e.rpc = nil
	return c
}

// do sends one request with token and returns the status and body.
func (e *listEnv) do(method, path, token, body string, trailers bool) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if trailers {
		req.Header.Set("TE", "trailers")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func (e *listEnv) create(path, body string) {
	e.t.Helper()
	if code, _, b := e.do("POST", path, apiservertest.AdminToken, body, false); code != http.StatusCreated {
		e.t.Fatalf("POST %s: %d %s", path, code, b)
	}
}

// listRevision is a List's metadata, at the end of the gateway's JSON.
var listRevision = regexp.MustCompile(`"metadata":\{("continue":"[^"]*",)?"resourceVersion":"[0-9]+"\}\}$`)

// same GETs path as token on both paths, requires the same status and
// body, and that the JSON list (not the typed list) served the first.
// It returns the status and body.
func (e *listEnv) same(path, token string) (int, []byte) {
	e.t.Helper()
	e.calls()
	code, h, got := e.do("GET", path, token, "", false)
	calls := e.calls()
	// ListJSON alone, or nothing (options the gateway refuses itself).
	if len(calls) > 1 || (len(calls) == 1 && !strings.HasSuffix(calls[0], "/ListJSON")) || (len(calls) == 0 && code != http.StatusBadRequest) {
		e.t.Errorf("GET %s (%d) called %v, want ListJSON alone", path, code, calls)
	}
	wantCode, wh, want := e.do("GET", path, token, "", true)
	for _, c := range e.calls() {
		if strings.HasSuffix(c, "/ListJSON") {
			e.t.Errorf("GET %s with TE: trailers called ListJSON", path)
		}
	}
	body := got
	if u, err := url.Parse(path); err == nil && u.Query().Get("resourceVersion") == "" && u.Query().Get("continue") == "" {
		// A consistent list is at the store's latest revision, which
		// other writers may move between the two requests: the list's
		// own revision (and a continue token, which holds it) aside, the
		// answers must be the same bytes.
		got, want = listRevision.ReplaceAll(got, []byte(`"metadata":{}}`)), listRevision.ReplaceAll(want, []byte(`"metadata":{}}`))
	}
	if code != wantCode || string(got) != string(want) {
		e.t.Errorf("GET %s:\n JSON list  %d %s\n typed list %d %s", path, code, got, wantCode, want)
	}
	if h.Get("Content-Type") != wh.Get("Content-Type") {
		e.t.Errorf("GET %s: Content-Type %q, typed %q", path, h.Get("Content-Type"), wh.Get("Content-Type"))
	}
	return code, body
}

const listTestPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"full","labels":{"app":"web","tier":"a"},
"annotations":{"note":"<b>&amp;</b>"}},"spec":{"initContainers":[{"name":"init","image":"busybox","command":["sh","-c","true"]}],
"containers":[{"name":"web","image":"nginx:1.27","args":["-g","daemon off;"],"workingDir":"/w",
"ports":[{"name":"http","containerPort":80,"protocol":"TCP"},{"containerPort":53,"protocol":"UDP","hostPort":5353}],
"env":[{"name":"A","value":"1"},{"name":"POD","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}],
"resources":{"requests":{"cpu":"250m","memory":"64Mi","ephemeral-storage":"1Gi"},"limits":{"cpu":"1","memory":"128974848"}},
"volumeMounts":[{"name":"data","mountPath":"/data","readOnly":true}],
"livenessProbe":{"httpGet":{"path":"/healthz","port":"http"},"initialDelaySeconds":3,"periodSeconds":5},
"readinessProbe":{"tcpSocket":{"port":80},"timeoutSeconds":2},
"securityContext":{"runAsNonRoot":true,"runAsUser":1000,"capabilities":{"drop":["ALL"]},"allowPrivilegeEscalation":false}}],
"volumes":[{"name":"data","emptyDir":{"sizeLimit":"500Mi"}},{"name":"cfg","configMap":{"name":"c0","defaultMode":420}}],
"nodeSelector":{"disk":"ssd"},"tolerations":[{"key":"k","operator":"Exists","effect":"NoExecute","tolerationSeconds":30}],
"affinity":{"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":10,"podAffinityTerm":{"labelSelector":{"matchLabels":{"app":"web"}},"topologyKey":"kubernetes.io/hostname"}}]}},
"terminationGracePeriodSeconds":10,"dnsPolicy":"ClusterFirst","hostname":"full","priority":0,
"topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"zone","whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app":"web"}}}]}}`

// TestListJSONMatchesTypedList: the JSON list answers every list as the
// typed path does, byte for byte.
func TestListJSONMatchesTypedList(t *testing.T) {
	e := newListEnv(t)
	for _, ns := range []string{"a", "b"} {
		e.create("/api/v1/namespaces", fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, ns))
		for i := range 5 {
			e.create("/api/v1/namespaces/"+ns+"/configmaps", fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap",
"metadata":{"name":"c%d","labels":{"i":"%d","even":"%t"}},"data":{"k":"v%d","html":"<a href=\"x\">&</a>\u2028"},"binaryData":{"b":"AAE="}}`, i, i, i%2 == 0, i))
		}
	}
	e.create("/api/v1/namespaces/a/pods", listTestPod)
	e.create("/api/v1/namespaces/a/services", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},"spec":{"selector":{"app":"web"},
"ports":[{"name":"http","port":80,"targetPort":"http"},{"name":"dns","port":53,"protocol":"UDP","targetPort":5353}]}}`)
	e.create("/apis/apps/v1/namespaces/a/deployments", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":2,
"selector":{"matchLabels":{"app":"web"}},"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":"25%","maxUnavailable":1}},
"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"nginx"}]}}}}`)
	e.create("/api/v1/namespaces/a/resourcequotas", `{"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":"q"},"spec":{"hard":{"cpu":"10","memory":"1.5Gi","pods":"20"}}}`)
	e.create("/api/v1/namespaces/a/events", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"ev"},"involvedObject":{"kind":"Pod","namespace":"a","name":"full"},
"reason":"Started","message":"started <ok>","type":"Normal","count":2,"firstTimestamp":"2026-01-01T00:00:00Z","lastTimestamp":"2026-01-01T00:01:00Z","source":{"component":"kubelet"}}`)
	e.create("/apis/autoscaling/v2/namespaces/a/horizontalpodautoscalers", `{"apiVersion":"autoscaling/v2","kind":"HorizontalPodAutoscaler","metadata":{"name":"h"},
"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"d"},"minReplicas":1,"maxReplicas":5,
"metrics":[{"type":"Resource","resource":{"name":"cpu","target":{"type":"Utilization","averageUtilization":60}}}]}}`)
	e.create("/api/v1/nodes", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"zone":"z1"}},"status":{"capacity":{"cpu":"4","memory":"8Gi"}}}`)

	_, b := e.same("/api/v1/namespaces/a/configmaps", apiservertest.AdminToken)
	var l struct {
		Metadata struct{ ResourceVersion string }
		Items    []json.RawMessage
	}
	if err := json.Unmarshal(b, &l); err != nil || len(l.Items) != 5 {
		t.Fatalf("list: %v, %d items", err, len(l.Items))
	}
	rv := l.Metadata.ResourceVersion
	for _, path := range []string{
		"/api/v1/configmaps",
		"/api/v1/namespaces/a/configmaps?labelSelector=even%3Dtrue",
		"/api/v1/configmaps?labelSelector=i+in+(1,3)&fieldSelector=metadata.namespace%3Db",
		"/api/v1/namespaces/a/configmaps?fieldSelector=metadata.name%3Dc2",
		"/api/v1/namespaces/a/configmaps?resourceVersion=0",
		"/api/v1/namespaces/a/configmaps?resourceVersion=" + rv + "&resourceVersionMatch=NotOlderThan",
		"/api/v1/namespaces/a/configmaps?resourceVersion=" + rv + "&resourceVersionMatch=Exact",
		"/api/v1/configmaps?resourceVersion=" + rv,
		"/api/v1/namespaces/a/pods",
		"/api/v1/pods?resourceVersion=0",
		"/api/v1/namespaces/a/services",
		"/apis/apps/v1/deployments",
		"/api/v1/namespaces/a/resourcequotas",
		"/api/v1/namespaces/a/events",
		"/apis/events.k8s.io/v1/namespaces/a/events",
		"/apis/autoscaling/v1/namespaces/a/horizontalpodautoscalers",
		"/apis/autoscaling/v2/horizontalpodautoscalers",
		"/api/v1/nodes",
		"/api/v1/namespaces",
		"/apis/rbac.authorization.k8s.io/v1/clusterroles?labelSelector=kubernetes.io%2Fbootstrapping%3Drbac-defaults",
		"/api/v1/namespaces/empty/configmaps",
		// Errors: the same Status.
		"/api/v1/configmaps?limit=abc",
		"/api/v1/configmaps?limit=-1",
		"/api/v1/configmaps?labelSelector=a+in+(",
		"/api/v1/configmaps?fieldSelector=data.k%3Dv",
		"/api/v1/configmaps?resourceVersion=x",
		"/api/v1/configmaps?resourceVersion=1&resourceVersionMatch=Bogus",
		"/api/v1/configmaps?continue=bogus",
	} {
		e.same(path, apiservertest.AdminToken)
	}
	// No list permission: the same 403.
	if code, _ := e.same("/api/v1/namespaces/a/configmaps", apiservertest.BobToken); code != http.StatusForbidden {
		t.Errorf("bob's list: %d, want 403", code)
	}
	e.same("/api/v1/configmaps", apiservertest.BobToken)

	// Pages: each page and its continue token the same.
	for _, base := range []string{"/api/v1/configmaps?limit=3", "/api/v1/namespaces/b/configmaps?limit=2&labelSelector=i"} {
		path, pages := base, 0
		for {
			_, b := e.same(path, apiservertest.AdminToken)
			var page struct{ Metadata struct{ Continue string } }
			if err := json.Unmarshal(b, &page); err != nil {
				t.Fatal(err)
			}
			if pages++; page.Metadata.Continue == "" || pages > 10 {
				break
			}
			path = base + "&continue=" + url.QueryEscape(page.Metadata.Continue)
		}
		if pages < 2 {
			t.Errorf("%s: %d pages", base, pages)
		}
	}
}

// TestListJSONCacheFollowsChanges: a list after an update (and a delete
// and re-create under the same name) shows the new object, not the JSON
// rendered for the old version.
func TestListJSONCacheFollowsChanges(t *testing.T) {
	e := newListEnv(t)
	e.create("/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"one"}}`)
	for _, rv := range []string{"", "0"} {
		path := "/api/v1/namespaces/default/configmaps?resourceVersion=" + rv
		if _, b := e.same(path, apiservertest.AdminToken); !strings.Contains(string(b), `"k":"one"`) {
			t.Fatalf("first list: %s", b)
		}
	}
	if code, _, b := e.do("PUT", "/api/v1/namespaces/default/configmaps/c", apiservertest.AdminToken,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"two"}}`, false); code != http.StatusOK {
		t.Fatalf("update: %d %s", code, b)
	}
	if _, b := e.same("/api/v1/namespaces/default/configmaps", apiservertest.AdminToken); !strings.Contains(string(b), `"k":"two"`) || strings.Contains(string(b), `"k":"one"`) {
		t.Errorf("list after the update: %s", b)
	}
	if code, _, b := e.do("DELETE", "/api/v1/namespaces/default/configmaps/c", apiservertest.AdminToken, "", false); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, b)
	}
	e.create("/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"three"}}`)
	if _, b := e.same("/api/v1/namespaces/default/configmaps", apiservertest.AdminToken); !strings.Contains(string(b), `"k":"three"`) {
		t.Errorf("list after re-creating: %s", b)
	}
}
