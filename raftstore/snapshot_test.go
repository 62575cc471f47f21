// This file holds the disaster drill: a 3-member cluster backed up with the
// etcd client's Snapshot (and etcdctl snapshot save), lost entirely, and
// restored into 3 new members from the file.

package raftstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/raftstore"
	"github.com/kplane/kplane/raftstore/backup"
	"github.com/kplane/kplane/raftstore/mvcc"
)

// TestSnapshotDisasterDrill writes keys, takes a snapshot, stops every member
// and deletes their data, restores 3 new members from the snapshot and checks
// that the new cluster holds what was acknowledged before the snapshot, at
// the same revisions, and carries on from there.
func TestSnapshotDisasterDrill(t *testing.T) {
	old := newCluster(t, 3, clusterOptions{})
	ctx := ctxT(t)
	cli := old.waitLeader().client

	// A history: puts, overwrites, a deletion, a compaction, a leased key.
	for i := range 30 {
		putRetry(ctx, t, cli, fmt.Sprintf("/drill/k%02d", i%12), fmt.Sprintf("v%d", i))
	}
	if _, err := cli.Delete(ctx, "/drill/k03"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	mid, err := cli.Get(ctx, "/drill/k00")
	if err != nil {
		t.Fatal(err)
	}
	compactRev := mid.Header.Revision - 5
	if _, err := cli.Compact(ctx, compactRev); err != nil {
		t.Fatalf("compact: %v", err)
	}
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	if _, err := cli.Put(ctx, "/drill/leased", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatalf("put with lease: %v", err)
	}
	for i := range 5 {
		putRetry(ctx, t, cli, fmt.Sprintf("/drill/late%d", i), "y")
	}
	// Everything acknowledged so far, as the leader answers it.
	acked, err := cli.Get(ctx, "/drill/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	snapRev := acked.Header.Revision

	// The snapshot comes from a follower: a linearizable read through it
	// first makes it apply everything acknowledged.
	from := old.followers()[0]
	endpoint := strings.TrimPrefix(from.cfg.ListenClientURLs[0], "http://")
	if _, err := from.client.Get(ctx, "/drill/k00"); err != nil {
		t.Fatal(err)
	}
	hash, err := from.client.HashKV(ctx, endpoint, 0)
	if err != nil {
		t.Fatalf("hashkv: %v", err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "backup.db")
	saveWithClient(ctx, t, from.client, file)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	st, err := backup.ReadStatus(data)
	if err != nil {
		t.Fatalf("status of the snapshot: %v", err)
	}
	if st.Revision != snapRev || st.Hash != hash.Hash {
		t.Fatalf("snapshot status: got revision %d hash %x, want %d %x (the member's HashKV)", st.Revision, st.Hash, snapRev, hash.Hash)
	}

	// What etcdctl snapshot save does (etcd's client/v3/snapshot package,
	// which refuses a stream that does not end in a hash): the same bytes.
	t.Run("etcd snapshot package", func(t *testing.T) {
		other := filepath.Join(dir, "save.db")
		if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: []string{endpoint}}, other); err != nil {
			t.Fatalf("snapshot.SaveWithVersion: %v", err)
		}
		sameFile(t, other, data)
	})
	t.Run("etcdctl snapshot save", func(t *testing.T) {
		etcdctl, err := exec.LookPath("etcdctl")
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("etcdctl not installed (scripts/install-deps.sh installs it)")
			}
			t.Skip("etcdctl not installed; run scripts/install-deps.sh")
		}
		other := filepath.Join(dir, "etcdctl.db")
		cmd := exec.CommandContext(ctx, etcdctl, "--endpoints="+endpoint, "snapshot", "save", other)
		cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
		}
		sameFile(t, other, data)
	})

	// The disaster: every member gone with its data.
	for _, m := range old.members {
		old.stop(m)
		if err := os.RemoveAll(m.cfg.DataDir); err != nil {
			t.Fatal(err)
		}
	}

	restored := restoreCluster(t, file, 3)
	rcli := restored.waitLeader().client

	// Every key acknowledged before the snapshot, on every member, with its
	// value and revisions.
	for _, m := range restored.members {
		got, err := m.client.Get(ctx, "/drill/", clientv3.WithPrefix())
		if err != nil {
			t.Fatalf("%s: get: %v", m.cfg.Name, err)
		}
		if got.Header.Revision != snapRev {
			t.Errorf("%s: revision %d, want the snapshot's %d", m.cfg.Name, got.Header.Revision, snapRev)
		}
		if diff := cmp.Diff(kvSummaries(acked.Kvs), kvSummaries(got.Kvs)); diff != "" {
			t.Errorf("%s: keys (-acknowledged +restored):\n%s", m.cfg.Name, diff)
		}
	}
	// The membership is the new one.
	ml, err := rcli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list: %v", err)
	}
	var gotPeers, wantPeers []string
	for _, m := range ml.Members {
		gotPeers = append(gotPeers, m.PeerURLs...)
	}
	for _, m := range restored.members {
		wantPeers = append(wantPeers, m.cfg.InitialAdvertisePeerURL)
	}
	if diff := cmp.Diff(wantPeers, gotPeers, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("member peer URLs (-want +got):\n%s", diff)
	}
	// The history and the compaction point came along.
	if _, err := rcli.Get(ctx, "/drill/k00", clientv3.WithRev(compactRev-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("get below the compaction point: got %v, want %v", err, rpctypes.ErrCompacted)
	}
	if old, err := rcli.Get(ctx, "/drill/k03", clientv3.WithRev(compactRev)); err != nil || len(old.Kvs) != 1 {
		t.Errorf("get of a deleted key at an older revision: got %v (%v), want its value", old, err)
	}
	// The lease is back with its key, and counts down from its full TTL.
	ttl, err := rcli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatalf("time to live: %v", err)
	}
	if ttl.GrantedTTL != 600 || ttl.TTL <= 0 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "/drill/leased" {
		t.Errorf("lease: got granted %d, TTL %d, keys %q; want 600, > 0, [/drill/leased]", ttl.GrantedTTL, ttl.TTL, ttl.Keys)
	}

	// Writes go on above the snapshot's revision, and a watch from the
	// current revision sees them.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := restored.members[2].client.Watch(wctx, "/drill/new", clientv3.WithPrefix(), clientv3.WithRev(snapRev+1))
	put, err := rcli.Put(ctx, "/drill/new", "1")
	if err != nil {
		t.Fatalf("put after restore: %v", err)
	}
	if put.Header.Revision != snapRev+1 {
		t.Errorf("put after restore: revision %d, want %d", put.Header.Revision, snapRev+1)
	}
	select {
	case wr := <-wch:
		if err := wr.Err(); err != nil {
			t.Fatalf("watch: %v", err)
		}
		if len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != "/drill/new" || wr.Events[0].Kv.ModRevision != snapRev+1 {
			t.Fatalf("watch: got %v, want the put at %d", wr.Events, snapRev+1)
		}
	case <-ctx.Done():
		t.Fatalf("watch: no event before the test's deadline")
	}
}

// TestSnapshotIsPointInTime holds a snapshot stream open after its first
// message while writes go on: the writes succeed, and the snapshot is of the
// revision it started at. The stream's messages count RemainingBytes down to
// the hash, which ends it in a message of its own, as etcd's do.
func TestSnapshotIsPointInTime(t *testing.T) {
	c := newCluster(t, 1, clusterOptions{})
	ctx := ctxT(t)
	cli := c.members[0].client
	// Several times what one message carries.
	big := strings.Repeat("v", 64<<10)
	for i := range 20 {
		putRetry(ctx, t, cli, fmt.Sprintf("/pit/k%02d", i), big)
	}
	start, err := cli.Get(ctx, "/pit/k00")
	if err != nil {
		t.Fatal(err)
	}
	startRev := start.Header.Revision

	stream, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Snapshot(ctx, &pb.SnapshotRequest{})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("first message: %v", err)
	}
	// Writes while the snapshot is being sent.
	for i := range 5 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/pit/k%02d", i), "changed"); err != nil {
			t.Fatalf("put during the snapshot: %v", err)
		}
	}
	if _, err := cli.Put(ctx, "/pit/new", "x"); err != nil {
		t.Fatalf("put during the snapshot: %v", err)
	}

	msgs := []*pb.SnapshotResponse{first}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		msgs = append(msgs, m)
	}
	var content []byte
	for i, m := range msgs[:len(msgs)-1] {
		content = append(content, m.Blob...)
		if m.Version == "" {
			t.Errorf("message %d: no version", i)
		}
		if want := uint64(int(first.RemainingBytes) + len(first.Blob) - len(content)); m.RemainingBytes != want {
			t.Errorf("message %d: RemainingBytes %d, want %d", i, m.RemainingBytes, want)
		}
	}
	last := msgs[len(msgs)-1]
	sum := sha256.Sum256(content)
	if last.RemainingBytes != 0 || !bytes.Equal(last.Blob, sum[:]) {
		t.Errorf("last message: RemainingBytes %d, blob %x; want 0 and the SHA-256 %x", last.RemainingBytes, last.Blob, sum)
	}
	if len(msgs) < 3 {
		t.Errorf("%d messages, want the file in several chunks and then the hash", len(msgs))
	}

	data := append(content, last.Blob...)
	st, err := backup.ReadStatus(data)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if st.Revision != startRev {
		t.Errorf("snapshot revision %d, want %d (the revision when it was taken)", st.Revision, startRev)
	}
	body, err := backup.Decode(data, false)
	if err != nil {
		t.Fatal(err)
	}
	s := mvcc.New(mvcc.Config{})
	defer s.Close()
	if err := s.Restore(bytes.NewReader(body)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	got, err := s.Range(&pb.RangeRequest{Key: []byte("/pit/"), RangeEnd: []byte("/pit0")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 20 {
		t.Errorf("snapshot holds %d keys under /pit/, want the 20 written before it", len(got.Kvs))
	}
	for _, kv := range got.Kvs {
		if string(kv.Value) != big {
			t.Errorf("%s: a value written after the snapshot started (mod revision %d)", kv.Key, kv.ModRevision)
		}
	}
}

// saveWithClient writes what the etcd client's Snapshot streams to path.
func saveWithClient(ctx context.Context, t *testing.T, cli *clientv3.Client, path string) {
	t.Helper()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read snapshot stream: %v", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes, not the %d bytes the client's Snapshot streamed", path, len(got), len(want))
	}
}

// restoreCluster restores n new members (new names, ports and directories)
// from the backup file and starts them.
func restoreCluster(t *testing.T, file string, n int) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t}
	var initial []string
	ports := testutil.FreePorts(t, 2*n)
	for i := range n {
		cfg := memberConfig(t, dir, fmt.Sprintf("r%d", i), ports[2*i], ports[2*i+1], clusterOptions{})
		initial = append(initial, cfg.Name+"="+cfg.InitialAdvertisePeerURL)
		c.members = append(c.members, &member{cfg: cfg})
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
		_, err := raftstore.Restore(raftstore.RestoreConfig{
			SnapshotPath:            file,
			Name:                    m.cfg.Name,
			DataDir:                 m.cfg.DataDir,
			InitialCluster:          m.cfg.InitialCluster,
			InitialAdvertisePeerURL: m.cfg.InitialAdvertisePeerURL,
			InitialClusterToken:     "restored",
		})
		if err != nil {
			t.Fatalf("restore %s: %v", m.cfg.Name, err)
		}
	}
	for _, m := range c.members {
		c.start(m)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			c.stop(m)
		}
	})
	c.waitLeader()
	return c
}

// kvSummary is what a restore must keep of a KeyValue.
type kvSummary struct {
	Key, Value                       string
	CreateRevision, ModRevision, Ver int64
	Lease                            int64
}

func kvSummaries(kvs []*mvccpb.KeyValue) []kvSummary {
	out := make([]kvSummary, len(kvs))
	for i, kv := range kvs {
		out[i] = kvSummary{string(kv.Key), string(kv.Value), kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease}
	}
	return out
}
