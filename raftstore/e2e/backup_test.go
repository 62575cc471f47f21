// This file holds the backup and restore of a store run as `kplane store`
// processes, through the commands a user runs: etcdctl snapshot save (or
// etcd's snapshot package, which etcdctl runs), kplane store snapshot
// status and kplane store snapshot restore.

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/kplane/kplane/internal/testutil"
)

// TestBackupRestoreCLI backs up a 3-member store, stops it, wipes every
// member's data directory, restores each in place with kplane store snapshot
// restore and starts the members again with their original flags: the keys
// are back at their revisions, and the cluster takes writes.
func TestBackupRestoreCLI(t *testing.T) {
	testutil.SkipShort(t, "runs a store of `kplane store` processes of the built binary")
	c := startCluster(t)
	cli := newClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 20 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/backup/k%02d", i%8), fmt.Sprint(i)); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
	want, err := cli.Get(ctx, "/backup/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(t.TempDir(), "backup.db")
	endpoint := strings.TrimPrefix(c.Members[0].ClientURL, "http://")
	// A linearizable read through the member first makes it apply every
	// acknowledged write: it serves the snapshot from its own state.
	mc, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, err := mc.Get(ctx, "/backup/k00"); err != nil {
		t.Fatal(err)
	}
	saveSnapshot(ctx, t, endpoint, file)

	out, err := exec.CommandContext(ctx, kplaneBin, "store", "snapshot", "status", file, "-w", "json").Output()
	if err != nil {
		t.Fatalf("kplane store snapshot status: %v", err)
	}
	var st struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status output %q: %v", out, err)
	}
	if st.Revision != want.Header.Revision {
		t.Fatalf("snapshot revision %d, want the acknowledged %d", st.Revision, want.Header.Revision)
	}

	c.Stop()
	var initial []string
	for _, m := range c.Members {
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		if err := os.RemoveAll(m.DataDir); err != nil {
			t.Fatal(err)
		}
		restore := exec.CommandContext(ctx, kplaneBin, "store", "snapshot", "restore", file,
			"--name", m.Name, "--data-dir", m.DataDir,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-advertise-peer-urls", m.PeerURL)
		if out, err := restore.CombinedOutput(); err != nil {
			t.Fatalf("kplane store snapshot restore for %s: %v\n%s", m.Name, err, out)
		}
	}
	for _, m := range c.Members {
		if err := c.StartMember(m); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, c)

	got, err := cli.Get(ctx, "/backup/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("get after restore: %v", err)
	}
	type kv struct {
		Key, Value string
		Mod        int64
	}
	summary := func(r *clientv3.GetResponse) []kv {
		var out []kv
		for _, x := range r.Kvs {
			out = append(out, kv{string(x.Key), string(x.Value), x.ModRevision})
		}
		return out
	}
	if diff := cmp.Diff(summary(want), summary(got)); diff != "" {
		t.Errorf("keys after restore (-before +after):\n%s", diff)
	}
	// waitReady's put is the first write after the restore.
	if got.Header.Revision != st.Revision+1 {
		t.Errorf("revision after restore and one write: %d, want %d", got.Header.Revision, st.Revision+1)
	}
}

// saveSnapshot saves a snapshot of the member at endpoint to file with
// etcdctl when it is installed, else with etcd's snapshot package (the code
// etcdctl snapshot save runs).
func saveSnapshot(ctx context.Context, t *testing.T, endpoint, file string) {
	t.Helper()
	if etcdctl, err := exec.LookPath("etcdctl"); err == nil {
		cmd := exec.CommandContext(ctx, etcdctl, "--endpoints="+endpoint, "snapshot", "save", file)
		cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
		}
		return
	}
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: []string{endpoint}}, file); err != nil {
		t.Fatalf("save snapshot: %v", err)
	}
}
