// This file holds the tests of the supervisor: a killed process is
// restarted, and one that keeps failing is restarted with backoff.

package localcluster

import (
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/testutil"
)

// supervised starts sh -c script under s and returns it.
func supervised(t *testing.T, s *supervisor, script string) *proc {
	t.Helper()
	p := &proc{}
	log := filepath.Join(t.TempDir(), "p.log")
	start := func() error { return p.run("/bin/sh", []string{"-c", script}, nil, log) }
	if err := start(); err != nil {
		t.Fatal(err)
	}
	s.watch("p", log, p, start)
	return p
}

// TestSuperviseRestartsKilled kills a running process with SIGKILL: the
// supervisor starts a new one (another PID), counts the restart and
// reports it; once stopped, it restarts nothing.
func TestSuperviseRestartsKilled(t *testing.T) {
	var reported atomic.Int32
	s := newSupervisor(RestartPolicy{Backoff: 10 * time.Millisecond}, slog.New(slog.DiscardHandler), func() { reported.Add(1) })
	p := supervised(t, s, "exec sleep 60")
	defer p.Kill()
	for i := 1; i <= 2; i++ {
		old := p.PID()
		p.Kill()
		testutil.EventuallyWithin(t, 10*time.Second, "a new incarnation", func() bool { return p.Running() && p.PID() != old })
		if got := p.Restarts(); got != i {
			t.Errorf("after kill %d: %d restarts counted", i, got)
		}
	}
	if reported.Load() != 2 {
		t.Errorf("restarted reported %d times, want 2", reported.Load())
	}
	// stop returns once every supervising goroutine has, and Kill once the
	// process has exited: nothing is left that could restart it, so what
	// follows is the final state, not a guess after a pause.
	s.stop()
	pid := p.PID()
	p.Kill()
	if p.Running() || p.PID() != pid || p.Restarts() != 2 {
		t.Errorf("after stop: running %v, pid %d (was %d), %d restarts; want nothing restarted", p.Running(), p.PID(), pid, p.Restarts())
	}
}

// TestSuperviseBackoff runs a process that fails at once: it is restarted
// again and again, each time after a longer wait up to the cap, while one
// that exits cleanly is left down (restart on failure only).
func TestSuperviseBackoff(t *testing.T) {
	s := newSupervisor(RestartPolicy{Backoff: 20 * time.Millisecond, MaxBackoff: 80 * time.Millisecond, ResetAfter: time.Hour},
		slog.New(slog.DiscardHandler), nil)
	failing := supervised(t, s, "exit 3")
	clean := supervised(t, s, "exit 0")
	// Waits of 20, 40, 80, 80 ms: four restarts take at least 220 ms
	// (no upper bound is asserted: the machine may be slow).
	start := time.Now()
	testutil.EventuallyWithin(t, 10*time.Second, "four restarts", func() bool { return failing.Restarts() >= 4 })
	if d := time.Since(start); d < 220*time.Millisecond {
		t.Errorf("four restarts in %v: the backoff does not grow", d)
	}
	s.stop()
	if clean.Restarts() != 0 {
		t.Errorf("a clean exit was restarted %d times", clean.Restarts())
	}
	if status, failed := clean.exitStatus(); failed {
		t.Errorf("clean exit: %s counted as a failure", status)
	}
}
