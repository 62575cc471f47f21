// This file holds the rolling-upgrade test: a cluster of the previous
// release upgraded to this build one member at a time while clients write.

package robustness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/raftstore/fsm"
)

// previousRelease is the commit the rolling upgrade starts from: the last
// one before the cluster version existed (CHANGELOG.md, v0.20.0). Its
// members answer the peer Version call Unimplemented and write only
// Version1 formats.
const previousRelease = "aac8932"

// buildPrevious builds `kplane` at previousRelease from this repository's
// history (git archive, then go build with the module cache) into dir.
func buildPrevious(t *testing.T, dir string) string {
	t.Helper()
	git := testutil.RequireBinary(t, "git", "apt-get install -y git")
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if err := exec.Command(git, "-C", root, "cat-file", "-e", previousRelease+"^{commit}").Run(); err != nil {
		msg := fmt.Sprintf("commit %s is not in this clone's history (a shallow clone?): %v", previousRelease, err)
		if testutil.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, "src.tar")
	if out, err := exec.Command(git, "-C", root, "archive", "--format=tar", "-o", tarball, previousRelease).CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", previousRelease, err, out)
	}
	if out, err := exec.Command("tar", "-x", "-f", tarball, "-C", src).CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v\n%s", previousRelease, err, out)
	}
	bin := filepath.Join(dir, "kplane-"+previousRelease)
	build := exec.Command("go", "build", "-o", bin, "./cmd/kplane")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build kplane at %s: %v\n%s", previousRelease, err, out)
	}
	return bin
}

// clusterVersions asks every member for the cluster version it applied.
func clusterVersions(ctx context.Context, c *Cluster) ([]uint32, error) {
	var out []uint32
	for i := range c.Members() {
		conn, err := c.Conn(i)
		if err != nil {
			return nil, err
		}
		v := new(wrapperspb.UInt32Value)
		if err := conn.Invoke(ctx, "/kplane.raftstore.v1.Peer/ClusterVersion", &emptypb.Empty{}, v); err != nil {
			return nil, fmt.Errorf("%s: %w", c.Members()[i].Name, err)
		}
		out = append(out, v.GetValue())
	}
	return out, nil
}

// TestRollingUpgrade starts a 3-member store of the previous release and,
// under the chaos traffic (puts, CAS transactions, deletes, linearizable
// gets, pinned readers), upgrades its members to this build one at a time
// (SIGKILL, restart on the same data with the new binary), with leader kills
// and a snapshot catch-up while the versions are mixed. Every check of the
// chaos run must pass (porcupine, no acknowledged write lost, convergence,
// watches), and once every member runs this build the cluster version rises
// to this build's on every member.
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release and runs a 3-member store")
	}
	flavor := kplaneFlavor(t)
	current := flavor.Binary
	flavor.Binary = buildPrevious(t, t.TempDir())
	plan := []Fault{Upgrade, KillLeader, SnapshotCatchUp, Upgrade, KillLeader, Upgrade, KillLeader}
	res := runScenario(t, flavor, plan, TrafficConfig{Clients: 6, PinnedReaders: 3, Rate: 150}, func(s *Scenario) {
		s.Faults.UpgradeBinary = current
		s.Check = func(ctx context.Context, c *Cluster) error {
			var vs []uint32
			var err error
			for range 100 { // the leader asks every 2 s
				if vs, err = clusterVersions(ctx, c); err == nil && allEqual(vs, fsm.Version) {
					return nil
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
			return errors.Join(err, fmt.Errorf("cluster versions after the upgrade: %v, want %d on every member", vs, fsm.Version))
		}
	})
	if res.Err != nil {
		t.Errorf("the rolling upgrade failed the checks: %v", res.Err)
	}
	t.Logf("faults: %v", res.Faults.Injected)
}

func allEqual(vs []uint32, want uint32) bool {
	for _, v := range vs {
		if v != want {
			return false
		}
	}
	return len(vs) > 0
}
