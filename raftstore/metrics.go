// This file holds the member's Raft gauges, read at each scrape. Raft's own
// timings and counters (commit and FSM apply times, leader changes,
// replication) come from hashicorp/raft's go-metrics, bridged to Prometheus
// by internal/telemetry rather than measured again here.

package raftstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// registerMetrics registers the gauges; Run unregisters them.
func (s *Store) registerMetrics(mp metric.MeterProvider) (metric.Registration, error) {
	m := mp.Meter("github.com/kplane/kplane/raftstore")
	term, err1 := m.Int64ObservableGauge("kplane.raft.term", metric.WithDescription("The member's current Raft term."))
	commit, err2 := m.Int64ObservableGauge("kplane.raft.commit_index", metric.WithDescription("Highest Raft log index known committed."))
	applied, err3 := m.Int64ObservableGauge("kplane.raft.applied_index", metric.WithDescription("Highest Raft log index applied to the store on this member."))
	last, err4 := m.Int64ObservableGauge("kplane.raft.last_index", metric.WithDescription("Last index in the member's Raft log."))
	state, err5 := m.Int64ObservableGauge("kplane.raft.state", metric.WithDescription("1 for the member's Raft state (follower, candidate, leader, shutdown), 0 for the others."))
	cv, err6 := m.Int64ObservableGauge("kplane.store.cluster_version", metric.WithDescription("The cluster version this member applied: the newest replicated format every member reads."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return nil, fmt.Errorf("raftstore: metrics: %w", err)
	}
	states := []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		r := s.node.Raft
		o.ObserveInt64(term, int64(r.CurrentTerm()))
		o.ObserveInt64(commit, int64(r.CommitIndex()))
		o.ObserveInt64(applied, int64(r.AppliedIndex()))
		o.ObserveInt64(last, int64(r.LastIndex()))
		o.ObserveInt64(cv, int64(s.fsm.ClusterVersion()))
		cur := r.State()
		for _, st := range states {
			v := int64(0)
			if st == cur {
				v = 1
			}
			o.ObserveInt64(state, v, metric.WithAttributes(attribute.String("state", st.String())))
		}
		return nil
	}, term, commit, applied, last, state, cv)
	if err != nil {
		return nil, fmt.Errorf("raftstore: metrics: %w", err)
	}
	return reg, nil
}
