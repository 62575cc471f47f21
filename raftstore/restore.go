// This file holds Restore: a new member's data directory built from a backup
// file (`kplane store snapshot restore`, etcdutl's `snapshot restore`).

package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/kplane/kplane/raftstore/backup"
	"github.com/kplane/kplane/raftstore/fsm"
	"github.com/kplane/kplane/raftstore/mvcc"
	"github.com/kplane/kplane/raftstore/raftnode"
)

// RestoreConfig is what Restore takes: etcdutl snapshot restore's flags.
type RestoreConfig struct {
	// SnapshotPath is the backup file (written by `etcdctl snapshot save`
	// from a kplane member).
	SnapshotPath string
	// Name is the new member's name (default "default"); DataDir the data
	// directory to create (default "${Name}.kplane"), which must not exist
	// or be empty.
	Name    string
	DataDir string
	// InitialCluster is the new cluster, "name=peer-url,..." (default this
	// member alone); InitialAdvertisePeerURL this member's peer URL in it
	// (default the store's default, http://127.0.0.1:2380). Members must
	// then start with the same name, initial cluster and peer URL.
	InitialCluster          string
	InitialAdvertisePeerURL string
	// InitialClusterToken is accepted for etcdutl's sake; the cluster ID is
	// derived from the token the members start with.
	InitialClusterToken string
	// SkipHashCheck restores without comparing the file's SHA-256; the
	// store snapshot's own CRC-32C is still checked.
	SkipHashCheck bool

	Logger *slog.Logger
}

// defaultPeerURL is the peer URL a store member listens on and advertises
// when given none.
const defaultPeerURL = "http://127.0.0.1:2380"

func raftDir(dataDir string) string { return filepath.Join(dataDir, "raft") }

// Restore builds a new member's data directory from a backup file. Members
// started on directories restored from the same file with the same
// InitialCluster form a new cluster holding exactly the snapshot's keys,
// each with its revisions, at the snapshot's revision and compaction point;
// new writes get revisions above it. Leases are kept with their TTLs and
// attached keys, and the first leader gives each its full TTL from the
// moment it leads, as etcd's lessor does after a restore. The old cluster's
// membership is not kept.
//
// It refuses a file that is not a whole kplane backup (an etcd snapshot, a
// truncated file, one whose SHA-256 does not match) with an error wrapping
// one of backup's errors, and a data directory that is not empty. On error
// it removes what it created.
func Restore(cfg RestoreConfig) (mvcc.SnapshotInfo, error) {
	cfg.setDefaults()
	members, err := initialMembers(cfg.Name, cfg.InitialCluster, cfg.InitialAdvertisePeerURL)
	if err != nil {
		return mvcc.SnapshotInfo{}, err
	}
	servers, err := raftServers(members)
	if err != nil {
		return mvcc.SnapshotInfo{}, err
	}
	if err := checkEmptyDir(cfg.DataDir); err != nil {
		return mvcc.SnapshotInfo{}, err
	}
	data, err := os.ReadFile(cfg.SnapshotPath)
	if err != nil {
		return mvcc.SnapshotInfo{}, fmt.Errorf("snapshot restore: %w", err)
	}
	body, err := backup.Decode(data, cfg.SkipHashCheck)
	if err != nil {
		return mvcc.SnapshotInfo{}, fmt.Errorf("snapshot restore %s: %w", cfg.SnapshotPath, err)
	}
	// Read the store snapshot once before writing anything: a body that
	// does not read would otherwise make a data directory whose member
	// cannot start.
	info, err := mvcc.ReadSnapshotInfo(bytes.NewReader(body))
	if err != nil {
		return mvcc.SnapshotInfo{}, fmt.Errorf("snapshot restore %s: %w", cfg.SnapshotPath, err)
	}
	created, err := makeDir(cfg.DataDir)
	if err != nil {
		return mvcc.SnapshotInfo{}, fmt.Errorf("snapshot restore: %w", err)
	}
	err = raftnode.Seed(raftDir(cfg.DataDir), servers, func(w io.Writer, index uint64) error {
		return fsm.WriteSnapshot(w, index, rawSnapshot(body))
	})
	if err != nil {
		// Remove what this call created: the data directory, or in one
		// that was there empty, what went into it.
		made := raftDir(cfg.DataDir)
		if created {
			made = cfg.DataDir
		}
		return mvcc.SnapshotInfo{}, fmt.Errorf("snapshot restore: %w", errors.Join(err, os.RemoveAll(made)))
	}
	cfg.Logger.Info("restored snapshot", "path", cfg.SnapshotPath, "data_dir", cfg.DataDir,
		"member", cfg.Name, "revision", info.Revision, "compact_revision", info.CompactRevision,
		"keys", info.Keys, "leases", info.Leases, "cluster", cfg.InitialCluster)
	return info, nil
}

func (cfg *RestoreConfig) setDefaults() {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Name == "" {
		cfg.Name = "default"
	}
	if cfg.DataDir == "" {
		cfg.DataDir = cfg.Name + ".kplane"
	}
	if cfg.InitialAdvertisePeerURL == "" {
		cfg.InitialAdvertisePeerURL = defaultPeerURL
	}
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.Name + "=" + cfg.InitialAdvertisePeerURL
	}
}

// checkEmptyDir fails, as etcdutl does, unless dir is missing or empty.
func checkEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil || len(entries) > 0:
		return fmt.Errorf("data-dir %q not empty or could not be read", dir)
	}
	return nil
}

// makeDir creates dir and reports whether it did.
func makeDir(dir string) (bool, error) {
	if _, err := os.Stat(dir); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	return true, nil
}

// rawSnapshot is a store snapshot already serialised (the body of a backup
// file), written out as it is.
type rawSnapshot []byte

var _ mvcc.Snapshot = rawSnapshot(nil)

func (r rawSnapshot) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(r)
	return int64(n), err
}
