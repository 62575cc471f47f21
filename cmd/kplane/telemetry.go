// This file holds what every subcommand shares for traces and metrics: the
// --metrics-bind-address flag and the start-up of internal/telemetry from
// the OTEL_* environment.

package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/internal/telemetry/workqueuemetrics"
)

// telemetryFlags say where /metrics is served.
type telemetryFlags struct {
	metricsAddr string
}

func (f *telemetryFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", "",
		"address to serve Prometheus /metrics on, e.g. 127.0.0.1:9090 (empty: none); traces go where OTEL_EXPORTER_OTLP_ENDPOINT says")
}

// start builds the component's telemetry (service.name service,
// service.instance.id instance), installs it as the process's global
// providers and serves /metrics until ctx ends. stop flushes the spans.
func (f *telemetryFlags) start(ctx context.Context, service, instance string, followOnly bool, log *slog.Logger) (_ *telemetry.Telemetry, stop func(), _ error) {
	tel, err := telemetry.New(ctx, telemetry.Config{Service: service, Instance: instance, FollowOnly: followOnly, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	tel.Install()
	if service != "store" {
		// Everything but the store runs client-go work queues.
		workqueuemetrics.Install(tel.Registry())
	}
	addr, err := tel.ServeMetrics(ctx, f.metricsAddr, log)
	if err != nil {
		_ = tel.Close(context.Background())
		return nil, nil, err
	}
	if addr != nil {
		log.Info("serving metrics", "addr", "http://"+addr.String()+"/metrics")
	}
	if telemetry.Exporting() {
		log.Info("exporting traces over OTLP", "service", service, "instance", instance)
	}
	return tel, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Close(sctx); err != nil {
			log.Warn("flushing telemetry", "err", err)
		}
	}, nil
}
