// This file holds Restore's refusals: of a bad cluster configuration, a data
// directory in use, and a file that is not a whole kplane backup.

package raftstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kplane/kplane/raftstore"
	"github.com/kplane/kplane/raftstore/backup"
	"github.com/kplane/kplane/raftstore/mvcc"
)

// writeBackup writes a backup of a small store to a file and returns its
// path and bytes.
func writeBackup(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	s := mvcc.New(mvcc.Config{})
	defer s.Close()
	if _, err := s.Put(&pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "backup.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Write(f, s.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, data
}

func TestRestoreRefuses(t *testing.T) {
	dir := t.TempDir()
	good, data := writeBackup(t, dir)
	file := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	truncated := file("truncated.db", data[:len(data)-10])
	flipped := append([]byte(nil), data...)
	flipped[40] ^= 1
	corrupt := file("corrupt.db", flipped)
	used := filepath.Join(dir, "used")
	if err := os.MkdirAll(filepath.Join(used, "raft"), 0o700); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		cfg      raftstore.RestoreConfig
		want     error
		wantText string
	}{
		{
			name:     "name not in the initial cluster",
			cfg:      raftstore.RestoreConfig{SnapshotPath: good, Name: "m9", InitialCluster: "m0=http://127.0.0.1:2380"},
			wantText: `does not name this member "m9"`,
		},
		{
			name:     "peer URL differs from the initial cluster's",
			cfg:      raftstore.RestoreConfig{SnapshotPath: good, Name: "m0", InitialCluster: "m0=http://127.0.0.1:2380", InitialAdvertisePeerURL: "http://127.0.0.1:2390"},
			wantText: "--initial-advertise-peer-urls",
		},
		{
			name:     "data directory not empty",
			cfg:      raftstore.RestoreConfig{SnapshotPath: good, DataDir: used},
			wantText: "not empty",
		},
		{
			name:     "missing file",
			cfg:      raftstore.RestoreConfig{SnapshotPath: filepath.Join(dir, "nope.db")},
			want:     os.ErrNotExist,
			wantText: "nope.db",
		},
		{name: "truncated file", cfg: raftstore.RestoreConfig{SnapshotPath: truncated}, want: backup.ErrTruncated},
		{name: "hash mismatch", cfg: raftstore.RestoreConfig{SnapshotPath: corrupt}, want: backup.ErrHashMismatch},
		{
			name: "hash mismatch skipped, body corrupt",
			cfg:  raftstore.RestoreConfig{SnapshotPath: corrupt, SkipHashCheck: true},
			want: mvcc.ErrSnapshotCorrupt,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg.DataDir == "" {
				cfg.DataDir = filepath.Join(t.TempDir(), "member")
			}
			_, err := raftstore.Restore(cfg)
			if err == nil {
				t.Fatal("got nil error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("got %v, want an error wrapping %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("got %q, want it to say %q", err, tt.wantText)
			}
			if cfg.DataDir != used {
				if _, err := os.Stat(cfg.DataDir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("data dir after a refused restore: got %v, want it not created", err)
				}
			}
		})
	}
}
