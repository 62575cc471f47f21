// This file holds `kplane scheduler`: flags into a scheduler.Config, then Run.

package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/services/scheduler"
)

func newSchedulerCommand() *cobra.Command {
	var (
		api                       apiClientFlags
		election                  leaderElectFlags
		configFile, schedulerName string
		bindParallelism           int
		logLevel                  string
		tf                        telemetryFlags
	)
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the scheduler: bind every pending pod to the best node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			fc, err := scheduler.LoadConfigFile(configFile)
			if err != nil {
				return err
			}
			profile, err := fc.Profile()
			if err != nil {
				return err
			}
			if schedulerName == "" {
				schedulerName = fc.SchedulerName
			}
			tel, stop, err := tf.start(cmd.Context(), "scheduler", "", true, log)
			if err != nil {
				return err
			}
			defer stop()
			conn, err := api.dial(tel.DialOption())
			if err != nil {
				return err
			}
			defer conn.Close()
			cfg := scheduler.Config{Conn: conn, SchedulerName: schedulerName, Profile: profile, BindParallelism: bindParallelism, Logger: log,
				TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider()}
			if election.enabled {
				cfg.LeaderElection = &scheduler.LeaderElection{Namespace: election.namespace, Name: election.name, Identity: election.identity,
					LeaseDuration: election.leaseDuration, RenewDeadline: election.renewDeadline, RetryPeriod: election.retryPeriod}
			}
			s, err := scheduler.New(cfg)
			if err != nil {
				return err
			}
			log.Info("scheduler starting", "server", api.server, "identity", s.Identity(), "leaderElect", election.enabled)
			if err := s.Run(cmd.Context()); !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	api.register(f, "system:kube-scheduler")
	election.register(f, "kube-scheduler", "schedules")
	f.StringVar(&configFile, "config", "", "scheduler config file (YAML): plugins, weights, percentageOfNodesToScore, parallelism")
	f.StringVar(&schedulerName, "scheduler-name", "", "spec.schedulerName served (default from --config, else default-scheduler)")
	f.IntVar(&bindParallelism, "bind-parallelism", 256, "binds in flight at once")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	tf.register(f)
	return cmd
}
