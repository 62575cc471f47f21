// This file bridges hashicorp/raft's own metrics (go-metrics: commit and
// apply times, leader changes, replication, snapshots) into a Prometheus
// registry, rather than measuring them again.

package telemetry

import (
	"fmt"

	gometrics "github.com/armon/go-metrics"
	gometricsprom "github.com/armon/go-metrics/prometheus"
)

// BridgeRaftMetrics makes t's registry the sink of go-metrics, which
// hashicorp/raft reports to through its package-level functions (so this is
// per process: call it once, from the store's main). Raft's names become
// Prometheus names with underscores: raft_commitTime, raft_fsm_apply,
// raft_state_leader, ...
func (t *Telemetry) BridgeRaftMetrics() error {
	sink, err := gometricsprom.NewPrometheusSinkFrom(gometricsprom.PrometheusOpts{Name: "kplane_raft_sink", Registerer: t.registry})
	if err != nil {
		return fmt.Errorf("telemetry: raft metrics sink: %w", err)
	}
	cfg := gometrics.DefaultConfig("")
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false // the Go collector has them
	cfg.EnableServiceLabel = false
	if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
		return fmt.Errorf("telemetry: raft metrics: %w", err)
	}
	return nil
}
