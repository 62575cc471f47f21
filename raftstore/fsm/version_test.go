// This file holds the tests of the cluster version: the entry that raises
// it and the snapshot format it selects.

package fsm

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func applyClusterVersionEntry(t *testing.T, f *FSM, index uint64, ver string) {
	t.Helper()
	req := &pb.InternalRaftRequest{ID: index}
	req.ClusterVersionSet = ClusterVersionRequest(1)
	req.ClusterVersionSet.Ver = ver
	data, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
}

func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// TestClusterVersionSelectsSnapshotFormat: a new FSM is at Version1 and
// writes v1 snapshots (which an older member installs); the cluster version
// entry raises it, never lowers it, and from Version2 snapshots are v2 and
// carry it through a restore.
func TestClusterVersionSelectsSnapshotFormat(t *testing.T) {
	f := newFSM(t)
	f.ApplyBatch(randomLog(t, 3, 1, 50))
	if got := f.ClusterVersion(); got != Version1 {
		t.Fatalf("a new FSM's cluster version: %d, want %d", got, Version1)
	}
	if b := snapshotBytes(t, f); !bytes.HasPrefix(b, []byte(snapshotMagicV1)) {
		t.Errorf("snapshot at Version1 starts %q, want the v1 magic", b[:14])
	}
	applyClusterVersionEntry(t, f, 51, "2")
	applyClusterVersionEntry(t, f, 52, "1") // no downgrade
	applyClusterVersionEntry(t, f, 53, "x") // ignored, on every member alike
	if got := f.ClusterVersion(); got != Version2 {
		t.Fatalf("cluster version after the entries: %d, want %d", got, Version2)
	}
	b := snapshotBytes(t, f)
	if !bytes.HasPrefix(b, []byte(snapshotMagicV2)) {
		t.Errorf("snapshot at Version2 starts %q, want the v2 magic", b[:14])
	}
	g := newFSM(t)
	if err := g.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	if g.ClusterVersion() != Version2 || g.Applied() != 53 || hashOf(t, g) != hashOf(t, f) {
		t.Errorf("restored: version %d applied %d, want %d and 53 and the same state", g.ClusterVersion(), g.Applied(), Version2)
	}

	// A v1 snapshot restores Version1 (the cluster version at that point).
	h := newFSM(t)
	h.ApplyBatch(randomLog(t, 3, 1, 50))
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, h)))); err != nil {
		t.Fatal(err)
	}
	if g.ClusterVersion() != Version1 {
		t.Errorf("after restoring a v1 snapshot: version %d, want %d", g.ClusterVersion(), Version1)
	}

	// A snapshot from a newer build is refused by name.
	future := append([]byte("kplane-fsm-v9\n"), b[len(snapshotMagicV2):]...)
	err := g.Restore(io.NopCloser(bytes.NewReader(future)))
	if err == nil || !strings.Contains(err.Error(), "newer than this build reads") {
		t.Errorf("restoring a v9 snapshot: %v, want a refusal naming the format", err)
	}
}

// TestCheckRequestClusterVersion: a forwarded cluster version entry must
// name a version this build reads.
func TestCheckRequestClusterVersion(t *testing.T) {
	for ver, ok := range map[string]bool{"1": true, "2": true, "3": false, "0": false, "": false, "two": false} {
		req := &pb.InternalRaftRequest{ID: 1, ClusterVersionSet: ClusterVersionRequest(1)}
		req.ClusterVersionSet.Ver = ver
		if err := CheckRequest(req); (err == nil) != ok {
			t.Errorf("CheckRequest(ver %q): %v, want ok=%v", ver, err, ok)
		}
	}
}
