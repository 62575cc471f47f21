// This file holds Options and RunStandard: the scheduler as `kplane
// scheduler` runs it — kube-scheduler's flags (AddFlags), its config file,
// the connection to the API service and leader election — so that the
// command only wires them.

package scheduler

import (
	"context"
	"errors"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/services/client"
)

// Options are the scheduler's settings as its flags name them; the
// embedded Config holds those of the same form.
type Options struct {
	Config
	// ConfigFile is the scheduler config (YAML): plugins, weights,
	// percentageOfNodesToScore, parallelism; its schedulerName applies
	// when Config.SchedulerName is empty.
	ConfigFile string
	// API reaches the API service.
	API client.Credentials
	// Election says whether replicas elect a leader, and how.
	Election client.LeaderElectionFlags
	// Telemetry (nil: none) is the process's.
	Telemetry *telemetry.Telemetry
}

// AddFlags adds kube-scheduler's flags to f, filling o.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.API.AddFlags(f, "system:kube-scheduler")
	o.Election.AddFlags(f, "kube-scheduler", "schedules")
	f.StringVar(&o.ConfigFile, "config", "", "scheduler config file (YAML): plugins, weights, percentageOfNodesToScore, parallelism")
	f.StringVar(&o.SchedulerName, "scheduler-name", "", "spec.schedulerName served (default from --config, else default-scheduler)")
	f.IntVar(&o.BindParallelism, "bind-parallelism", 256, "binds in flight at once")
}

// Complete reads the config file into the profile and the scheduler name.
func (o *Options) Complete() error {
	fc, err := LoadConfigFile(o.ConfigFile)
	if err != nil {
		return err
	}
	if o.Profile, err = fc.Profile(); err != nil {
		return err
	}
	if o.SchedulerName == "" {
		o.SchedulerName = fc.SchedulerName
	}
	return nil
}

// RunStandard connects to the API service and runs the scheduler until ctx
// ends (a clean stop: nil), then closes the connection. Call Complete
// first.
func RunStandard(ctx context.Context, o Options) error {
	var opts []grpc.DialOption
	if t := o.Telemetry; t != nil {
		opts = append(opts, t.DialOption())
		o.TracerProvider, o.MeterProvider = t.TracerProvider(), t.MeterProvider()
	}
	conn, err := o.API.Dial(opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	cfg := o.Config
	cfg.Conn = conn
	if e := o.Election; e.Enabled {
		cfg.LeaderElection = &LeaderElection{Namespace: e.Namespace, Name: e.Name, Identity: e.Identity,
			LeaseDuration: e.LeaseDuration, RenewDeadline: e.RenewDeadline, RetryPeriod: e.RetryPeriod}
	}
	s, err := New(cfg)
	if err != nil {
		return err
	}
	if cfg.Logger != nil {
		cfg.Logger.Info("scheduler starting", "server", o.API.Server, "identity", s.Identity(), "leaderElect", o.Election.Enabled)
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
