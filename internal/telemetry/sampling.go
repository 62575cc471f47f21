// This file holds the tracer provider's sampler and batch settings: what
// kplane chooses where the OTEL_* environment does not.

package telemetry

import (
	"fmt"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// DefaultSampleRatio is the share of new traces a component that starts
// traces (the gateway, the API service) samples when OTEL_TRACES_SAMPLER
// names no sampler. Tracing every request costs pod creates several
// points of throughput (BENCHMARKS.md, Tracing); one in ten keeps that
// under one point and still records plenty of any steady workload.
const DefaultSampleRatio = 0.1

// Sampler is the sampler for a component's tracer provider, from the
// environment through getenv:
//   - OTEL_TRACES_SAMPLER set: nil, and the SDK reads it and
//     OTEL_TRACES_SAMPLER_ARG itself (always_on, parentbased_traceidratio,
//     ...);
//   - else, followOnly: parent-based never-sample, which continues the
//     traces that reach the component and starts none;
//   - else parent-based trace-ID ratio: new traces sampled at
//     OTEL_TRACES_SAMPLER_ARG if it is set (a ratio in [0, 1]: 1 traces
//     every request) or DefaultSampleRatio, requests that arrive with a
//     trace context following its sampled flag.
//
// A malformed OTEL_TRACES_SAMPLER_ARG is an error, returned with the
// default sampler.
func Sampler(getenv func(string) string, followOnly bool) (sdktrace.Sampler, error) {
	if strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")) != "" {
		return nil, nil
	}
	if followOnly {
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	}
	def := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(DefaultSampleRatio))
	arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
	if arg == "" {
		return def, nil
	}
	r, err := strconv.ParseFloat(arg, 64)
	if err != nil || r < 0 || r > 1 {
		return def, fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER_ARG %q: want a ratio between 0 and 1", arg)
	}
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
}

// The export queue is sized for a traced API service: at 100 % sampling it
// ends some 20,000 spans a second, which would fill the SDK's default
// queue of 2,048 in a tenth of a second (spans past it are dropped) and,
// at the default batch of 512, make some 40 export calls a second. A
// queue of 16,384 holds close to a second of spans; batches of 2,048 cut
// the export calls fourfold and stay, at a few hundred bytes a span, well
// under the 4 MiB a gRPC receiver (Jaeger's, the OpenTelemetry
// Collector's) accepts by default.
const (
	maxQueueSize       = 16384
	maxExportBatchSize = 2048
)

// batchOptions are kplane's queue and batch sizes for the batch span
// processor, each unless its OTEL_BSP_* variable is set: the processor
// reads those (and OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_EXPORT_TIMEOUT)
// itself, but an option passed here would win over them.
func batchOptions(getenv func(string) string) []sdktrace.BatchSpanProcessorOption {
	var opts []sdktrace.BatchSpanProcessorOption
	if strings.TrimSpace(getenv("OTEL_BSP_MAX_QUEUE_SIZE")) == "" {
		opts = append(opts, sdktrace.WithMaxQueueSize(maxQueueSize))
	}
	if strings.TrimSpace(getenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")) == "" {
		opts = append(opts, sdktrace.WithMaxExportBatchSize(maxExportBatchSize))
	}
	return opts
}
