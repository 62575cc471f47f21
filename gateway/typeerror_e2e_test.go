// This file holds the tests of values of the wrong type: refused in
// kube-apiserver's words, over HTTP and as kubectl shows them.

package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestTypeErrors: a value of the wrong type is refused in kube-apiserver
// v1.33's words on every write path (recorded from the real one): a body
// (create, replace) is 400 "<Kind> in version ... cannot be handled as a
// <Kind>: json: cannot unmarshal ...", a JSON or merge patch is 422 Invalid
// on the field "patch" (with the patched object), a strategic merge patch
// is 422 with the patch itself and the converter's error, an apply is 500
// "failed to create typed patch object".
func TestTypeErrors(t *testing.T) {
	srv, _, client := startImpersonating(t)
	c := client(nil)
	do := func(method, path, contentType, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer admin-token")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const deps = "/apis/apps/v1/namespaces/default/deployments"
	const dep = `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"replicas":1,"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"a","image":"x"}]}}}}`
	if code, body := do("POST", deps, "application/json", dep); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := do("POST", "/api/v1/namespaces/default/pods", "application/json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"a","image":"x"}]}}`); code != 201 {
		t.Fatalf("create pod: %d %s", code, body)
	}
	badDep := strings.Replace(dep, `"replicas":1`, `"replicas":"x"`, 1)
	replicas := `json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32`
	for _, c := range []struct {
		name, method, path, contentType, body string
		code                                  int
		want                                  []string
	}{
		{"create", "POST", deps, "application/json", strings.Replace(badDep, `"web"`, `"web2"`, 1), 400,
			[]string{`"reason":"BadRequest"`, `"message":"Deployment in version \"v1\" cannot be handled as a Deployment: ` + replicas + `"`}},
		{"create strict", "POST", deps + "?fieldValidation=Strict", "application/json", strings.Replace(badDep, `"web"`, `"web2"`, 1), 400,
			[]string{`"message":"Deployment in version \"v1\" cannot be handled as a Deployment: ` + replicas + `"`}},
		{"create pod", "POST", "/api/v1/namespaces/default/pods", "application/json",
			`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"q"},"spec":{"containers":[{"name":"a","image":"x","command":true}]}}`, 400,
			[]string{`"message":"Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal bool into Go struct field Container.spec.containers.command of type []string"`}},
		{"replace", "PUT", deps + "/web", "application/json", badDep, 400,
			[]string{`"message":"Deployment in version \"v1\" cannot be handled as a Deployment: ` + replicas + `"`}},
		{"replace status", "PUT", deps + "/web/status", "application/json", strings.Replace(dep, `"spec"`, `"status":{"replicas":"x"},"spec"`, 1), 400,
			[]string{`"message":"Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentStatus.status.replicas of type int32"`}},
		{"merge patch", "PATCH", deps + "/web", "application/merge-patch+json", `{"spec":{"replicas":"x"}}`, 422,
			[]string{`"reason":"Invalid"`, `"message":" \"\" is invalid: patch: Invalid value: \"{`, `\": ` + replicas + `"`,
				`"field":"patch"`, `"reason":"FieldValueInvalid"`}},
		{"json patch", "PATCH", deps + "/web", "application/json-patch+json", `[{"op":"replace","path":"/spec/replicas","value":"x"}]`, 422,
			[]string{`"message":" \"\" is invalid: patch: Invalid value: \"{`, `\": ` + replicas + `"`}},
		{"strategic merge patch", "PATCH", deps + "/web", "application/strategic-merge-patch+json", `{"spec":{"replicas":"x"}}`, 422,
			[]string{`"message":" \"\" is invalid: patch: Invalid value: \"map[spec:map[replicas:x]]\": unrecognized type: int32"`, `"field":"patch"`}},
		{"pod merge patch", "PATCH", "/api/v1/namespaces/default/pods/p", "application/merge-patch+json", `{"spec":{"containers":[{"name":"a","command":true}]}}`, 422,
			[]string{`\": json: cannot unmarshal bool into Go struct field Container.spec.containers.command of type []string"`}},
		{"status merge patch", "PATCH", deps + "/web/status", "application/merge-patch+json", `{"status":{"replicas":"x"}}`, 422,
			[]string{`\": json: cannot unmarshal string into Go struct field DeploymentStatus.status.replicas of type int32"`}},
		{"apply", "PATCH", deps + "/web?fieldManager=t", "application/apply-patch+yaml", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"replicas":"x"}}`, 500,
			[]string{`"message":"failed to create typed patch object (/web; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string"`}},
		{"apply create", "PATCH", deps + "/web3?fieldManager=t", "application/apply-patch+yaml", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web3"},"spec":{"replicas":"x"}}`, 500,
			[]string{`"message":"failed to create typed patch object (/web3; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string"`}},
	} {
		code, body := do(c.method, c.path, c.contentType, c.body)
		if code != c.code {
			t.Errorf("%s: got %d %s, want %d", c.name, code, body, c.code)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: got %s\nwant it to contain %s", c.name, body, w)
			}
		}
		if c.code == 500 && strings.Contains(body, `"reason"`) {
			t.Errorf("%s: %s has a reason; kube-apiserver's has none", c.name, body)
		}
		if strings.Contains(body, "proto:") {
			t.Errorf("%s: %s speaks of protobuf", c.name, body)
		}
	}
}

// TestKubectlTypeErrors: kubectl shows kube-apiserver's words for a value
// of the wrong type, whichever way the manifest is sent.
func TestKubectlTypeErrors(t *testing.T) {
	k := startKube(t, "kubectl.1.33")
	bad := k.file("bad.yaml", `apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  containers:
  - name: a
    image: x
    command: true
`)
	const words = `Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal bool into Go struct field Container.spec.containers.command of type []string`
	k.fails([]string{"apply", "-f", bad}, `Error from server (BadRequest): error when creating "`+bad+`": `+words)
	k.fails([]string{"create", "--validate=false", "-f", bad}, words)
	k.fails([]string{"apply", "--server-side", "-f", bad},
		`Error from server: failed to create typed patch object (default/bad; /v1, Kind=Pod): .spec.containers[name="a"].command: expected list, got &{true}`)
	k.ok([]string{"run", "bad", "--image", "x"})
	k.fails([]string{"apply", "-f", bad}, `The request is invalid: patch: Invalid value: "map[metadata:map[annotations:map[kubectl.kubernetes.io/last-applied-configuration:`)
}
