// This file holds the tests of the sampler and batch settings kplane picks
// where the OTEL_* environment names none, and of the bare gRPC endpoint.

package telemetry

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestSampler(t *testing.T) {
	for _, tc := range []struct {
		name       string
		env        map[string]string
		followOnly bool
		want       string // the sampler's Description; "" for nil (the SDK reads the environment)
		wantErr    bool
	}{
		{"default", nil, false, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(DefaultSampleRatio)).Description(), false},
		{"follow only", nil, true, sdktrace.ParentBased(sdktrace.NeverSample()).Description(), false},
		{"ratio from the argument", map[string]string{"OTEL_TRACES_SAMPLER_ARG": "1"}, false, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(1)).Description(), false},
		{"follow only ignores the argument", map[string]string{"OTEL_TRACES_SAMPLER_ARG": "1"}, true, sdktrace.ParentBased(sdktrace.NeverSample()).Description(), false},
		{"malformed argument", map[string]string{"OTEL_TRACES_SAMPLER_ARG": "2"}, false, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(DefaultSampleRatio)).Description(), true},
		{"named sampler left to the SDK", map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, true, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Sampler(env(tc.env), tc.followOnly)
			if (err != nil) != tc.wantErr {
				t.Errorf("error %v, want error: %v", err, tc.wantErr)
			}
			got := ""
			if s != nil {
				got = s.Description()
			}
			if got != tc.want {
				t.Errorf("sampler %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBatchOptions(t *testing.T) {
	apply := func(opts []sdktrace.BatchSpanProcessorOption) sdktrace.BatchSpanProcessorOptions {
		var o sdktrace.BatchSpanProcessorOptions
		for _, opt := range opts {
			opt(&o)
		}
		return o
	}
	if o := apply(batchOptions(env(nil))); o.MaxQueueSize != maxQueueSize || o.MaxExportBatchSize != maxExportBatchSize {
		t.Errorf("defaults: queue %d, batch %d; want %d, %d", o.MaxQueueSize, o.MaxExportBatchSize, maxQueueSize, maxExportBatchSize)
	}
	// Set variables are left to the processor, which reads them.
	set := env(map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "10"})
	if n := len(batchOptions(set)); n != 0 {
		t.Errorf("%d options with both variables set, want none", n)
	}
}

func TestBareEndpoint(t *testing.T) {
	for _, tc := range []struct {
		traces, general string
		want            string
		ok              bool
	}{
		{"", "127.0.0.1:4317", "127.0.0.1:4317", true},
		{"", "http://127.0.0.1:4317", "", false},
		{"collector:4317", "http://127.0.0.1:4317", "collector:4317", true},
		{"https://collector:4317", "127.0.0.1:4317", "", false},
		{"", "", "", false},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", tc.traces)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.general)
		got, ok := bareEndpoint()
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("traces %q, general %q: got %q, %v; want %q, %v", tc.traces, tc.general, got, ok, tc.want, tc.ok)
		}
	}
}
