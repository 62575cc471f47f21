// Package compaction compacts the store's history on a schedule, as
// kube-apiserver does (--etcd-compaction-interval): without it, every write
// of every object (each Lease renewal, each status update) would stay in the
// store's history, its snapshots and its memory for good.
//
// Every API service replica runs a Compactor; they take turns through one
// key at the store's root, RevKey, which Kubernetes uses for the same
// purpose, so that a kplane store or an etcd shared with kube-apiserver sees
// one protocol. The key's version counts compaction rounds and its value is
// the store's revision when the last round was claimed. Each interval, a
// replica tries to claim the next round with a compare-and-swap on the
// version it last saw. The replica that wins compacts to the revision it
// recorded when it claimed the previous round, one interval ago, so that
// watchers always have at least an interval of history to resume from. A
// replica that loses learns the current version and tries again an interval
// later; if the replica that won stops, another one wins the next round.
// Only one replica compacts per round, whatever the replicas' clocks say:
// the store's transaction orders them.
package compaction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/utils/clock"
)

// RevKey is the key the replicas coordinate through, at the store's root
// (outside the objects' prefix), named as kube-apiserver names it.
const RevKey = "compact_rev_key"

// DefaultInterval is kube-apiserver's default --etcd-compaction-interval.
const DefaultInterval = 5 * time.Minute

// Config configures a Compactor.
type Config struct {
	// KV is the store; required.
	KV clientv3.KV
	// Interval is the time between rounds, and so the history kept; it
	// must be positive.
	Interval time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// MeterProvider records kplane.apiserver.store.compactions; nil uses
	// the global one.
	MeterProvider metric.MeterProvider
	// Clock; nil is the real clock. Tests pass a fake one.
	Clock clock.Clock
}

// Compactor runs one replica's side of the protocol.
type Compactor struct {
	kv          clientv3.KV
	interval    time.Duration
	log         *slog.Logger
	clock       clock.Clock
	compactions metric.Int64Counter

	// What the last round saw; only the goroutine running rounds uses it.
	// version is RevKey's version (0: the key does not exist); rev is the
	// store's revision at that round, the revision the next round that
	// this replica wins compacts to.
	version, rev int64
}

// New returns a Compactor; Run runs it.
func New(cfg Config) (*Compactor, error) {
	if cfg.KV == nil {
		return nil, errors.New("compaction: a store client is required")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("compaction: interval %s: must be positive", cfg.Interval)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	counter, err := mp.Meter("github.com/kplane/kplane/services/apiserver").Int64Counter("kplane.apiserver.store.compactions",
		metric.WithDescription("Compactions of the store this API service replica made (result=compacted) or attempted in vain (result=failed)."))
	if err != nil {
		return nil, fmt.Errorf("compaction: metrics: %w", err)
	}
	return &Compactor{kv: cfg.KV, interval: cfg.Interval, log: log.With("component", "compactor"), clock: clk, compactions: counter}, nil
}

// Run runs a round every interval until ctx ends; the first comes one
// interval after the start. A round that fails is logged and the next one
// comes an interval later.
func (c *Compactor) Run(ctx context.Context) {
	c.log.Info("compacting the store periodically", "interval", c.interval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(c.interval):
		}
		rctx, cancel := context.WithTimeout(ctx, c.interval)
		_, err := c.round(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.compactions.Add(ctx, 1, metric.WithAttributes(attribute.String("result", "failed")))
			c.log.Warn("compacting the store failed; trying again at the next interval", "err", err)
		}
	}
}

// round is one turn of the protocol. It returns the revision it compacted
// to, or 0 when it compacted nothing: another replica claimed the round,
// or this is the first round this replica claimed and it has no revision of
// an interval ago yet.
func (c *Compactor) round(ctx context.Context) (int64, error) {
	resp, err := c.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(RevKey), "=", c.version)).
		Then(clientv3.OpPut(RevKey, strconv.FormatInt(c.rev, 10))). // the put bumps the version
		Else(clientv3.OpGet(RevKey)).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("claim a compaction round: %w", err)
	}
	prev := c.rev
	c.rev = resp.Header.Revision
	if !resp.Succeeded {
		// Another replica claimed it. Take its count; a key that
		// someone deleted counts from 0 again.
		c.version = 0
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			c.version = kvs[0].Version
		}
		c.log.Debug("another replica claimed the compaction round", "round", c.version)
		return 0, nil
	}
	c.version++
	if prev == 0 {
		return 0, nil
	}
	start := c.clock.Now()
	if _, err := c.kv.Compact(ctx, prev); err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) {
			// The store was compacted past it by other means (its own
			// auto-compaction, an operator).
			c.log.Debug("the store is already compacted past the round's revision", "revision", prev)
			return 0, nil
		}
		return 0, fmt.Errorf("compact the store at revision %d: %w", prev, err)
	}
	c.compactions.Add(ctx, 1, metric.WithAttributes(attribute.String("result", "compacted")))
	c.log.Info("compacted the store", "revision", prev, "round", c.version, "took", c.clock.Since(start))
	return prev, nil
}
