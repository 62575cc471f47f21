// This file holds the supervisor of `kplane up`: like systemd's
// Restart=on-failure or the kubelet's restart policy, it restarts a
// process that fails (a non-zero exit, e.g. a scheduler or controller
// manager that lost its Lease, or a signal such as SIGKILL), after a
// backoff that doubles with every failure in a row.

package localcluster

import (
	"log/slog"
	"sync"
	"time"
)

// RestartPolicy is how the supervisor restarts a failed process: after
// Backoff the first time, then doubling up to MaxBackoff while the process
// keeps failing; a process that ran for ResetAfter before failing starts
// again from Backoff. (Docker's restart policy uses 100 ms, doubling, and
// resets after 10 s of running; the kubelet 10 s, 5 min and 10 min.)
type RestartPolicy struct {
	Backoff, MaxBackoff, ResetAfter time.Duration
}

// The default restart policy restarts within 100 ms first (the cluster
// runs with one replica fewer until then), caps at 30 s, and resets after
// 10 s of running.
const (
	DefaultRestartBackoff    = 100 * time.Millisecond
	DefaultRestartMaxBackoff = 30 * time.Second
	DefaultRestartResetAfter = 10 * time.Second
)

func (rp RestartPolicy) withDefaults() RestartPolicy {
	if rp.Backoff <= 0 {
		rp.Backoff = DefaultRestartBackoff
	}
	if rp.MaxBackoff <= 0 {
		rp.MaxBackoff = DefaultRestartMaxBackoff
	}
	rp.MaxBackoff = max(rp.MaxBackoff, rp.Backoff)
	if rp.ResetAfter <= 0 {
		rp.ResetAfter = DefaultRestartResetAfter
	}
	return rp
}

// supervisor watches processes and restarts those that fail until it is
// stopped; it never restarts anything once stop has begun.
type supervisor struct {
	policy RestartPolicy
	log    *slog.Logger
	// restarted is called after each restart (to rewrite the state file).
	restarted func()
	stopping  chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup
}

func newSupervisor(policy RestartPolicy, log *slog.Logger, restarted func()) *supervisor {
	return &supervisor{policy: policy.withDefaults(), log: log, restarted: restarted, stopping: make(chan struct{})}
}

// watch supervises p (named name, logging to logPath); start runs a new
// incarnation.
func (s *supervisor) watch(name, logPath string, p *proc, start func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		backoff := s.policy.Backoff
		for {
			select {
			case <-p.Done():
			case <-s.stopping:
				return
			}
			status, failed := p.exitStatus()
			pid := p.PID()
			if !failed {
				s.log.Warn("process exited cleanly; not restarted (restart on failure only)", "name", name, "pid", pid, "log", logPath)
				return
			}
			ran := time.Since(p.Started())
			if ran >= s.policy.ResetAfter {
				backoff = s.policy.Backoff
			}
			for {
				s.log.Warn("process failed; restarting it", "name", name, "pid", pid, "status", status,
					"ran", ran.Round(time.Millisecond), "backoff", backoff, "log", logPath)
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-s.stopping:
					t.Stop()
					return
				}
				backoff = min(2*backoff, s.policy.MaxBackoff)
				err := start()
				if err == nil {
					break
				}
				status = "restart failed: " + err.Error()
			}
			p.mu.Lock()
			p.restarts++
			n := p.restarts
			p.mu.Unlock()
			s.log.Info("process restarted", "name", name, "pid", p.PID(), "restarts", n)
			if s.restarted != nil {
				s.restarted()
			}
		}
	}()
}

// stop ends supervision and waits until no restart is under way: after
// it returns, the supervisor starts nothing.
func (s *supervisor) stop() {
	s.stopOnce.Do(func() { close(s.stopping) })
	s.wg.Wait()
}
