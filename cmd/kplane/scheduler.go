// This file holds `kplane scheduler`: flags into a scheduler.Config, then Run.

package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler"
)

func newSchedulerCommand() *cobra.Command {
	var (
		api                       client.Credentials
		election                  leaderElectFlags
		configFile, schedulerName string
		bindParallelism           int
	)
	p := component.Options{Service: "scheduler", FollowOnly: true}
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the scheduler: bind every pending pod to the best node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			conn, err := api.Dial(proc.Tel.DialOption())
			if err != nil {
				return err
			}
			defer conn.Close()
			cfg := scheduler.Config{Conn: conn, SchedulerName: schedulerName, Profile: profile, BindParallelism: bindParallelism, Logger: proc.Log,
				TracerProvider: proc.Tel.TracerProvider(), MeterProvider: proc.Tel.MeterProvider()}
			if election.enabled {
				cfg.LeaderElection = &scheduler.LeaderElection{Namespace: election.namespace, Name: election.name, Identity: election.identity,
					LeaseDuration: election.leaseDuration, RenewDeadline: election.renewDeadline, RetryPeriod: election.retryPeriod}
			}
			s, err := scheduler.New(cfg)
			if err != nil {
				return err
			}
			proc.Log.Info("scheduler starting", "server", api.Server, "identity", s.Identity(), "leaderElect", election.enabled)
			if err := s.Run(cmd.Context()); !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	registerCredentials(f, &api, "system:kube-scheduler")
	election.register(f, "kube-scheduler", "schedules")
	f.StringVar(&configFile, "config", "", "scheduler config file (YAML): plugins, weights, percentageOfNodesToScore, parallelism")
	f.StringVar(&schedulerName, "scheduler-name", "", "spec.schedulerName served (default from --config, else default-scheduler)")
	f.IntVar(&bindParallelism, "bind-parallelism", 256, "binds in flight at once")
	registerProcessFlags(f, &p, "")
	return cmd
}
