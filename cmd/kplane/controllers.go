// This file holds `kplane controllers`: flags into a controllers.Config, then Run.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

func newControllersCommand() *cobra.Command {
	var (
		api                               client.Credentials
		election                          leaderElectFlags
		nodeGrace, evictionTimeout        time.Duration
		deploymentSyncs, rsSyncs, gcSyncs int
		which                             []string
		rootCAFile                        string
		qps                               float64
		burst                             int
		terminatedPodGCThreshold          int
		quotaSyncPeriod                   time.Duration
		localVolumeDir                    string
		hpaSync, hpaDownscale             time.Duration
	)
	p := component.Options{Service: "controllers", FollowOnly: true}
	cmd := &cobra.Command{
		Use:   "controllers",
		Short: "Run the controllers: deployments, replicasets, garbage collection, endpoints, namespaces, node lifecycle, service accounts, root CA ConfigMaps, daemon sets, disruption budgets, jobs, cronjobs, TTL after finished, pod garbage collection, replication controllers, custom resource definitions, endpoint slices, endpoint slice mirroring, resource quotas, stateful sets, persistent volumes and claims, horizontal pod autoscalers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			log, tel := proc.Log, proc.Tel
			if burst == 0 {
				burst = max(int(qps*3/2), 1)
			}
			limit, err := client.RateLimit(qps, burst)
			if err != nil {
				return fmt.Errorf("--kube-api-qps/--kube-api-burst: %w", err)
			}
			opts := []grpc.DialOption{tel.DialOption()}
			if limit != nil {
				opts = append(opts, grpc.WithChainUnaryInterceptor(limit))
			}
			conn, err := api.Dial(opts...)
			if err != nil {
				return err
			}
			defer conn.Close()
			// As kube-controller-manager: --root-ca-file, else the CA that
			// verifies the API service.
			if rootCAFile == "" {
				rootCAFile = api.CAFile
			}
			var rootCA []byte
			if rootCAFile != "" {
				if rootCA, err = os.ReadFile(rootCAFile); err != nil {
					return fmt.Errorf("--root-ca-file: %w", err)
				}
			}
			cfg := controllers.Config{Conn: conn, Controllers: which, RootCA: rootCA,
				DeploymentWorkers: deploymentSyncs, ReplicaSetWorkers: rsSyncs, GCWorkers: gcSyncs,
				NodeMonitorGracePeriod: nodeGrace, PodEvictionTimeout: evictionTimeout, TerminatedPodGCThreshold: terminatedPodGCThreshold, ResourceQuotaSyncPeriod: quotaSyncPeriod, LocalVolumeDir: localVolumeDir, Identity: election.identity, Logger: log,
				HPASyncPeriod: hpaSync, HPADownscaleStabilization: hpaDownscale,
				TracerProvider: tel.TracerProvider()}
			if election.enabled {
				cfg.LeaderElection = &controllers.LeaderElection{Namespace: election.namespace, Name: election.name,
					LeaseDuration: election.leaseDuration, RenewDeadline: election.renewDeadline, RetryPeriod: election.retryPeriod}
			}
			m, err := controllers.New(cfg)
			if err != nil {
				return err
			}
			log.Info("controllers starting", "server", api.Server, "identity", m.Identity(), "leaderElect", election.enabled, "controllers", which)
			if err := m.Run(cmd.Context()); !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	registerCredentials(f, &api, "system:kube-controller-manager")
	election.register(f, "kube-controller-manager", "acts")
	f.DurationVar(&nodeGrace, "node-monitor-grace-period", 40*time.Second, "how long a node's Lease may go unrenewed before it is NotReady")
	f.DurationVar(&evictionTimeout, "pod-eviction-timeout", 300*time.Second, "default toleration of the unreachable taint before eviction")
	f.IntVar(&terminatedPodGCThreshold, "terminated-pod-gc-threshold", 12500, "terminated pods that may exist before the pod garbage collector deletes the oldest (0 or less: none deleted)")
	f.DurationVar(&quotaSyncPeriod, "resource-quota-sync-period", 5*time.Minute, "how often every ResourceQuota's usage is recounted")
	f.DurationVar(&hpaSync, "horizontal-pod-autoscaler-sync-period", 15*time.Second, "how often each HorizontalPodAutoscaler is reconciled")
	f.DurationVar(&hpaDownscale, "horizontal-pod-autoscaler-downscale-stabilization", 5*time.Minute, "the scale-down stabilization window of an autoscaler that sets none (behavior.scaleDown.stabilizationWindowSeconds)")
	f.StringVar(&localVolumeDir, "local-volume-dir", "/var/lib/kplane/volumes", "where the node-local provisioner (StorageClass standard) puts its volumes on their nodes")
	f.IntVar(&deploymentSyncs, "concurrent-deployment-syncs", 5, "deployments reconciled at once")
	f.IntVar(&rsSyncs, "concurrent-replicaset-syncs", 5, "replicasets reconciled at once")
	f.IntVar(&gcSyncs, "concurrent-gc-syncs", 20, "garbage collector workers")
	f.StringSliceVar(&which, "controllers", controllers.All(), "controllers to run")
	// Kubernetes' controller manager defaults to 20 qps / 30 burst; kplane
	// keeps no limit unless asked (kplane up sets one, see localcluster).
	f.Float64Var(&qps, "kube-api-qps", 0, "calls per second to the API service, on average (a client-side token bucket as Kubernetes'; events, leases and watches are not counted; 0: no limit)")
	f.IntVar(&burst, "kube-api-burst", 0, "calls let through at once by --kube-api-qps's bucket (default: 1.5 × the qps, as Kubernetes' 20/30)")
	f.StringVar(&rootCAFile, "root-ca-file", "", "CA bundle published in every namespace's kube-root-ca.crt ConfigMap (default: --ca-file; neither: not published)")
	registerProcessFlags(f, &p, "")
	return cmd
}
