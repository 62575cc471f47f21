// This file holds the benchmark of a large JSON list through the gateway
// and the API service (issue 28's overload benchmark in one process): 3,000
// ConfigMaps of 1,000 bytes listed unpaged, as a consistent read (what
// client-go's List does) and from the watch cache (resourceVersion=0).

package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kplane/kplane/services/apiserver/apiservertest"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// BenchmarkListJSON lists 3,000 ConfigMaps of 1,000 bytes (about 4 MB of
// JSON) through the gateway (BENCHMARKS.md, "Overload").
func BenchmarkListJSON(b *testing.B) {
	e := newBenchEnv(b)
	const objects = 3000
	data := strings.Repeat("x", 1000)
	if _, err := corev1.NewNamespaceServiceClient(e.conn).CreateNamespace(e.ctx, &corev1.CreateNamespaceRequest{
		Namespace: &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "flood"}}}); err != nil {
		b.Fatal(err)
	}
	for i := range objects {
		c := &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)}, Data: map[string]string{"data": data}}
		if _, err := e.cms.CreateConfigMap(e.ctx, &corev1.CreateConfigMapRequest{Namespace: "flood", ConfigMap: c}); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct{ name, query string }{
		{"consistent", ""},
		{"rv0", "?resourceVersion=0"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var n int64
			for b.Loop() {
				n = e.list(b, "/api/v1/namespaces/flood/configmaps"+c.query)
			}
			b.ReportMetric(float64(n), "bytes/list")
		})
	}
}

// list GETs path as the administrator and returns the body's size.
func (e *benchEnv) list(b *testing.B, path string) int64 {
	req, err := http.NewRequest("GET", e.url+path, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiservertest.AdminToken)
	resp, err := e.http.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %d, %v", path, resp.StatusCode, err)
	}
	return n
}
