// This file holds the gateway's benchmarks: each operation through the
// gateway set against the same call made straight to the API service over
// gRPC.

package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/gateway"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
)

// benchEnv is the API service with a direct gRPC client and a gateway
// (plain HTTP on loopback, keep-alive client) in front of it.
type benchEnv struct {
	conn *grpc.ClientConn
	cms  corev1.ConfigMapServiceClient
	ctx  context.Context
	url  string
	http *http.Client
}

func newBenchEnv(b *testing.B) *benchEnv {
	env := apiservertest.Start(b, apiservertest.Options{})
	conn := env.Dial(b, "")
	gw, err := gateway.New(gateway.Config{Conn: conn})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	b.Cleanup(srv.Close)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+apiservertest.AdminToken)
	return &benchEnv{conn: conn, cms: corev1.NewConfigMapServiceClient(conn), ctx: ctx, url: srv.URL,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
}

func (e *benchEnv) do(b *testing.B, method, path, body string, want int) {
	e.doAccept(b, method, path, body, "", want)
}

func (e *benchEnv) doAccept(b *testing.B, method, path, body, accept string, want int) {
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiservertest.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		b.Fatalf("%s %s: got %d, want %d", method, path, resp.StatusCode, want)
	}
}

func cm(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
}

// BenchmarkGateway compares each operation through the gateway with the
// same call made directly over gRPC (BENCHMARKS.md, "Gateway").
func BenchmarkGateway(b *testing.B) {
	e := newBenchEnv(b)
	const listSize = 100
	for i := 0; i < listSize; i++ {
		if _, err := e.cms.CreateConfigMap(e.ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm(fmt.Sprintf("seed-%d", i))}); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	b.Run("get/grpc", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.cms.GetConfigMap(e.ctx, &corev1.GetConfigMapRequest{Namespace: "default", Name: "seed-1"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get/gateway", func(b *testing.B) {
		for b.Loop() {
			e.do(b, "GET", "/api/v1/namespaces/default/configmaps/seed-1", "", 200)
		}
	})
	b.Run("list100/grpc", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.cms.ListConfigMaps(e.ctx, &corev1.ListConfigMapsRequest{Namespace: "default"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("list100/gateway", func(b *testing.B) {
		for b.Loop() {
			e.do(b, "GET", "/api/v1/namespaces/default/configmaps", "", 200)
		}
	})
	// kubectl get: the list as a Table (no direct gRPC counterpart; compare
	// with list100/gateway).
	b.Run("list100-table/gateway", func(b *testing.B) {
		for b.Loop() {
			e.doAccept(b, "GET", "/api/v1/namespaces/default/configmaps", "", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json", 200)
		}
	})
	// Watch throughput: a watch from resourceVersion 0 replays the 100
	// seeded objects as ADDED events; the stream ends after the timeout.
	b.Run("watch100/gateway", func(b *testing.B) {
		events := 0
		for b.Loop() {
			req, _ := http.NewRequest("GET", e.url+"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0&timeoutSeconds=30", nil)
			req.Header.Set("Authorization", "Bearer "+apiservertest.AdminToken)
			resp, err := e.http.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			got := 0
			for got < listSize && sc.Scan() {
				got++
			}
			resp.Body.Close()
			if got < listSize {
				b.Fatalf("got %d events, want %d", got, listSize)
			}
			events += got
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	})
	// Creates last, so that the lists above see exactly the seeded objects.
	b.Run("create/grpc", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.cms.CreateConfigMap(e.ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm(fmt.Sprintf("g-%d", n.Add(1)))}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("create/gateway", func(b *testing.B) {
		for b.Loop() {
			e.do(b, "POST", "/api/v1/namespaces/default/configmaps", fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"h-%d"},"data":{"k":"v"}}`, n.Add(1)), 201)
		}
	}) // Pods: the kind with the largest schema (managed fields, defaults,
	// validation and the admission plugins that act on pods).
	pods := corev1.NewPodServiceClient(e.conn)
	b.Run("createpod/grpc", func(b *testing.B) {
		for b.Loop() {
			p := &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: fmt.Sprintf("gp-%d", n.Add(1))},
				Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}}}}
			if _, err := pods.CreatePod(e.ctx, &corev1.CreatePodRequest{Namespace: "default", Pod: p}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("createpod/gateway", func(b *testing.B) {
		for b.Loop() {
			e.do(b, "POST", "/api/v1/namespaces/default/pods", fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"hp-%d"},"spec":{"containers":[{"name":"web","image":"registry.k8s.io/pause:3.10"}]}}`, n.Add(1)), 201)
		}
	})
}
