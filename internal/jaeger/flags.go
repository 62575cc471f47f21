// This file holds Config.AddFlags: `kplane jaeger`'s flags, each filling
// its Config field.

package jaeger

import "github.com/spf13/pflag"

// AddFlags adds `kplane jaeger`'s flags to f, filling c.
func (c *Config) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&c.Binary, "binary", "", "jaeger executable (default: $KPLANE_JAEGER, the cache of scripts/install-jaeger.sh, then PATH)")
	f.StringVar(&c.Dir, "dir", "", "directory for its config and log (default: a temporary one)")
	f.IntVar(&c.QueryPort, "query-port", 16686, "query API port (0: a free one)")
	f.IntVar(&c.OTLPPort, "otlp-port", 4317, "OTLP gRPC port (0: a free one)")
	f.IntVar(&c.MaxTraces, "max-traces", DefaultMaxTraces, "traces its memory store keeps (the oldest are dropped first)")
	f.IntVar(&c.GCPercent, "gc-percent", DefaultGCPercent, "Jaeger's Go GC target, GOGC (a negative value leaves Go's default; GOGC in the environment wins)")
	f.IntVar(&c.OTLPHTTPPort, "otlp-http-port", 4318, "OTLP/HTTP port, for OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (0: a free one)")
}
