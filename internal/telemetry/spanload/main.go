// Command spanload measures what exporting a pod create's trace costs,
// without the API service and the store around it: it makes N traces of
// the create's shape (the API service's gRPC server span and its six stage
// spans, the store's raft.apply — a write gets no otelgrpc server span in
// the store: 8 spans under two service.names) through internal/telemetry's
// tracer providers, so the SDK tracer provider, batch span processor and
// OTLP exporter the OTEL_* environment configures, and prints this process's
// CPU per trace and, with
// -jaeger-pid, that Jaeger's. Used to compare exporter and Jaeger settings
// (BENCHMARKS.md, Tracing) where the full create loop is too noisy:
//
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 OTEL_TRACES_SAMPLER=always_on \
//	  go run ./internal/telemetry/spanload -n 30000 -jaeger-pid $(pgrep -n jaeger)
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/kplane/kplane/internal/telemetry"
)

// pidCPU is a process's user+system CPU time from /proc (10 ms ticks).
func pidCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		log.Fatal(err)
	}
	f := strings.Fields(string(b)[strings.LastIndex(string(b), ")")+2:])
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return time.Duration(u+s) * 10 * time.Millisecond
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	n := flag.Int("n", 50000, "traces")
	jpid := flag.Int("jaeger-pid", 0, "")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile here")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	api, err := telemetry.New(ctx, telemetry.Config{Service: "apiserver", Instance: "a"})
	if err != nil {
		log.Fatal(err)
	}
	st, err := telemetry.New(ctx, telemetry.Config{Service: "store", Instance: "s", FollowOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	at := api.TracerProvider().Tracer("go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc")
	as := api.TracerProvider().Tracer("github.com/kplane/kplane/services/apiserver")
	sr := st.TracerProvider().Tracer("github.com/kplane/kplane/raftstore")
	grpcAttrs := func(m string) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("rpc.method", m), attribute.String("rpc.system.name", "grpc")}
	}
	j0, c0, t0 := time.Duration(0), selfCPU(), time.Now()
	if *jpid != 0 {
		j0 = pidCPU(*jpid)
	}
	for i := 0; i < *n; i++ {
		ctx, root := at.Start(ctx, "kplane.core.v1.PodService/CreatePod", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(grpcAttrs("kplane.core.v1.PodService/CreatePod")...))
		for _, s := range []string{"authn", "authz", "admission.mutate", "validate", "admission.validate"} {
			_, sp := as.Start(ctx, s)
			sp.End()
		}
		sctx, txn := as.Start(ctx, "store.Txn")
		sc := trace.ContextWithRemoteSpanContext(context.Background(), trace.SpanContextFromContext(sctx))
		_, ra := sr.Start(sc, "raft.apply")
		ra.End()
		txn.End()
		root.SetAttributes(attribute.String("rpc.response.status_code", "OK"))
		root.End()
		if i%1000 == 999 {
			// Paced, so that the batch span processor's queue does not
			// overflow and drop spans (which would flatter the figures).
			time.Sleep(100 * time.Millisecond)
		}
	}
	_ = api.Close(ctx)
	_ = st.Close(ctx)
	el := time.Since(t0)
	time.Sleep(500 * time.Millisecond)
	c := selfCPU() - c0
	var j time.Duration
	if *jpid != 0 {
		j = pidCPU(*jpid) - j0
	}
	fmt.Printf("traces=%d wall=%v sdk_us_per_trace=%.1f jaeger_us_per_trace=%.1f\n", *n, el.Round(time.Millisecond), float64(c.Microseconds())/float64(*n), float64(j.Microseconds())/float64(*n))
}
