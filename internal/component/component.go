// Package component holds what every kplane process sets up before it
// builds its part: the logger from --log-level, the garbage collector's
// target from --gc-percent, the optional pprof listener and the process's
// telemetry (traces from the OTEL_* environment, /metrics on
// --metrics-bind-address). A command maps its flags onto Options, calls
// Start, and closes the Process when its part has stopped.
package component

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/internal/telemetry/workqueuemetrics"
)

// Options say how the process runs. The zero value logs at info, leaves
// the GC target alone, serves no profiles and starts no telemetry.
type Options struct {
	// Service is the telemetry's service.name ("apiserver", "store", ...);
	// empty starts no telemetry. Instance is service.instance.id.
	Service, Instance string
	// FollowOnly makes the process's spans children of incoming traces
	// only (telemetry.Config.FollowOnly).
	FollowOnly bool
	// LogLevel is debug, info, warn or error (empty: info).
	LogLevel string
	// GCPercent, when set, is applied as --gc-percent is (see SetGCPercent).
	GCPercent *int
	// ProfilingListen, if set, serves net/http/pprof there;
	// BlockProfileRate is then runtime.SetBlockProfileRate's argument.
	ProfilingListen  string
	BlockProfileRate int
	// MetricsAddr serves Prometheus /metrics (empty: none).
	MetricsAddr string
}

// Process is a started process's shared parts.
type Process struct {
	Log *slog.Logger
	// Tel is nil when Options.Service was empty.
	Tel     *telemetry.Telemetry
	closers []func()
}

// NewLogger returns a text logger on stderr at level (debug, info, warn or
// error; empty is info).
func NewLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if level != "" {
		if err := l.UnmarshalText([]byte(level)); err != nil {
			return nil, fmt.Errorf("--log-level: %w", err)
		}
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// Start sets the process up. On error whatever it started is stopped.
func Start(ctx context.Context, o Options) (_ *Process, err error) {
	log, err := NewLogger(o.LogLevel)
	if err != nil {
		return nil, err
	}
	p := &Process{Log: log}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if o.GCPercent != nil {
		SetGCPercent(*o.GCPercent, log)
	}
	if o.ProfilingListen != "" {
		stop, err := serveProfiling(o.ProfilingListen, o.BlockProfileRate, log)
		if err != nil {
			return nil, err
		}
		p.closers = append(p.closers, stop)
	}
	if o.Service != "" {
		if p.Tel, err = startTelemetry(ctx, o, log); err != nil {
			return nil, err
		}
		tel := p.Tel
		p.closers = append(p.closers, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tel.Close(sctx); err != nil {
				log.Warn("flushing telemetry", "err", err)
			}
		})
	}
	return p, nil
}

// Close stops what Start started, the last first: the telemetry (flushing
// its spans), then the profiling server.
func (p *Process) Close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// startTelemetry builds the process's telemetry, installs it as the
// process's global providers and serves /metrics until ctx ends.
func startTelemetry(ctx context.Context, o Options, log *slog.Logger) (*telemetry.Telemetry, error) {
	tel, err := telemetry.New(ctx, telemetry.Config{Service: o.Service, Instance: o.Instance, FollowOnly: o.FollowOnly, Logger: log})
	if err != nil {
		return nil, err
	}
	tel.Install()
	if o.Service != "store" {
		// Everything but the store runs client-go work queues.
		workqueuemetrics.Install(tel.Registry())
	}
	addr, err := tel.ServeMetrics(ctx, o.MetricsAddr, log)
	if err != nil {
		_ = tel.Close(context.Background())
		return nil, err
	}
	if addr != nil {
		log.Info("serving metrics", "addr", "http://"+addr.String()+"/metrics")
	}
	if telemetry.Exporting() {
		log.Info("exporting traces over OTLP", "service", o.Service, "instance", o.Instance)
	}
	return tel, nil
}

// SetGCPercent applies a --gc-percent flag the way the runtime's own
// setting is expected to behave: GOGC in the environment, when set, wins
// (an operator's explicit choice), and GOMEMLIMIT, if set, still caps the
// heap. A negative percent turns the collector off, as GOGC=off does.
func SetGCPercent(percent int, log *slog.Logger) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		log.Info("GOGC is set in the environment: --gc-percent not applied", "GOGC", v, "gc-percent", percent)
		return
	}
	debug.SetGCPercent(percent)
}

// serveProfiling serves /debug/pprof/ on addr until stop is called.
func serveProfiling(addr string, blockRate int, log *slog.Logger) (stop func(), _ error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--profiling-listen: %w", err)
	}
	runtime.SetBlockProfileRate(blockRate)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("profiling server stopped", "err", err)
		}
	}()
	log.Info("serving profiles", "addr", lis.Addr().String())
	return func() { _ = srv.Close() }, nil
}
