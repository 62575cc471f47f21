package main

// This file holds `kplane controllers`: flags into a controllers.Config, then Run.

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

	"github.com/kplane/kplane/services/controllers"
)

func newControllersCommand() *cobra.Command {
	var (
		server, caFile, certFile, keyFile string
		token, tokenFile                  string
		plaintext                         bool
		leaderElect                       bool
		leaseName, leaseNamespace         string
		leaseDuration, renewDeadline      time.Duration
		retryPeriod                       time.Duration
		nodeGrace, evictionTimeout        time.Duration
		deploymentSyncs, rsSyncs, gcSyncs int
		which                             []string
		logLevel                          string
	)
	cmd := &cobra.Command{
		Use:   "controllers",
		Short: "Run the controllers: deployments, replicasets, garbage collection, endpoints, namespaces, node lifecycle",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
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
			cfg := controllers.Config{Conn: conn, Controllers: which,
				DeploymentWorkers: deploymentSyncs, ReplicaSetWorkers: rsSyncs, GCWorkers: gcSyncs,
				NodeMonitorGracePeriod: nodeGrace, PodEvictionTimeout: evictionTimeout, Logger: log}
			if leaderElect {
				cfg.LeaderElection = &controllers.LeaderElection{Namespace: leaseNamespace, Name: leaseName,
					LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}
			}
			m, err := controllers.New(cfg)
			if err != nil {
				return err
			}
			log.Info("controllers starting", "server", server, "identity", m.Identity(), "leaderElect", leaderElect, "controllers", which)
			err = m.Run(cmd.Context())
			if err == context.Canceled {
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&server, "server", "127.0.0.1:6443", "the API service's gRPC address")
	f.StringVar(&caFile, "ca-file", "", "CA bundle to verify the API service's certificate")
	f.StringVar(&certFile, "cert-file", "", "client certificate (CN system:kube-controller-manager)")
	f.StringVar(&keyFile, "key-file", "", "client key for --cert-file")
	f.StringVar(&token, "token", "", "bearer token of the controller manager's user")
	f.StringVar(&tokenFile, "token-file", "", "file holding the bearer token (keeps it out of the process list)")
	f.BoolVar(&plaintext, "insecure-plaintext", false, "plaintext gRPC to the API service (local experiments only)")
	f.BoolVar(&leaderElect, "leader-elect", true, "run as one of several replicas; only the holder of the Lease acts")
	f.StringVar(&leaseName, "leader-elect-resource-name", "kube-controller-manager", "name of the leader-election Lease")
	f.StringVar(&leaseNamespace, "leader-elect-resource-namespace", "kube-system", "namespace of the leader-election Lease")
	f.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long standbys wait after the last renewal before taking over")
	f.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before it stops leading")
	f.DurationVar(&retryPeriod, "leader-elect-retry-period", 2*time.Second, "wait between leader-election attempts")
	f.DurationVar(&nodeGrace, "node-monitor-grace-period", 40*time.Second, "how long a node's Lease may go unrenewed before it is NotReady")
	f.DurationVar(&evictionTimeout, "pod-eviction-timeout", 300*time.Second, "default toleration of the unreachable taint before eviction")
	f.IntVar(&deploymentSyncs, "concurrent-deployment-syncs", 5, "deployments reconciled at once")
	f.IntVar(&rsSyncs, "concurrent-replicaset-syncs", 5, "replicasets reconciled at once")
	f.IntVar(&gcSyncs, "concurrent-gc-syncs", 20, "garbage collector workers")
	f.StringSliceVar(&which, "controllers", controllers.All(), "controllers to run")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
