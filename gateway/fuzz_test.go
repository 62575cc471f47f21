// This file holds the gateway's fuzz tests: request bodies in every
// encoding, patches of every type, and whole HTTP requests, each of which
// must end in an answer or a Kubernetes Status, never a panic.

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

var podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}

var contentTypes = []string{"application/json", "application/yaml", protobufType,
	jsonPatchType, mergePatchType, strategicPatchType, applyPatchType}

// isStatusError reports whether err is a *StatusError (a rejected input is
// always answered with a Status).
func isStatusError(err error) bool {
	var se *apierrors.StatusError
	return errors.As(err, &se)
}

// FuzzDecodeBody: JSON, YAML and protobuf bodies under every fieldValidation.
func FuzzDecodeBody(f *testing.F) {
	f.Add(uint8(0), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"a","image":"b"}]}}`, "Strict")
	f.Add(uint8(1), "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  foo: 1\n", "Warn")
	f.Add(uint8(0), `{"metadata":{"resourceVersion":12,"generation":"3"}}`, "Ignore")
	f.Add(uint8(1), "a: [b\n", "")
	f.Add(uint8(2), "k8s\x00\x0a\x00", "")
	f.Add(uint8(0), `[1,2]`, "Strict")
	mt := (&corev1.Pod{}).ProtoReflect().Type()
	f.Fuzz(func(t *testing.T, ct uint8, body, validation string) {
		j, err := toJSON(contentTypes[int(ct)%3], []byte(body))
		if err != nil {
			if !isStatusError(err) {
				t.Fatalf("toJSON: got %T %v, want a StatusError", err, err)
			}
			return
		}
		if _, _, err := decodeObject(j, mt, validation); err != nil && !isStatusError(err) {
			t.Fatalf("decodeObject: got %T %v, want a StatusError", err, err)
		}
	})
}

// FuzzPatch: every patch type against a pod.
func FuzzPatch(f *testing.F) {
	f.Add(uint8(3), `[{"op":"add","path":"/metadata/labels/x","value":"y"}]`)
	f.Add(uint8(4), `{"metadata":{"labels":null}}`)
	f.Add(uint8(5), `{"spec":{"$setElementOrder/containers":[{"name":"c"}],"containers":[{"name":"c","image":"z"}]}}`)
	f.Add(uint8(5), `{"spec":{"containers":[{"$patch":"delete","name":"c"}]}}`)
	f.Add(uint8(6), "metadata:\n  labels:\n    a: b\n")
	f.Add(uint8(3), `[{"op":"move","from":"/spec","path":"/spec/x"}]`)
	cur := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"containers":[{"name":"c","image":"i"}]}}`)
	mt := (&corev1.Pod{}).ProtoReflect().Type()
	f.Fuzz(func(t *testing.T, kind uint8, patch string) {
		ct := contentTypes[3+int(kind)%4]
		j, err := toJSON(ct, []byte(patch))
		if err != nil {
			if !isStatusError(err) {
				t.Fatalf("toJSON: got %T %v", err, err)
			}
			return
		}
		out, err := applyPatch(testScheme(t), ct, cur, j, podGVK)
		if err != nil {
			if !isStatusError(err) {
				t.Fatalf("applyPatch(%s): got %T %v, want a StatusError", ct, err, err)
			}
			return
		}
		if _, _, err := decodeObject(out, mt, "Strict"); err != nil && !isStatusError(err) {
			t.Fatalf("decodeObject: got %T %v", err, err)
		}
	})
}

// FuzzServeHTTP: any method, path, query (selectors, resourceVersion,
// continue, limit, ...) and body is answered, and every failure is a Status.
// The API service is unreachable, so calls that get through decoding fail
// with ServiceUnavailable — also a Status.
func FuzzServeHTTP(f *testing.F) {
	f.Add("GET", "/api/v1/namespaces/default/pods", "labelSelector=app%3Dweb,tier+in+(a,b)&fieldSelector=metadata.name%3Dx&limit=5&continue=abc&resourceVersion=12", "", "")
	f.Add("GET", "/api/v1/pods", "watch=true&resourceVersion=0&timeoutSeconds=1&allowWatchBookmarks=true", "", "")
	f.Add("POST", "/apis/apps/v1/namespaces/default/deployments", "fieldValidation=Strict&dryRun=All", "application/json", `{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"w"}}`)
	f.Add("PATCH", "/api/v1/namespaces/default/pods/p", "fieldManager=kubectl", "application/merge-patch+json", `{"metadata":{"labels":{"a":"b"}}}`)
	f.Add("DELETE", "/api/v1/namespaces/default/pods/p", "gracePeriodSeconds=x", "application/json", `{"propagationPolicy":"Background"}`)
	f.Add("PUT", "/apis/apps/v1/namespaces/default/deployments/w/scale", "", "application/json", `{"spec":{"replicas":"x"}}`)
	f.Add("GET", "/api/v1/namespaces/default/pods/p/log", "follow=true&tailLines=-1", "", "")
	g := offline(f)
	f.Fuzz(func(t *testing.T, method, path, query, ct, body string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " ?#%\x00\r\n\t") || strings.ContainsAny(query, " #\x00\r\n\t") {
			return
		}
		switch method {
		case "GET", "POST", "PUT", "PATCH", "DELETE":
		default:
			return
		}
		if strings.Contains(query, "watch") || strings.Contains(path, "/watch/") {
			return // a watch on an unreachable service waits for the connection
		}
		if _, err := url.ParseRequestURI("http://x" + path + "?" + query); err != nil {
			return // not a request an HTTP server would deliver
		}
		r := httptest.NewRequest(method, "http://x"+path+"?"+query, strings.NewReader(body))
		if ct != "" && !strings.ContainsAny(ct, "\r\n\x00") {
			r.Header.Set("Content-Type", ct)
		}
		ctx, cancel := contextWithShortTimeout()
		defer cancel()
		r = r.WithContext(ctx)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code >= 400 {
			var st map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || st["kind"] != "Status" {
				t.Fatalf("%s %s?%s: got %d %.200q, want a Status body", method, path, query, w.Code, w.Body)
			}
		}
		if w.Code == http.StatusInternalServerError && strings.Contains(w.Body.String(), "panic") {
			t.Fatalf("%s %s: panic: %s", method, path, w.Body)
		}
	})
}

func contextWithShortTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 200*time.Millisecond)
}
