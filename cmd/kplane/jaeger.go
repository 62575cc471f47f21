// This file holds `kplane jaeger`: a local Jaeger on loopback for the
// components to export their spans to.

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/jaeger"
)

func newJaegerCommand() *cobra.Command {
	var cfg jaeger.Config
	cmd := &cobra.Command{
		Use:   "jaeger",
		Short: "Run a local Jaeger (built by scripts/install-jaeger.sh) on loopback until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Dir == "" {
				d, err := os.MkdirTemp("", "kplane-jaeger-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				cfg.Dir = d
			}
			j, err := jaeger.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer j.Stop()
			fmt.Fprintf(cmd.OutOrStdout(), "Jaeger query API on %s (log %s); export to it with:\n", j.QueryURL, j.LogPath)
			for _, kv := range j.Env() {
				fmt.Fprintf(cmd.OutOrStdout(), "  export %s\n", kv)
			}
			<-cmd.Context().Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Binary, "binary", "", "jaeger executable (default: $KPLANE_JAEGER, the cache of scripts/install-jaeger.sh, then PATH)")
	f.StringVar(&cfg.Dir, "dir", "", "directory for its config and log (default: a temporary one)")
	f.IntVar(&cfg.QueryPort, "query-port", 16686, "query API port (0: a free one)")
	f.IntVar(&cfg.OTLPPort, "otlp-port", 4317, "OTLP gRPC port (0: a free one)")
	f.IntVar(&cfg.MaxTraces, "max-traces", jaeger.DefaultMaxTraces, "traces its memory store keeps (the oldest are dropped first)")
	f.IntVar(&cfg.GCPercent, "gc-percent", jaeger.DefaultGCPercent, "Jaeger's Go GC target, GOGC (a negative value leaves Go's default; GOGC in the environment wins)")
	f.IntVar(&cfg.OTLPHTTPPort, "otlp-http-port", 4318, "OTLP/HTTP port, for OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (0: a free one)")
	return cmd
}
