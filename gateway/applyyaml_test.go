// This file tests how an applied configuration in YAML is decoded: a key
// given twice in a map is refused under fieldValidation=Strict and warned
// about under Warn (the default), as kube-apiserver's apply handler does.

package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestApplyYAMLDuplicateKeys(t *testing.T) {
	srv, _, client := startImpersonating(t)
	c := client(nil)
	body := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dup\ndata:\n  a: one\n  a: two\n"
	apply := func(validation string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPatch, srv.URL+"/api/v1/namespaces/default/configmaps/dup?fieldManager=test"+validation, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer admin-token")
		req.Header.Set("Content-Type", "application/apply-patch+yaml")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	code, _, out := apply("&fieldValidation=Strict")
	if code != http.StatusBadRequest || !strings.Contains(out, `error strict decoding YAML`) || !strings.Contains(out, `line 7: key \"a\" already set in map`) {
		t.Errorf("Strict: got %d %s", code, out)
	}
	code, hdr, out := apply("")
	if code != http.StatusCreated || !strings.Contains(strings.Join(hdr.Values("Warning"), "\n"), `line 7: key \"a\" already set in map`) {
		t.Errorf("Warn (the default): got %d %v %s", code, hdr.Values("Warning"), out)
	}
}
