// This file holds the fault injector and the write-unavailability probe.

package robustness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
)

// Fault is one kind of failure the injector can cause.
type Fault string

// The faults. Each one leaves the cluster with all members running again.
const (
	// KillLeader SIGKILLs the leader, measures the write unavailability
	// (kill → first acknowledged write), then restarts it.
	KillLeader Fault = "kill-leader"
	// KillRandom SIGKILLs a random member and restarts it.
	KillRandom Fault = "kill-random"
	// PauseLeader SIGSTOPs the leader for longer than the election timeout,
	// then SIGCONTs it: it comes back believing it leads.
	PauseLeader Fault = "pause-leader"
	// MoveLeader transfers leadership to a random follower.
	MoveLeader Fault = "move-leader"
	// RemoveReAdd removes a random follower, wipes it and adds it back.
	RemoveReAdd Fault = "remove-readd"
	// SnapshotCatchUp keeps a follower down while SnapshotWrites writes go
	// in (outside the history), so that it must catch up from a snapshot.
	SnapshotCatchUp Fault = "snapshot-catchup"
	// Upgrade SIGKILLs the first member not yet running
	// FaultConfig.UpgradeBinary and restarts it on its data with that
	// binary: one step of a rolling upgrade.
	Upgrade Fault = "upgrade"
)

// FaultConfig says which faults to inject and how.
type FaultConfig struct {
	// Plan is the sequence of faults, injected one after the other.
	Plan []Fault
	// Interval is the quiet time between two faults.
	Interval time.Duration
	// PauseFor is how long PauseLeader keeps the leader stopped; it must
	// exceed the election timeout.
	PauseFor time.Duration
	// SnapshotWrites is how many writes SnapshotCatchUp sends (to BurstKey,
	// recorded in the history) while the member is down.
	SnapshotWrites int
	// BurstKey is the history key of those writes; BurstClient the first
	// history client ID of their writers.
	BurstKey    int
	BurstClient int
	// ProbeKey is the history key that the unavailability probe writes.
	ProbeKey int
	// ProbeClient is the history client ID of the probe.
	ProbeClient int
	// UpgradeBinary is what Upgrade restarts members with.
	UpgradeBinary string
}

// FaultReport says what was injected and what it cost.
type FaultReport struct {
	Injected []string
	// Unavailability holds, per leader kill, the time from the SIGKILL to
	// the first acknowledged write.
	Unavailability []time.Duration
}

// InjectFaults runs the plan against the cluster while traffic runs. The
// unavailability probe records its writes in h.
func InjectFaults(ctx context.Context, c *Cluster, h *History, cfg FaultConfig) (FaultReport, error) {
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.PauseFor == 0 {
		cfg.PauseFor = 3 * time.Second
	}
	var rep FaultReport
	cli, err := NewClient(c.Endpoints())
	if err != nil {
		return rep, err
	}
	defer cli.Close()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	seq := 0
	for n, f := range cfg.Plan {
		select {
		case <-ctx.Done():
			return rep, nil
		case <-time.After(cfg.Interval):
		}
		leader, err := c.Leader(ctx)
		if err != nil {
			return rep, fmt.Errorf("fault %d (%s): %w", n, f, err)
		}
		follower := randomOther(rng, len(c.Members()), leader)
		switch f {
		case KillLeader:
			if err := c.Kill(leader); err != nil {
				return rep, err
			}
			killed := time.Now()
			d, err := probeWrite(ctx, cli, h, cfg.ProbeClient, cfg.ProbeKey, &seq, killed)
			if err != nil {
				return rep, fmt.Errorf("fault %d (%s): %w", n, f, err)
			}
			rep.Unavailability = append(rep.Unavailability, d)
			if err := c.Restart(ctx, leader); err != nil {
				return rep, err
			}
		case KillRandom:
			victim := rng.IntN(len(c.Members()))
			if err := c.Kill(victim); err != nil {
				return rep, err
			}
			if err := c.Restart(ctx, victim); err != nil {
				return rep, err
			}
		case PauseLeader:
			if err := c.Pause(leader); err != nil {
				return rep, err
			}
			select {
			case <-ctx.Done():
			case <-time.After(cfg.PauseFor):
			}
			if err := c.Resume(leader); err != nil {
				return rep, err
			}
		case MoveLeader:
			if err := c.MoveLeader(ctx, leader, follower); err != nil {
				return rep, err
			}
		case RemoveReAdd:
			if err := c.RemoveAndReAdd(ctx, follower, leader); err != nil {
				return rep, err
			}
		case SnapshotCatchUp:
			if err := snapshotCatchUp(ctx, c, cli, h, cfg, n, leader, follower); err != nil {
				return rep, fmt.Errorf("fault %d (%s): %w", n, f, err)
			}
		case Upgrade:
			victim := slices.IndexFunc(c.Members(), func(m *Member) bool { return c.binaryOf(m) != cfg.UpgradeBinary })
			if cfg.UpgradeBinary == "" || victim < 0 {
				return rep, fmt.Errorf("fault %d (%s): no binary to upgrade to, or every member runs it", n, f)
			}
			if err := c.Kill(victim); err != nil {
				return rep, err
			}
			c.SetBinary(victim, cfg.UpgradeBinary)
			if err := c.Restart(ctx, victim); err != nil {
				return rep, fmt.Errorf("fault %d (%s): %w", n, f, err)
			}
			rep.Injected = append(rep.Injected, fmt.Sprintf("%s(%s, leader=%s)", f, c.Members()[victim].Name, c.Members()[leader].Name))
			continue
		default:
			return rep, fmt.Errorf("unknown fault %q", f)
		}
		rep.Injected = append(rep.Injected, fmt.Sprintf("%s(leader=%s)", f, c.Members()[leader].Name))
	}
	return rep, nil
}

// snapshotCatchUp keeps a follower down while cfg.SnapshotWrites writes go
// in, then restarts it. When the flavor says how its logs tell
// (Flavor.SnapshotCompacted and SnapshotInstalled), it makes sure that the
// follower really catches up from a snapshot: before the restart it waits
// (writing more if needed) until the leader truncated its log well past what
// the follower holds, and after the restart it requires the follower to log
// that it installed the leader's snapshot.
func snapshotCatchUp(ctx context.Context, c *Cluster, cli *clientv3.Client, h *History, cfg FaultConfig, n, leader, follower int) error {
	members := c.Members()
	var st *pb.StatusResponse
	var err error
	for try := 0; try < 10; try++ {
		// A member busy catching up after the previous fault may be slow
		// to answer.
		if st, err = c.Status(ctx, follower); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("status of %s: %w", members[follower].Name, err)
	}
	// The follower may hold a little more than it knows committed; the
	// leader must have dropped entries beyond that margin as well.
	const margin = 300
	needed := st.RaftIndex + margin
	leaderMark := logSize(members[leader].LogPath)
	if err := c.Kill(follower); err != nil {
		return err
	}
	firstClient := cfg.BurstClient + 8*n
	if err := burst(ctx, cli, h, firstClient, 0, cfg.BurstKey, cfg.SnapshotWrites); err != nil {
		return err
	}
	compacted, installed := c.flavor.SnapshotCompacted, c.flavor.SnapshotInstalled
	if compacted != nil && installed != nil {
		written := cfg.SnapshotWrites
		for extra := 1; ; extra++ {
			if waitLog(ctx, members[leader].LogPath, leaderMark, 5*time.Second, func(line string) bool {
				m := compacted.FindStringSubmatch(line)
				if m == nil {
					return false
				}
				to, err := strconv.ParseUint(m[1], 10, 64)
				return err == nil && to >= needed
			}) {
				break
			}
			if extra > 5 {
				return fmt.Errorf("leader %s did not truncate its log past index %d after %d writes", members[leader].Name, needed, written)
			}
			// Not enough entries since the last snapshot: write more.
			if err := burst(ctx, cli, h, firstClient, extra, cfg.BurstKey, cfg.SnapshotWrites/2); err != nil {
				return err
			}
			written += cfg.SnapshotWrites / 2
		}
	}
	followerMark := logSize(members[follower].LogPath)
	if err := c.Restart(ctx, follower); err != nil {
		return err
	}
	if compacted != nil && installed != nil {
		if !waitLog(ctx, members[follower].LogPath, followerMark, 30*time.Second, installed.MatchString) {
			return fmt.Errorf("member %s caught up without installing a snapshot (no %q in its log)", members[follower].Name, installed)
		}
	}
	return nil
}

// logSize returns the size of the file at path (0 if it cannot be read).
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// waitLog reports whether a line of the file at path past offset from
// satisfies match within d.
func waitLog(ctx context.Context, path string, from int64, d time.Duration, match func(string) bool) bool {
	deadline := time.Now().Add(d)
	for {
		if f, err := os.Open(path); err == nil {
			_, err = f.Seek(from, io.SeekStart)
			if err == nil {
				sc := bufio.NewScanner(f)
				sc.Buffer(make([]byte, 64*1024), 1<<20)
				for sc.Scan() {
					if match(sc.Text()) {
						f.Close()
						return true
					}
				}
			}
			f.Close()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func randomOther(rng *rand.Rand, n, not int) int {
	i := rng.IntN(n - 1)
	if i >= not {
		i++
	}
	return i
}

// probeWrite writes the probe key until a write is acknowledged (each
// attempt with a 500 ms deadline, for at most 30 s) and returns the time
// from since to that acknowledgement. The writes are recorded in h.
func probeWrite(ctx context.Context, cli *clientv3.Client, h *History, client, key int, seq *int, since time.Time) (time.Duration, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		*seq++
		in := Input{Kind: OpPut, Key: key, Value: fmt.Sprintf("probe-%d", *seq)}
		out := Do(ctx, cli, h, client, in, 500*time.Millisecond)
		if !out.Unknown {
			return time.Since(since), nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("no write acknowledged within 30 s of the leader kill")
}

// burst sends n puts to the history's burst key from eight concurrent
// writers, each one request at a time, recorded in h like any traffic.
// round tells apart the bursts of one fault (every written value is unique).
func burst(ctx context.Context, cli *clientv3.Client, h *History, firstClient, round, key, n int) error {
	var failures atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for w := range 8 {
		g.Go(func() error {
			for i := w; i < n; i += 8 {
				in := Input{Kind: OpPut, Key: key, Value: fmt.Sprintf("burst%d.%d-%d", firstClient, round, i)}
				if out := Do(ctx, cli, h, firstClient+w, in, 2*time.Second); out.Unknown {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if failures.Add(1) > 100 {
						return fmt.Errorf("burst: more than 100 writes failed")
					}
				}
			}
			return nil
		})
	}
	return g.Wait()
}
