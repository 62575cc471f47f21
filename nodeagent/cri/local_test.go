// This file holds the tests of the in-process runtime connection: it looks
// like gRPC to its caller (spans, metrics, error codes, done contexts) and
// shares no memory with the runtime.

package cri_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/simruntime"
	"github.com/kplane/kplane/nodeagent/simruntime/simruntimetest"
)

// telemetryOf is what a client's calls left: each span's name, kind,
// status and rpc.* attributes, and the metric names.
type telemetryOf struct {
	spans   []string
	metrics []string
}

// callAndRecord makes the same few calls, one of them failing, through a
// client made from cfg, and returns what its telemetry recorded.
func callAndRecord(t *testing.T, cfg cri.Config) telemetryOf {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	c, err := cri.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PullImage(ctx, "busybox:1", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ContainerStatus(ctx, "nope"); !cri.IsNotFound(err) {
		t.Fatalf("status of an unknown container: got %v, want NotFound", err)
	}

	var out telemetryOf
	for _, s := range rec.Ended() {
		desc := s.Name() + " " + s.SpanKind().String() + " " + s.Status().Code.String()
		for _, a := range s.Attributes() {
			switch a.Key {
			case "server.address", "server.port", "network.peer.address", "network.peer.port":
				// Where the socket is: an in-process runtime has none.
			default:
				desc += " " + string(a.Key) + "=" + a.Value.Emit()
			}
		}
		out.spans = append(out.spans, desc)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out.metrics = append(out.metrics, m.Name)
		}
	}
	slices.Sort(out.metrics)
	return out
}

// TestInProcessLooksLikeGRPC: a client of an in-process runtime records the
// same spans (names, kinds, statuses, rpc.* attributes) and metrics as a
// client of the same runtime on a socket, and its errors keep their codes.
func TestInProcessLooksLikeGRPC(t *testing.T) {
	newRT := func() *simruntime.Runtime {
		rt, err := simruntime.New(simruntime.Config{Name: "telemetry"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		return rt
	}
	overSocket := callAndRecord(t, cri.Config{Socket: simruntimetest.Serve(t, newRT())})
	inProcess := callAndRecord(t, cri.Config{Server: newRT()})
	if !slices.Equal(overSocket.spans, inProcess.spans) {
		t.Errorf("spans differ:\nover a socket: %q\nin process:    %q", overSocket.spans, inProcess.spans)
	}
	if !slices.Equal(overSocket.metrics, inProcess.metrics) || len(inProcess.metrics) == 0 {
		t.Errorf("metrics differ:\nover a socket: %q\nin process:    %q", overSocket.metrics, inProcess.metrics)
	}
	want := "runtime.v1.RuntimeService/ContainerStatus client Error"
	if !slices.ContainsFunc(inProcess.spans, func(s string) bool { return strings.HasPrefix(s, want) }) {
		t.Errorf("no span %q in %q", want, inProcess.spans)
	}
}

// TestInProcessContext: a call under a done context fails as over gRPC,
// with Canceled or DeadlineExceeded, before reaching the runtime.
func TestInProcessContext(t *testing.T) {
	rt, err := simruntime.New(simruntime.Config{Name: "ctx", PullLatency: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	c, err := cri.New(cri.Config{Server: rt})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Version(ctx); status.Code(err) != codes.Canceled {
		t.Fatalf("version under a cancelled ctx: got %v, want Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.PullImage(ctx, "slow:1", nil, nil); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("pull past its deadline: got %v, want DeadlineExceeded", err)
	}
}

// TestInProcessNoAliasing: without marshalling between them, the caller
// and the built-in runtime still do not share what either keeps: changing
// a request after the call, or an answer, changes nothing in the runtime.
func TestInProcessNoAliasing(t *testing.T) {
	rt, err := simruntime.New(simruntime.Config{Name: "alias", Images: []string{"busybox:1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	c, err := cri.New(cri.Config{Server: rt})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u1"},
		Labels:      map[string]string{"app": "web"},
		Annotations: map[string]string{"a": "1"},
	}
	sb, err := c.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	ctrCfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		Image:    &runtimeapi.ImageSpec{Image: "busybox:1"},
		Labels:   map[string]string{"app": "web"},
	}
	id, err := c.CreateContainer(ctx, sb, ctrCfg, sbCfg)
	if err != nil {
		t.Fatal(err)
	}
	// The caller reuses its request objects.
	sbCfg.Metadata.Name, sbCfg.Labels["app"], sbCfg.Annotations["a"] = "changed", "changed", "changed"
	ctrCfg.Metadata.Name, ctrCfg.Labels["app"] = "changed", "changed"

	check := func(when string) {
		t.Helper()
		sbs, err := c.ListPodSandbox(ctx, nil)
		if err != nil || len(sbs) != 1 {
			t.Fatalf("%s: list sandboxes: %v, %d", when, err, len(sbs))
		}
		if got := sbs[0]; got.GetMetadata().GetName() != "p" || got.GetLabels()["app"] != "web" || got.GetAnnotations()["a"] != "1" {
			t.Fatalf("%s: sandbox is %v", when, got)
		}
		st, err := c.ContainerStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetMetadata().GetName() != "c" || st.GetLabels()["app"] != "web" {
			t.Fatalf("%s: container is %v", when, st)
		}
		// The caller changes the answers it got.
		sbs[0].Metadata.Name, sbs[0].Labels["app"], sbs[0].Annotations["a"] = "changed", "changed", "changed"
		st.Metadata.Name, st.Labels["app"] = "changed", "changed"
		cs, err := c.ListContainers(ctx, nil)
		if err != nil || len(cs) != 1 {
			t.Fatalf("%s: list containers: %v, %d", when, err, len(cs))
		}
		cs[0].Metadata.Name, cs[0].Labels["app"] = "changed", "changed"
		sst, err := c.PodSandboxStatus(ctx, sb)
		if err != nil {
			t.Fatal(err)
		}
		sst.Metadata.Name, sst.Labels["app"] = "changed", "changed"
	}
	check("after changing the requests")
	check("after changing the answers")

	// Selecting by label still sees the runtime's own labels.
	sbs, err := c.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "web"}})
	if err != nil || len(sbs) != 1 {
		t.Fatalf("select by the original label: %v, %d", err, len(sbs))
	}
}
