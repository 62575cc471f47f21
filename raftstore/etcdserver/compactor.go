// This file holds the store's auto-compaction, configured as etcd's
// --auto-compaction-mode and --auto-compaction-retention: every member
// samples its revision, but only the Raft leader proposes a compaction, as
// an ordinary Compact entry, so that every member compacts at the same point
// of the log.

package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kplane/kplane/raftstore/mvcc"
)

// The auto-compaction modes, named as etcd names them.
const (
	// CompactionModePeriodic keeps a span of time of history.
	CompactionModePeriodic = "periodic"
	// CompactionModeRevision keeps a number of revisions of history.
	CompactionModeRevision = "revision"
)

// RevisionCompactionInterval is how often revision mode compacts, as etcd:
// every five minutes, down to the current revision less the retention.
const RevisionCompactionInterval = 5 * time.Minute

// periodicSamples is how many times per compaction period periodic mode
// samples the revision; the revision sampled one retention ago is the one it
// compacts to.
const periodicSamples = 10

// AutoCompaction says how the store compacts its history by itself. The zero
// value turns auto-compaction off, which is the default, as in etcd.
type AutoCompaction struct {
	// Mode is CompactionModePeriodic or CompactionModeRevision.
	Mode string
	// Retention is, in periodic mode, how much time of history to keep.
	Retention time.Duration
	// Revisions is, in revision mode, how many revisions of history to keep.
	Revisions int64
}

// Enabled reports whether a retention is set.
func (a AutoCompaction) Enabled() bool {
	switch a.Mode {
	case CompactionModePeriodic:
		return a.Retention > 0
	case CompactionModeRevision:
		return a.Revisions > 0
	}
	return false
}

// retentionText is the retention for logs: "2h0m0s" or "1000 revisions".
func (a AutoCompaction) retentionText() string {
	if a.Mode == CompactionModeRevision {
		return fmt.Sprintf("%d revisions", a.Revisions)
	}
	return a.Retention.String()
}

// ParseAutoCompaction reads etcd's --auto-compaction-mode and
// --auto-compaction-retention. In periodic mode the retention is a duration
// ("30m", "1h") or, as etcd accepts, a bare whole number of hours; in revision
// mode it is a whole number of revisions. An empty or zero retention turns
// auto-compaction off.
func ParseAutoCompaction(mode, retention string) (AutoCompaction, error) {
	if mode != CompactionModePeriodic && mode != CompactionModeRevision {
		return AutoCompaction{}, fmt.Errorf("--auto-compaction-mode %q: want %q or %q", mode, CompactionModePeriodic, CompactionModeRevision)
	}
	a := AutoCompaction{Mode: mode}
	if retention == "" {
		return a, nil
	}
	n, intErr := strconv.ParseInt(retention, 10, 64)
	if mode == CompactionModeRevision {
		if intErr != nil || n < 0 {
			return AutoCompaction{}, fmt.Errorf("--auto-compaction-retention %q: revision mode keeps a whole number of revisions, 0 or more", retention)
		}
		a.Revisions = n
		return a, nil
	}
	if intErr == nil {
		if n < 0 || n > int64(time.Duration(1<<63-1)/time.Hour) {
			return AutoCompaction{}, fmt.Errorf("--auto-compaction-retention %q: hours out of range", retention)
		}
		a.Retention = time.Duration(n) * time.Hour
		return a, nil
	}
	d, err := time.ParseDuration(retention)
	if err != nil {
		return AutoCompaction{}, fmt.Errorf("--auto-compaction-retention %q: want a duration such as 30m or 2h, or a whole number of hours: %w", retention, err)
	}
	if d < 0 {
		return AutoCompaction{}, fmt.Errorf("--auto-compaction-retention %q: must not be negative", retention)
	}
	a.Retention = d
	return a, nil
}

// autoCompactor runs one member's auto-compaction. Its dependencies are
// functions so that its schedule can be tested without a cluster.
type autoCompactor struct {
	cfg   AutoCompaction
	clock Clock
	log   *slog.Logger
	// rev returns the member's current revision; leads reports whether it
	// is the Raft leader; compact compacts the replicated store at rev.
	rev     func() int64
	leads   func() bool
	compact func(ctx context.Context, rev int64) error
}

// newAutoCompactor returns s's auto-compactor, or nil when auto-compaction is
// off.
func newAutoCompactor(s *Server) *autoCompactor {
	if !s.cfg.AutoCompaction.Enabled() {
		return nil
	}
	return &autoCompactor{
		cfg:     s.cfg.AutoCompaction,
		clock:   s.cfg.Clock,
		log:     s.log,
		rev:     s.store.Rev,
		leads:   func() bool { return s.raft.State() == raft.Leader },
		compact: s.compactAsLeader,
	}
}

// compactAsLeader proposes a compaction at rev, which is replicated like any
// write. It refuses on a follower: the leader alone compacts, so members
// never race each other to the same compaction.
func (s *Server) compactAsLeader(ctx context.Context, rev int64) error {
	if s.raft.State() != raft.Leader {
		return errNotLeaderLocal
	}
	_, err := s.propose(ctx, &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: rev}})
	return err
}

// run compacts on the configured schedule until ctx ends.
func (c *autoCompactor) run(ctx context.Context) {
	c.log.Info("auto-compaction on", "mode", c.cfg.Mode, "retention", c.cfg.retentionText())
	if c.cfg.Mode == CompactionModeRevision {
		c.runRevision(ctx)
		return
	}
	c.runPeriodic(ctx)
}

// runPeriodic samples the revision periodicSamples times per compaction
// period (the retention, at most an hour) and compacts to its oldest sample,
// as etcd does: the first compaction one retention after start, to the
// revision of then; later ones one compaction period after the last
// success, when the window holds a retention's worth of samples before the
// newest, so at least one retention of history is kept. Followers sample
// too, so that a new leader can compact from the start.
func (c *autoCompactor) runPeriodic(ctx context.Context) {
	period := min(c.cfg.Retention, time.Hour)
	step := max(period/periodicSamples, time.Nanosecond)
	keep := int(c.cfg.Retention/step) + 1
	wait := c.cfg.Retention
	lastSuccess := c.clock.Now()
	var samples []int64
	var last int64
	for {
		samples = append(samples, c.rev())
		if len(samples) > keep {
			samples = samples[1:]
		}
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(step):
		}
		target := samples[0]
		if !c.leads() || c.clock.Since(lastSuccess) < wait || target == last {
			continue
		}
		if c.compactTo(ctx, target) {
			lastSuccess, last, wait = c.clock.Now(), target, period
		}
	}
}

// runRevision compacts every RevisionCompactionInterval to the current
// revision less the retention.
func (c *autoCompactor) runRevision(ctx context.Context) {
	var last int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(RevisionCompactionInterval):
		}
		target := c.rev() - c.cfg.Revisions
		if !c.leads() || target <= 0 || target == last {
			continue
		}
		if c.compactTo(ctx, target) {
			last = target
		}
	}
}

// compactTo compacts at rev and reports whether the history below rev is now
// gone (compacted by this call or an earlier one).
func (c *autoCompactor) compactTo(ctx context.Context, rev int64) bool {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := c.clock.Now()
	err := c.compact(cctx, rev)
	switch {
	case err == nil:
		c.log.Info("auto-compacted", "revision", rev, "mode", c.cfg.Mode, "retention", c.cfg.retentionText(), "took", c.clock.Since(start))
		return true
	case errors.Is(err, mvcc.ErrCompacted):
		c.log.Debug("auto-compaction: already compacted", "revision", rev)
		return true
	case ctx.Err() != nil:
		return false
	default:
		c.log.Warn("auto-compaction failed; trying again at the next interval", "revision", rev, "err", err)
		return false
	}
}
