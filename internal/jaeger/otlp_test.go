// This file holds the tests of the local Jaeger: spans received over each
// OTLP protocol, its trace limit, and its GC setting.

package jaeger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/jaeger"
	"github.com/kplane/kplane/internal/telemetry"
)

// TestOTLPProtocols exports a span through internal/telemetry under each
// OTLP transport the OTEL_* environment can choose, and finds it in a real
// Jaeger's query API, from the service that sent it.
func TestOTLPProtocols(t *testing.T) {
	jbin := requireJaeger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := jaeger.Start(ctx, jaeger.Config{Binary: jbin, Dir: filepath.Join(t.TempDir(), "jaeger")})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Stop()
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "1") // the span below is sampled

	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"default is grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": j.OTLPEndpoint}},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": j.OTLPHTTPEndpoint}},
		// The signal-specific variables win over the general ones; a
		// signal-specific endpoint is the full URL.
		{"traces protocol wins", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": j.OTLPEndpoint,
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": j.OTLPHTTPEndpoint + "/v1/traces"}},
		{"grpc explicitly", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": j.OTLPEndpoint}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			service := "otlp-" + strings.NewReplacer(" ", "-", "/", "-").Replace(tc.name)
			tel, err := telemetry.New(ctx, telemetry.Config{Service: service})
			if err != nil {
				t.Fatal(err)
			}
			_, span := tel.TracerProvider().Tracer("test").Start(ctx, "otlp.test")
			id := span.SpanContext().TraceID().String()
			span.End()
			if err := tel.Close(ctx); err != nil { // flushes
				t.Fatalf("export: %v", err)
			}
			for {
				tr, err := jaeger.GetTrace(ctx, nil, j.QueryURL, id)
				if err == nil {
					if len(tr.Spans) != 1 || tr.Spans[0].Name != "otlp.test" || tr.Spans[0].Service != service {
						t.Fatalf("trace %s: %+v", id, tr.Spans)
					}
					return
				}
				if !errors.Is(err, jaeger.ErrNotFound) || ctx.Err() != nil {
					t.Fatalf("trace %s: %v", id, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}

	t.Run("unsupported protocol", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", j.OTLPHTTPEndpoint)
		for _, p := range []string{"http/json", "udp"} {
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", p)
			if _, err := telemetry.New(ctx, telemetry.Config{Service: "otlp-bad"}); err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("protocol %s: got %v, want an error naming it", p, err)
			}
		}
	})
}

// TestMaxTraces: the memory store keeps Config.MaxTraces traces, dropping
// the oldest (a ring: what keeps Jaeger's heap, and its ingest cost, flat
// under a steady flow of traces).
func TestMaxTraces(t *testing.T) {
	jbin := requireJaeger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := jaeger.Start(ctx, jaeger.Config{Binary: jbin, Dir: filepath.Join(t.TempDir(), "jaeger"), MaxTraces: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", j.OTLPEndpoint)
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "1")
	// One export per trace, each after the last is stored, so that they
	// reach the store in order.
	var ids []string
	for i := range 5 {
		tel, err := telemetry.New(ctx, telemetry.Config{Service: "maxtraces"})
		if err != nil {
			t.Fatal(err)
		}
		_, span := tel.TracerProvider().Tracer("test").Start(ctx, "maxtraces.test")
		ids = append(ids, span.SpanContext().TraceID().String())
		span.End()
		if err := tel.Close(ctx); err != nil {
			t.Fatalf("export %d: %v", i, err)
		}
		for {
			_, err := jaeger.GetTrace(ctx, nil, j.QueryURL, ids[i])
			if err == nil {
				break
			}
			if !errors.Is(err, jaeger.ErrNotFound) || ctx.Err() != nil {
				t.Fatalf("trace %d (%s): %v", i, ids[i], err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i, id := range ids {
		_, err := jaeger.GetTrace(ctx, nil, j.QueryURL, id)
		switch {
		case i < 2 && !errors.Is(err, jaeger.ErrNotFound):
			t.Errorf("trace %d of 5 with room for 3: got %v, want it dropped", i, err)
		case i >= 2 && err != nil:
			t.Errorf("trace %d of 5 with room for 3: %v", i, err)
		}
	}
}

// TestGCPercent: Jaeger runs with Config.GCPercent as its GOGC (by
// default DefaultGCPercent), unless GOGC is set already.
func TestGCPercent(t *testing.T) {
	jbin := requireJaeger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gogc := func(cfg jaeger.Config) string {
		t.Helper()
		cfg.Binary, cfg.Dir = jbin, filepath.Join(t.TempDir(), "jaeger")
		j, err := jaeger.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Stop()
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", j.PID()))
		if err != nil {
			t.Fatal(err)
		}
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("GOGC=")); ok {
				return string(v)
			}
		}
		return ""
	}
	if got, want := gogc(jaeger.Config{}), strconv.Itoa(jaeger.DefaultGCPercent); got != want {
		t.Errorf("default: GOGC=%q, want %q", got, want)
	}
	if got := gogc(jaeger.Config{GCPercent: 150}); got != "150" {
		t.Errorf("GCPercent 150: GOGC=%q, want 150", got)
	}
	if got := gogc(jaeger.Config{GCPercent: -1}); got != "" {
		t.Errorf("GCPercent -1: GOGC=%q, want none", got)
	}
	t.Setenv("GOGC", "50")
	if got := gogc(jaeger.Config{}); got != "50" {
		t.Errorf("GOGC=50 in the environment: Jaeger has GOGC=%q, want 50", got)
	}
}
