// This file holds Options and RunStandard: the controller manager as
// `kplane controllers` runs it — kube-controller-manager's flags
// (AddFlags), the rate-limited connection to the API service, the root CA
// it publishes, leader election — so that the command only wires them.

package controllers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/services/client"
)

// Options are the controller manager's settings as its flags name them;
// the embedded Config holds those of the same form.
type Options struct {
	Config
	// API reaches the API service, at most QPS calls a second on average
	// with bursts of Burst (0 QPS: no limit; 0 Burst: 1.5 × QPS).
	API   client.Credentials
	QPS   float64
	Burst int
	// RootCAFile is published as kube-root-ca.crt (default API.CAFile).
	RootCAFile string
	// Election says whether replicas elect a leader, and how.
	Election client.LeaderElectionFlags
	// Telemetry (nil: none) is the process's.
	Telemetry *telemetry.Telemetry
}

// AddFlags adds kube-controller-manager's flags to f, filling o, with its
// defaults where kplane has the setting.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.API.AddFlags(f, "system:kube-controller-manager")
	o.Election.AddFlags(f, "kube-controller-manager", "acts")
	f.DurationVar(&o.NodeMonitorGracePeriod, "node-monitor-grace-period", 40*time.Second, "how long a node's Lease may go unrenewed before it is NotReady")
	f.DurationVar(&o.PodEvictionTimeout, "pod-eviction-timeout", 300*time.Second, "default toleration of the unreachable taint before eviction")
	f.IntVar(&o.TerminatedPodGCThreshold, "terminated-pod-gc-threshold", 12500, "terminated pods that may exist before the pod garbage collector deletes the oldest (0 or less: none deleted)")
	f.DurationVar(&o.ResourceQuotaSyncPeriod, "resource-quota-sync-period", 5*time.Minute, "how often every ResourceQuota's usage is recounted")
	f.DurationVar(&o.HPASyncPeriod, "horizontal-pod-autoscaler-sync-period", 15*time.Second, "how often each HorizontalPodAutoscaler is reconciled")
	f.DurationVar(&o.HPADownscaleStabilization, "horizontal-pod-autoscaler-downscale-stabilization", 5*time.Minute, "the scale-down stabilization window of an autoscaler that sets none (behavior.scaleDown.stabilizationWindowSeconds)")
	f.StringVar(&o.LocalVolumeDir, "local-volume-dir", "/var/lib/kplane/volumes", "where the node-local provisioner (StorageClass standard) puts its volumes on their nodes")
	f.IntVar(&o.DeploymentWorkers, "concurrent-deployment-syncs", 5, "deployments reconciled at once")
	f.IntVar(&o.ReplicaSetWorkers, "concurrent-replicaset-syncs", 5, "replicasets reconciled at once")
	f.IntVar(&o.GCWorkers, "concurrent-gc-syncs", 20, "garbage collector workers")
	f.StringSliceVar(&o.Controllers, "controllers", All(), "controllers to run")
	// Kubernetes' controller manager defaults to 20 qps / 30 burst; kplane
	// keeps no limit unless asked (kplane up sets one, see localcluster).
	f.Float64Var(&o.QPS, "kube-api-qps", 0, "calls per second to the API service, on average (a client-side token bucket as Kubernetes'; events, leases and watches are not counted; 0: no limit)")
	f.IntVar(&o.Burst, "kube-api-burst", 0, "calls let through at once by --kube-api-qps's bucket (default: 1.5 × the qps, as Kubernetes' 20/30)")
	f.StringVar(&o.RootCAFile, "root-ca-file", "", "CA bundle published in every namespace's kube-root-ca.crt ConfigMap (default: --ca-file; neither: not published)")
}

// RunStandard connects to the API service and runs the controller
// manager until ctx ends (a clean stop: nil), then closes the connection.
func RunStandard(ctx context.Context, o Options) error {
	burst := o.Burst
	if burst == 0 {
		burst = max(int(o.QPS*3/2), 1)
	}
	limit, err := client.RateLimit(o.QPS, burst)
	if err != nil {
		return fmt.Errorf("--kube-api-qps/--kube-api-burst: %w", err)
	}
	var opts []grpc.DialOption
	if o.Telemetry != nil {
		opts = append(opts, o.Telemetry.DialOption())
		o.TracerProvider = o.Telemetry.TracerProvider()
	}
	if limit != nil {
		opts = append(opts, grpc.WithChainUnaryInterceptor(limit))
	}
	conn, err := o.API.Dial(opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	cfg := o.Config
	cfg.Conn = conn
	// As kube-controller-manager: --root-ca-file, else the CA that
	// verifies the API service.
	rootCAFile := o.RootCAFile
	if rootCAFile == "" {
		rootCAFile = o.API.CAFile
	}
	if rootCAFile != "" {
		if cfg.RootCA, err = os.ReadFile(rootCAFile); err != nil {
			return fmt.Errorf("--root-ca-file: %w", err)
		}
	}
	cfg.Identity = o.Election.Identity
	if e := o.Election; e.Enabled {
		cfg.LeaderElection = &LeaderElection{Namespace: e.Namespace, Name: e.Name,
			LeaseDuration: e.LeaseDuration, RenewDeadline: e.RenewDeadline, RetryPeriod: e.RetryPeriod}
	}
	m, err := New(cfg)
	if err != nil {
		return err
	}
	if cfg.Logger != nil {
		cfg.Logger.Info("controllers starting", "server", o.API.Server, "identity", m.Identity(), "leaderElect", o.Election.Enabled, "controllers", cfg.Controllers)
	}
	if err := m.Run(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
