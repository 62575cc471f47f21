// This file holds leader election on a coordination.k8s.io Lease, with
// client-go's durations and rules: acquire, renew, and lose leadership.

package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// LeaseClient is what leader election needs from the API service;
// *Client[*coordv1.Lease] implements it.
type LeaseClient interface {
	Get(ctx context.Context, namespace, name string) (*coordv1.Lease, error)
	Create(ctx context.Context, obj *coordv1.Lease) (*coordv1.Lease, error)
	Update(ctx context.Context, obj *coordv1.Lease) (*coordv1.Lease, error)
}

var _ LeaseClient = (*Client[*coordv1.Lease])(nil)

// LeaderCallbacks are called as leadership changes.
type LeaderCallbacks struct {
	// OnStartedLeading runs in its own goroutine when this candidate becomes
	// leader; its ctx is cancelled the moment leadership is lost or given up.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading is called after leading ends (always after
	// OnStartedLeading's ctx is cancelled; not called if it never led).
	OnStoppedLeading func()
	// OnNewLeader is called when the observed leader changes (including to us).
	OnNewLeader func(identity string)
}

// LeaderElectionConfig configures a LeaderElector. Durations follow
// client-go's meaning and defaults (15 s, 10 s, 2 s).
type LeaderElectionConfig struct {
	Leases    LeaseClient
	Namespace string // e.g. kube-system
	Name      string // e.g. kube-scheduler
	Identity  string // unique per candidate, e.g. hostname_uuid
	// LeaseDuration is how long others wait, after they last saw the lease
	// change, before taking it over.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it
	// gives up leading. It must be less than LeaseDuration.
	RenewDeadline time.Duration
	// RetryPeriod is the wait between attempts.
	RetryPeriod time.Duration
	// ReleaseOnCancel gives the lease up (holder "") when Run's ctx ends
	// while leading, so another candidate takes over at once.
	ReleaseOnCancel bool
	Callbacks       LeaderCallbacks
	Logger          *slog.Logger
}

// LeaderElector runs one candidate's side of leader election on a
// coordination/v1 Lease. Every write is a compare-and-swap (Update with the
// lease's resourceVersion), so two candidates never both believe they won
// the same round. A candidate takes over another's lease only after
// LeaseDuration has passed, by its own clock, since it last saw the lease
// change; the leader stops leading when it has failed to renew for
// RenewDeadline (< LeaseDuration), so — with clocks that run at about the same
// rate — the old leader has stopped before anyone else starts.
type LeaderElector struct {
	cfg LeaderElectionConfig
	log *slog.Logger

	mu           sync.Mutex
	observed     *coordv1.Lease // last lease seen
	observedTime time.Time      // when it was first seen in that state (local clock)
	leader       string
	leading      bool
}

// NewLeaderElector checks cfg and fills defaults.
func NewLeaderElector(cfg LeaderElectionConfig) (*LeaderElector, error) {
	if cfg.Leases == nil || cfg.Name == "" || cfg.Identity == "" {
		return nil, errors.New("client: leader election needs Leases, Name and Identity")
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = 10 * time.Second
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = 2 * time.Second
	}
	if cfg.RenewDeadline >= cfg.LeaseDuration {
		return nil, fmt.Errorf("client: RenewDeadline %v must be less than LeaseDuration %v", cfg.RenewDeadline, cfg.LeaseDuration)
	}
	if cfg.RetryPeriod >= cfg.RenewDeadline {
		return nil, fmt.Errorf("client: RetryPeriod %v must be less than RenewDeadline %v", cfg.RetryPeriod, cfg.RenewDeadline)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &LeaderElector{cfg: cfg, log: log.With("component", "leaderelection", "lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity)}, nil
}

// IsLeader reports whether this candidate currently leads.
func (le *LeaderElector) IsLeader() bool {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.leading
}

// Leader is the identity of the last observed leader.
func (le *LeaderElector) Leader() string {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.leader
}

// Run campaigns until this candidate leads, leads until it loses the lease
// or ctx ends, then returns (run it in a loop to campaign again). Run returns
// only after OnStartedLeading's ctx has been cancelled.
func (le *LeaderElector) Run(ctx context.Context) {
	acquiredAt, ok := le.acquire(ctx)
	if !ok {
		return
	}
	leadCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if f := le.cfg.Callbacks.OnStartedLeading; f != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(leadCtx)
		}()
	}
	le.renew(ctx, acquiredAt)
	le.setLeading(false)
	cancel()
	if le.cfg.ReleaseOnCancel && ctx.Err() != nil {
		le.release()
	}
	wg.Wait()
	if f := le.cfg.Callbacks.OnStoppedLeading; f != nil {
		f()
	}
}

func (le *LeaderElector) setLeading(v bool) {
	le.mu.Lock()
	defer le.mu.Unlock()
	le.leading = v
}

// acquire retries every RetryPeriod until it holds the lease or ctx ends.
// It returns when the successful attempt started.
func (le *LeaderElector) acquire(ctx context.Context) (time.Time, bool) {
	for {
		start := time.Now()
		if le.tryAcquireOrRenew(ctx) {
			le.setLeading(true)
			le.log.Info("became leader")
			return start, true
		}
		if !sleep(ctx, le.cfg.RetryPeriod) {
			return time.Time{}, false
		}
	}
}

// renew renews every RetryPeriod and returns when a renewal has not
// succeeded for RenewDeadline, or ctx ends.
func (le *LeaderElector) renew(ctx context.Context, lastRenew time.Time) {
	// lastRenew is when the last successful attempt started, which is no
	// later than when others could see its write: the leader's deadline is
	// conservative.
	for sleep(ctx, le.cfg.RetryPeriod) {
		start := time.Now()
		attemptCtx, cancel := context.WithTimeout(ctx, le.cfg.RenewDeadline-time.Since(lastRenew))
		ok := le.tryAcquireOrRenew(attemptCtx)
		cancel()
		if ok {
			lastRenew = start
			continue
		}
		if time.Since(lastRenew) >= le.cfg.RenewDeadline {
			le.log.Warn("failed to renew the lease within the renew deadline; stopping leading")
			return
		}
	}
}

// tryAcquireOrRenew makes one attempt to take or renew the lease.
func (le *LeaderElector) tryAcquireOrRenew(ctx context.Context) bool {
	now := time.Now()
	durSec := int32((le.cfg.LeaseDuration + time.Second - 1) / time.Second)
	lease, err := le.cfg.Leases.Get(ctx, le.cfg.Namespace, le.cfg.Name)
	if apierrors.IsNotFound(err) {
		created, err := le.cfg.Leases.Create(ctx, &coordv1.Lease{
			Metadata: &metav1.ObjectMeta{Namespace: le.cfg.Namespace, Name: le.cfg.Name},
			Spec: &coordv1.LeaseSpec{
				HolderIdentity: proto.String(le.cfg.Identity), LeaseDurationSeconds: proto.Int32(durSec),
				AcquireTime: timestamppb.New(now), RenewTime: timestamppb.New(now), LeaseTransitions: proto.Int32(0),
			},
		})
		if err != nil {
			le.log.Debug("create lease failed", "err", err)
			return false
		}
		le.observe(created, now)
		return true
	}
	if err != nil {
		le.log.Debug("get lease failed", "err", err)
		return false
	}
	// Start the expiry clock only after the read returned: a renewal that
	// committed while the Get was in flight must not look older than it is.
	le.observe(lease, time.Now())
	holder := lease.GetSpec().GetHolderIdentity()
	if holder != "" && holder != le.cfg.Identity {
		le.mu.Lock()
		since := le.observedTime
		le.mu.Unlock()
		// The holder's own duration counts if it is longer than ours.
		wait := max(le.cfg.LeaseDuration, time.Duration(lease.GetSpec().GetLeaseDurationSeconds())*time.Second)
		if now.Before(since.Add(wait)) {
			return false
		}
	}
	next := proto.Clone(lease).(*coordv1.Lease)
	if next.Spec == nil {
		next.Spec = &coordv1.LeaseSpec{}
	}
	if holder != le.cfg.Identity {
		next.Spec.AcquireTime = timestamppb.New(now)
		next.Spec.LeaseTransitions = proto.Int32(next.Spec.GetLeaseTransitions() + 1)
	}
	next.Spec.HolderIdentity = proto.String(le.cfg.Identity)
	next.Spec.LeaseDurationSeconds = proto.Int32(durSec)
	next.Spec.RenewTime = timestamppb.New(now)
	updated, err := le.cfg.Leases.Update(ctx, next)
	if err != nil {
		le.log.Debug("update lease failed", "err", err)
		return false
	}
	le.observe(updated, now)
	return true
}

// observe records the lease as seen at now, restarting the local
// expiry clock only if it changed.
func (le *LeaderElector) observe(lease *coordv1.Lease, now time.Time) {
	le.mu.Lock()
	if le.observed == nil || ResourceVersion(le.observed) != ResourceVersion(lease) {
		le.observed = lease
		le.observedTime = now
	}
	holder := lease.GetSpec().GetHolderIdentity()
	changed := holder != le.leader
	le.leader = holder
	le.mu.Unlock()
	if changed && holder != "" && le.cfg.Callbacks.OnNewLeader != nil {
		le.cfg.Callbacks.OnNewLeader(holder)
	}
}

// release gives the lease up if this candidate still holds it.
func (le *LeaderElector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), le.cfg.RenewDeadline)
	defer cancel()
	le.mu.Lock()
	lease := le.observed
	le.mu.Unlock()
	if lease == nil || lease.GetSpec().GetHolderIdentity() != le.cfg.Identity {
		return
	}
	next := proto.Clone(lease).(*coordv1.Lease)
	next.Spec.HolderIdentity = proto.String("")
	next.Spec.LeaseDurationSeconds = proto.Int32(1)
	next.Spec.RenewTime = timestamppb.Now()
	if _, err := le.cfg.Leases.Update(ctx, next); err != nil {
		le.log.Warn("failed to release the lease", "err", err)
		return
	}
	le.log.Info("released the lease")
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
