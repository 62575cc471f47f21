// This file holds Options.AddFlags: the flags every component's process
// shares (--log-level, --metrics-bind-address, and where the component has
// them --gc-percent and --profiling-listen).

package component

import "github.com/spf13/pflag"

// AddFlags adds the shared flags to f, filling o: --gc-percent only when
// o.GCPercent holds its default, --profiling-listen only with an example
// address for its help.
func (o *Options) AddFlags(f *pflag.FlagSet, profilingExample string) {
	f.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.MetricsAddr, "metrics-bind-address", "",
		"address to serve Prometheus /metrics on, e.g. 127.0.0.1:9090 (empty: none); traces go where OTEL_EXPORTER_OTLP_ENDPOINT says")
	if o.GCPercent != nil {
		f.IntVar(o.GCPercent, "gc-percent", *o.GCPercent, "Go's GC target (runtime/debug.SetGCPercent): the heap may grow this many percent over the live heap before a collection; negative turns the collector off. GOGC in the environment, when set, wins; GOMEMLIMIT still caps the heap")
	}
	if profilingExample != "" {
		f.StringVar(&o.ProfilingListen, "profiling-listen", "", "serve Go's net/http/pprof profiles on this address (e.g. "+profilingExample+"); empty disables them")
	}
}
