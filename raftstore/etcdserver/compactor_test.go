// This file tests auto-compaction's flags and schedule against a fake clock
// and fake store; raftstore's cluster tests run it on real members.

package etcdserver

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kplane/kplane/raftstore/mvcc"
)

func TestParseAutoCompaction(t *testing.T) {
	tests := []struct {
		name      string
		mode      string
		retention string
		want      AutoCompaction
		wantErr   string
	}{
		{name: "default is off", mode: "periodic", retention: "0", want: AutoCompaction{Mode: "periodic"}},
		{name: "empty retention is off", mode: "revision", retention: "", want: AutoCompaction{Mode: "revision"}},
		{name: "periodic duration", mode: "periodic", retention: "30m", want: AutoCompaction{Mode: "periodic", Retention: 30 * time.Minute}},
		{name: "periodic bare number is hours", mode: "periodic", retention: "2", want: AutoCompaction{Mode: "periodic", Retention: 2 * time.Hour}},
		{name: "revision count", mode: "revision", retention: "1000", want: AutoCompaction{Mode: "revision", Revisions: 1000}},
		{name: "unknown mode", mode: "daily", retention: "1h", wantErr: `--auto-compaction-mode "daily": want "periodic" or "revision"`},
		{name: "empty mode", mode: "", retention: "1h", wantErr: `--auto-compaction-mode ""`},
		{name: "revision with a duration", mode: "revision", retention: "5m", wantErr: "revision mode keeps a whole number of revisions"},
		{name: "negative revisions", mode: "revision", retention: "-3", wantErr: "revision mode keeps a whole number of revisions"},
		{name: "periodic garbage", mode: "periodic", retention: "soon", wantErr: `--auto-compaction-retention "soon": want a duration`},
		{name: "periodic negative duration", mode: "periodic", retention: "-1h", wantErr: "must not be negative"},
		{name: "periodic negative hours", mode: "periodic", retention: "-1", wantErr: "hours out of range"},
		{name: "periodic hours overflow", mode: "periodic", retention: "9999999999", wantErr: "hours out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAutoCompaction(tt.mode, tt.retention)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v", err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if wantOn := tt.want.Retention > 0 || tt.want.Revisions > 0; got.Enabled() != wantOn {
				t.Errorf("Enabled() = %v, want %v", got.Enabled(), wantOn)
			}
		})
	}
}

// fakeMember is the store and Raft state an autoCompactor sees.
type fakeMember struct {
	rev     atomic.Int64
	leading atomic.Bool
	mu      sync.Mutex
	calls   []int64 // the revisions compacted at, in order
	failing bool    // compactions fail
}

func (m *fakeMember) compact(_ context.Context, rev int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, rev)
	if m.failing {
		return errTimeout
	}
	return nil
}

func (m *fakeMember) compactions() []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int64(nil), m.calls...)
}

// startCompactor runs an autoCompactor on m and clk until the test ends.
func startCompactor(t *testing.T, cfg AutoCompaction, m *fakeMember, clk *clocktesting.FakeClock) {
	t.Helper()
	c := &autoCompactor{cfg: cfg, clock: clk, log: slog.New(slog.DiscardHandler),
		rev: m.rev.Load, leads: m.leading.Load, compact: m.compact}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitWaiting(t, clk)
}

// waitWaiting waits (bounded) until the compactor waits on clk again, i.e.
// it finished what the last step of the clock set off.
func waitWaiting(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	for range 5000 {
		if clk.HasWaiters() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the compactor never waited on the clock")
}

// step moves clk on by d and waits for the compactor to act on it.
func step(t *testing.T, clk *clocktesting.FakeClock, d time.Duration) {
	t.Helper()
	clk.Step(d)
	waitWaiting(t, clk)
}

func TestPeriodicAutoCompaction(t *testing.T) {
	// A 10m retention samples every minute and compacts to its oldest
	// sample: first once ten minutes have passed (to the revision of ten
	// minutes ago), then every ten minutes (to the one of eleven minutes
	// ago: the window holds a retention's worth of samples beyond the
	// newest, as etcd's does). The revision advances by 100 a minute, so
	// the revision sampled at minute k is 100k+1.
	m := &fakeMember{}
	m.rev.Store(1)
	m.leading.Store(true)
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	startCompactor(t, AutoCompaction{Mode: CompactionModePeriodic, Retention: 10 * time.Minute}, m, clk)
	var got []int64
	for minute := 1; minute <= 30; minute++ {
		m.rev.Add(100)
		step(t, clk, time.Minute)
		got = m.compactions()
		if minute == 9 && len(got) != 0 {
			t.Fatalf("compacted before one retention passed: %v", got)
		}
	}
	// Minute 10 compacts to minute 0's revision, 20 to 9's, 30 to 19's.
	if want := []int64{1, 901, 1901}; !cmp.Equal(got, want) {
		t.Errorf("compacted at %v, want %v", got, want)
	}
}

func TestPeriodicAutoCompactionLongRetention(t *testing.T) {
	// A retention over an hour samples every 6 minutes, compacts hourly,
	// and each time to the revision of one retention (here 2h) ago.
	m := &fakeMember{}
	m.rev.Store(1)
	m.leading.Store(true)
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	startCompactor(t, AutoCompaction{Mode: CompactionModePeriodic, Retention: 2 * time.Hour}, m, clk)
	for range 40 { // 4 hours, 6 minutes at a time
		m.rev.Add(6)
		step(t, clk, 6*time.Minute)
	}
	// At 2h the revision of 0h, at 3h that of 0h54m, at 4h that of 1h54m
	// (the oldest of 21 samples); the revision advances one per minute.
	if got, want := m.compactions(), []int64{1, 55, 115}; !cmp.Equal(got, want) {
		t.Errorf("compacted at %v, want %v", got, want)
	}
}

func TestRevisionAutoCompaction(t *testing.T) {
	m := &fakeMember{}
	m.rev.Store(1)
	m.leading.Store(true)
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	startCompactor(t, AutoCompaction{Mode: CompactionModeRevision, Revisions: 100}, m, clk)
	steps := []struct {
		rev  int64 // the member's revision at the tick
		want []int64
	}{
		{rev: 50, want: nil},                 // fewer than 100 revisions: nothing to compact
		{rev: 350, want: []int64{250}},       // keeps the last 100
		{rev: 350, want: []int64{250}},       // no new revision: no new compaction
		{rev: 1000, want: []int64{250, 900}}, // next interval, next compaction
		{rev: 1001, want: []int64{250, 900, 901}},
	}
	for i, s := range steps {
		m.rev.Store(s.rev)
		step(t, clk, RevisionCompactionInterval)
		if got := m.compactions(); !cmp.Equal(got, s.want) {
			t.Fatalf("after tick %d at revision %d: compacted at %v, want %v", i+1, s.rev, got, s.want)
		}
	}
	// Less than an interval: nothing happens.
	m.rev.Store(5000)
	step(t, clk, RevisionCompactionInterval-time.Second)
	if got := m.compactions(); len(got) != 3 {
		t.Errorf("compacted before the interval passed: %v", got)
	}
}

func TestAutoCompactionOnlyOnTheLeader(t *testing.T) {
	for _, cfg := range []AutoCompaction{
		{Mode: CompactionModeRevision, Revisions: 10},
		{Mode: CompactionModePeriodic, Retention: 10 * time.Minute},
	} {
		t.Run(cfg.Mode, func(t *testing.T) {
			m := &fakeMember{}
			m.rev.Store(1000)
			clk := clocktesting.NewFakeClock(time.Unix(0, 0))
			startCompactor(t, cfg, m, clk)
			for range 15 {
				m.rev.Add(10)
				step(t, clk, 5*time.Minute)
			}
			if got := m.compactions(); len(got) != 0 {
				t.Fatalf("a follower compacted at %v", got)
			}
			// Leading now, it compacts at its next turn: followers sample too,
			// so it knows the revision of a retention ago.
			m.leading.Store(true)
			step(t, clk, 5*time.Minute)
			if got := m.compactions(); len(got) != 1 {
				t.Fatalf("the new leader compacted at %v, want one compaction", got)
			}
		})
	}
}

func TestAutoCompactionRetriesAfterFailure(t *testing.T) {
	m := &fakeMember{failing: true}
	m.rev.Store(500)
	m.leading.Store(true)
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	startCompactor(t, AutoCompaction{Mode: CompactionModeRevision, Revisions: 100}, m, clk)
	step(t, clk, RevisionCompactionInterval)
	m.mu.Lock()
	m.failing = false
	m.mu.Unlock()
	step(t, clk, RevisionCompactionInterval)
	// The same target again: the first attempt failed.
	if got, want := m.compactions(), []int64{400, 400}; !cmp.Equal(got, want) {
		t.Errorf("compacted at %v, want %v", got, want)
	}
}

func TestAutoCompactionTreatsCompactedAsDone(t *testing.T) {
	var calls atomic.Int32
	c := &autoCompactor{cfg: AutoCompaction{Mode: CompactionModeRevision, Revisions: 1}, clock: clocktesting.NewFakeClock(time.Unix(0, 0)),
		log: slog.New(slog.DiscardHandler),
		compact: func(context.Context, int64) error {
			calls.Add(1)
			return mvcc.ErrCompacted
		}}
	if !c.compactTo(context.Background(), 7) {
		t.Error("compactTo with ErrCompacted: got false, want true (the history is gone either way)")
	}
	if calls.Load() != 1 {
		t.Errorf("compact called %d times, want 1", calls.Load())
	}
}
