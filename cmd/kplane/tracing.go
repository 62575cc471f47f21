// This file holds `kplane jaeger` (a local Jaeger on loopback for the
// components to export their spans to) and `kplane trace <kind>/<name>`
// (an object's trace, fetched from Jaeger and printed as a waterfall).

package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/jaeger"
	"github.com/kplane/kplane/internal/telemetry"
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
	cfg.AddFlags(f)
	return cmd
}

func newTraceCommand() *cobra.Command {
	var (
		kubeconfig, namespace, jaegerURL string
		wait                             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "trace <kind>/<name>",
		Short: "Print an object's trace from Jaeger as a waterfall: each hop, its service, start and duration",
		Long: `Print the trace of the request that created or last changed an object
(its trace.kplane.io/traceparent annotation), fetched from Jaeger's query
API, as a waterfall: every hop with its service, start offset and duration,
indented under the hop that caused it, the slowest one (most time spent in
the hop itself) marked.

  kplane trace pod/web-7d4c
  kplane trace deployment/web -n shop --jaeger-url http://127.0.0.1:16686`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok || kind == "" || name == "" {
				return fmt.Errorf("want <kind>/<name>, e.g. pod/web, got %q", args[0])
			}
			ctx := cmd.Context()
			ann, err := jaeger.ObjectAnnotations(ctx, kubeconfig, namespace, kind, name)
			if err != nil {
				return err
			}
			sc := telemetry.ObjectSpanContext(ann)
			if !sc.IsValid() {
				return fmt.Errorf("%s has no %s annotation: it was created and last changed without tracing (start the components with OTEL_EXPORTER_OTLP_ENDPOINT set)", args[0], telemetry.Annotation)
			}
			t, err := jaeger.WaitTrace(ctx, jaegerURL, sc.TraceID().String(), wait)
			if err != nil {
				return err
			}
			return jaeger.PrintWaterfall(cmd.OutOrStdout(), t)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig to reach the gateway (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVarP(&namespace, "namespace", "n", "", "the object's namespace (default: the kubeconfig context's)")
	f.StringVar(&jaegerURL, "jaeger-url", "http://127.0.0.1:16686", "Jaeger's query API")
	f.DurationVar(&wait, "wait", 10*time.Second, "how long to wait for Jaeger to receive the trace (components export in batches)")
	return cmd
}
