// This file holds the flags every component's process shares, mapped onto
// component.Options: --log-level, --metrics-bind-address and, where the
// component has them, --gc-percent and --profiling-listen.

package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/kplane/kplane/internal/component"
)

// registerProcessFlags adds the shared flags; --gc-percent only when
// p.GCPercent holds its default, --profiling-listen only with an example
// address for its help.
func registerProcessFlags(f *pflag.FlagSet, p *component.Options, profilingExample string) {
	f.StringVar(&p.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&p.MetricsAddr, "metrics-bind-address", "",
		"address to serve Prometheus /metrics on, e.g. 127.0.0.1:9090 (empty: none); traces go where OTEL_EXPORTER_OTLP_ENDPOINT says")
	if p.GCPercent != nil {
		f.IntVar(p.GCPercent, "gc-percent", *p.GCPercent, "Go's GC target (runtime/debug.SetGCPercent): the heap may grow this many percent over the live heap before a collection; negative turns the collector off. GOGC in the environment, when set, wins; GOMEMLIMIT still caps the heap")
	}
	if profilingExample != "" {
		f.StringVar(&p.ProfilingListen, "profiling-listen", "", "serve Go's net/http/pprof profiles on this address (e.g. "+profilingExample+"); empty disables them")
	}
}

// splitURLs splits a comma-separated flag, dropping empty entries.
func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}
