package main

// This file holds `kplane scheduler`: flags into a scheduler.Config, then Run.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/services/scheduler"
)

func newSchedulerCommand() *cobra.Command {
	var (
		server, caFile, certFile, keyFile string
		token, tokenFile                  string
		plaintext                         bool
		configFile, schedulerName         string
		leaderElect                       bool
		leaseName, leaseNamespace         string
		leaseDuration, renewDeadline      time.Duration
		retryPeriod                       time.Duration
		bindParallelism                   int
		logLevel                          string
	)
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the scheduler: bind every pending pod to the best node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
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
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				token = strings.TrimSpace(string(b))
			}
			tlsCfg, err := clientTLS(caFile, certFile, keyFile)
			if err != nil {
				return err
			}
			creds := credentials.NewTLS(tlsCfg)
			if plaintext {
				creds = insecure.NewCredentials()
			}
			opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
			if token != "" {
				opts = append(opts, grpc.WithPerRPCCredentials(schedulerToken(token)))
			}
			conn, err := grpc.NewClient(server, opts...)
			if err != nil {
				return err
			}
			defer conn.Close()
			cfg := scheduler.Config{Conn: conn, SchedulerName: schedulerName, Profile: profile, BindParallelism: bindParallelism, Logger: log}
			if leaderElect {
				cfg.LeaderElection = &scheduler.LeaderElection{Namespace: leaseNamespace, Name: leaseName,
					LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}
			}
			s, err := scheduler.New(cfg)
			if err != nil {
				return err
			}
			log.Info("scheduler starting", "server", server, "identity", s.Identity(), "leaderElect", leaderElect)
			err = s.Run(cmd.Context())
			if err == context.Canceled {
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&server, "server", "127.0.0.1:6443", "the API service's gRPC address")
	f.StringVar(&caFile, "ca-file", "", "CA bundle to verify the API service's certificate")
	f.StringVar(&certFile, "cert-file", "", "client certificate (CN system:kube-scheduler)")
	f.StringVar(&keyFile, "key-file", "", "client key for --cert-file")
	f.StringVar(&token, "token", "", "bearer token of the scheduler's user")
	f.StringVar(&tokenFile, "token-file", "", "file holding the bearer token (keeps it out of the process list)")
	f.BoolVar(&plaintext, "insecure-plaintext", false, "plaintext gRPC to the API service (local experiments only)")
	f.StringVar(&configFile, "config", "", "scheduler config file (YAML): plugins, weights, percentageOfNodesToScore, parallelism")
	f.StringVar(&schedulerName, "scheduler-name", "", "spec.schedulerName served (default from --config, else default-scheduler)")
	f.BoolVar(&leaderElect, "leader-elect", true, "run as one of several replicas; only the holder of the Lease schedules")
	f.StringVar(&leaseName, "leader-elect-resource-name", "kube-scheduler", "name of the leader-election Lease")
	f.StringVar(&leaseNamespace, "leader-elect-resource-namespace", "kube-system", "namespace of the leader-election Lease")
	f.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long standbys wait after the last renewal before taking over")
	f.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before it stops leading")
	f.DurationVar(&retryPeriod, "leader-elect-retry-period", 2*time.Second, "wait between leader-election attempts")
	f.IntVar(&bindParallelism, "bind-parallelism", 256, "binds in flight at once")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// schedulerToken sends a bearer token with every call.
type schedulerToken string

func (t schedulerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so --insecure-plaintext works for local experiments.
func (schedulerToken) RequireTransportSecurity() bool { return false }
