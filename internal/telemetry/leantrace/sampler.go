// This file holds the samplers of the OpenTelemetry specification and
// the OTEL_TRACES_SAMPLER and OTEL_BSP_* environment.

package leantrace

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Sampler decides whether a new span is recorded and exported: the
// specification's built-in samplers (AlwaysOn, AlwaysOff, TraceIDRatio,
// and ParentBased over one of them), decided as the SDK decides them.
type Sampler struct {
	// bound and all are the root decision: sample trace IDs whose low 63
	// bits fall below bound, or all of them (AlwaysOn: all, AlwaysOff:
	// neither).
	bound uint64
	all   bool
	// parentBased: a span with a parent follows the parent's sampled flag;
	// only a root is decided by the ratio.
	parentBased bool
	desc        string
}

// AlwaysOn samples every span.
func AlwaysOn() Sampler { return Sampler{all: true, desc: "AlwaysOnSampler"} }

// AlwaysOff samples no span.
func AlwaysOff() Sampler { return Sampler{desc: "AlwaysOffSampler"} }

// TraceIDRatio samples the fraction of trace IDs given (at least 1: all;
// at most 0: none), by the trace ID's low 8 bytes as the SDK does, so that
// every process deciding on one trace decides the same.
func TraceIDRatio(fraction float64) Sampler {
	switch {
	case fraction >= 1:
		return Sampler{all: true, desc: "TraceIDRatioBased{1}"}
	case fraction <= 0:
		return Sampler{desc: "TraceIDRatioBased{0}"}
	}
	return Sampler{bound: uint64(fraction * (1 << 63)), desc: fmt.Sprintf("TraceIDRatioBased{%g}", fraction)}
}

// ParentBased decides a root span by root and any other span as its
// parent was decided (local or remote).
func ParentBased(root Sampler) Sampler {
	root.parentBased = true
	root.desc = "ParentBased{root:" + root.desc + ",remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler," +
		"localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"
	return root
}

// Description names the sampler as the SDK's Description does.
func (s Sampler) Description() string { return s.desc }

// sample decides a new span with parent psc in trace tid.
func (s Sampler) sample(psc trace.SpanContext, tid trace.TraceID) bool {
	if s.parentBased && psc.IsValid() {
		return psc.IsSampled()
	}
	if s.all {
		return true
	}
	return binary.BigEndian.Uint64(tid[8:16])>>1 < s.bound
}

// SamplerFromEnv reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// through getenv: ok is false when no sampler is named. Named samplers are
// always_on, always_off, traceidratio, parentbased_always_on,
// parentbased_always_off and parentbased_traceidratio (the ratio from the
// argument, 1 without one); another name, or a ratio that is not a number
// in [0, 1], is an error, with the sampler the SDK would then use.
func SamplerFromEnv(getenv func(string) string) (s Sampler, ok bool, err error) {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	if name == "" {
		return Sampler{}, false, nil
	}
	arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() (Sampler, error) {
		if arg == "" {
			return TraceIDRatio(1), nil
		}
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil {
			return TraceIDRatio(1), fmt.Errorf("leantrace: OTEL_TRACES_SAMPLER_ARG %q: %w", arg, err)
		}
		if f < 0 || f > 1 {
			return TraceIDRatio(1), fmt.Errorf("leantrace: OTEL_TRACES_SAMPLER_ARG %q: want a ratio between 0 and 1", arg)
		}
		return TraceIDRatio(f), nil
	}
	switch name {
	case "always_on":
		return AlwaysOn(), true, nil
	case "always_off":
		return AlwaysOff(), true, nil
	case "traceidratio":
		s, err := ratio()
		return s, true, err
	case "parentbased_always_on":
		return ParentBased(AlwaysOn()), true, nil
	case "parentbased_always_off":
		return ParentBased(AlwaysOff()), true, nil
	case "parentbased_traceidratio":
		s, err := ratio()
		return ParentBased(s), true, err
	}
	return ParentBased(AlwaysOn()), true, fmt.Errorf("leantrace: OTEL_TRACES_SAMPLER %q is not supported", name)
}

// BatchFromEnv reads OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_EXPORT_TIMEOUT (in
// milliseconds), OTEL_BSP_MAX_QUEUE_SIZE and OTEL_BSP_MAX_EXPORT_BATCH_SIZE
// through getenv over def: a variable that is not set keeps def's value.
// A value that is not a positive integer is an error (the SDK logs it and
// keeps its default).
func BatchFromEnv(getenv func(string) string, def Batch) (Batch, error) {
	b := def
	for _, v := range []struct {
		name string
		ms   *time.Duration
		n    *int
	}{
		{"OTEL_BSP_SCHEDULE_DELAY", &b.ScheduleDelay, nil},
		{"OTEL_BSP_EXPORT_TIMEOUT", &b.ExportTimeout, nil},
		{"OTEL_BSP_MAX_QUEUE_SIZE", nil, &b.MaxQueueSize},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", nil, &b.MaxExportBatchSize},
	} {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return def, fmt.Errorf("leantrace: %s %q: want a positive integer", v.name, s)
		}
		if v.ms != nil {
			*v.ms = time.Duration(n) * time.Millisecond
		} else {
			*v.n = n
		}
	}
	return b, nil
}
