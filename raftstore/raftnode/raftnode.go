// Package raftnode wires hashicorp/raft for one store member: a raft-boltdb
// stable store (term, vote), a log store (raft-boltdb, or etcd's WAL through
// walstore), a file snapshot store and a TCP transport, all under the
// member's data directory, and bootstraps a new cluster from its initial
// configuration.
package raftnode

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/kplane/kplane/raftstore/walstore"
)

// Config describes one member's Raft node.
type Config struct {
	// ID is this member's Raft server ID.
	ID raft.ServerID
	// BindAddr is the host:port the transport listens on; AdvertiseAddr is
	// the host:port peers dial (defaults to BindAddr).
	BindAddr      string
	AdvertiseAddr string
	// Dir holds raft.db (log and stable store) and snapshots/.
	Dir string
	// Bootstrap, when non-empty and the node has no Raft state yet, is the
	// initial configuration the node bootstraps with. Every member of a new
	// cluster bootstraps with the same configuration, as etcd's
	// --initial-cluster-state=new does; a joining member passes none.
	Bootstrap []raft.Server

	HeartbeatTimeout   time.Duration // default 1s (raft's default)
	ElectionTimeout    time.Duration // default 1s
	LeaderLeaseTimeout time.Duration // default 500ms
	// CommitTimeout bounds how long a follower waits to learn that entries
	// it holds are committed when no new entries flow; a write forwarded by
	// a follower waits that long for its local apply. Default DefaultCommitTimeout
	// (raft's own default is 50ms).
	CommitTimeout     time.Duration
	SnapshotThreshold uint64        // entries between snapshots; default DefaultSnapshotThreshold
	SnapshotInterval  time.Duration // how often to check; default DefaultSnapshotInterval
	TrailingLogs      uint64        // entries kept after a snapshot; default DefaultTrailingLogs
	MaxAppendEntries  int           // default 256
	// LogStore is where the Raft log lives: LogStoreWAL (etcd's WAL in
	// wal/) or LogStoreBolt (raft.db, beside the stable store). Empty means
	// LogStoreWAL.
	LogStore string

	// ServeTLS and DialTLS, when set, run the transport over TLS (see
	// tls.go): ServeTLS for the peer port, DialTLS to reach other members.
	ServeTLS, DialTLS *tls.Config

	Logger *slog.Logger
}

// Snapshot defaults. Raft checks every SnapshotInterval (randomised up to
// twice that) whether SnapshotThreshold entries were committed since the last
// snapshot; the check is cheap, so it runs often enough that a snapshot
// follows soon after the threshold is crossed, as etcd's does.
const (
	DefaultSnapshotThreshold = 8192
	DefaultTrailingLogs      = 10240
	DefaultSnapshotInterval  = time.Second
)

// DefaultCommitTimeout is how long the leader's replication to a follower
// waits for new entries before it sends an empty AppendEntries that carries
// the commit index (randomised up to twice that): followers learn that an
// entry is committed, and apply it, only from the next AppendEntries, so a
// watcher on a follower sees a write up to this much later than one on the
// leader. Measured on the watch-latency benchmark (BENCHMARKS.md): 10ms gave
// a p99 of 22-37ms, 5ms 14-26ms, 2ms about a third below 10ms; an idle
// 3-member cluster spends 12, 16 and 25 % of a core on it.
const DefaultCommitTimeout = 5 * time.Millisecond

// The log stores Config.LogStore names.
const (
	// LogStoreBolt keeps the log in raft.db (raft-boltdb): each appended
	// batch is a bbolt commit, two fdatasyncs and several page writes.
	LogStoreBolt = "bolt"
	// LogStoreWAL keeps the log in etcd's WAL under wal/: one write and
	// one fdatasync per batch, the entries since the last compaction in
	// memory. A member whose log is in raft.db moves it into the WAL on
	// its first start with this store (see openWAL); the way back is not
	// supported.
	LogStoreWAL = "wal"
)

// Node is a running Raft node and the stores it owns.
type Node struct {
	Raft      *raft.Raft
	Transport *raft.NetworkTransport
	stable    *raftboltdb.BoltStore
	closeLogs func() error
	dbPath    string
	walDir    string
	// closed ends with Close: leadership checks still waiting then return.
	closed    chan struct{}
	closeOnce sync.Once
}

// New opens (or creates) the node's stores under cfg.Dir, starts the
// transport and Raft with fsm, and bootstraps if asked and there is no state.
func New(cfg Config, fsm raft.FSM) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AdvertiseAddr == "" {
		cfg.AdvertiseAddr = cfg.BindAddr
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("raft dir: %w", err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{
		Name:        "raft",
		DisableTime: true,
		Level:       hclog.Info,
		Output:      &slogWriter{log: cfg.Logger},
	})

	rc := raft.DefaultConfig()
	rc.LocalID = cfg.ID
	rc.Logger = hlog
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.SnapshotThreshold = DefaultSnapshotThreshold
	rc.TrailingLogs = DefaultTrailingLogs
	rc.SnapshotInterval = DefaultSnapshotInterval
	rc.CommitTimeout = DefaultCommitTimeout
	setDur(&rc.HeartbeatTimeout, cfg.HeartbeatTimeout)
	setDur(&rc.ElectionTimeout, cfg.ElectionTimeout)
	setDur(&rc.LeaderLeaseTimeout, cfg.LeaderLeaseTimeout)
	setDur(&rc.CommitTimeout, cfg.CommitTimeout)
	setDur(&rc.SnapshotInterval, cfg.SnapshotInterval)
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	if cfg.MaxAppendEntries > 0 {
		rc.MaxAppendEntries = cfg.MaxAppendEntries
	}
	if rc.LeaderLeaseTimeout > rc.HeartbeatTimeout {
		rc.LeaderLeaseTimeout = rc.HeartbeatTimeout
	}

	dbPath := filepath.Join(cfg.Dir, "raft.db")
	walDir := filepath.Join(cfg.Dir, "wal")
	stable, err := raftboltdb.New(raftboltdb.Options{
		Path: dbPath,
		BoltOptions: &bbolt.Options{
			// A second process on the same data directory fails instead
			// of waiting for the file lock forever.
			Timeout: time.Second,
			// The free list is rebuilt on open instead of written with
			// every commit: less to fsync per batch of entries.
			NoFreelistSync: true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("open raft log %s: %w", dbPath, err)
	}
	var logs raft.LogStore = stable
	closeLogs := func() error { return nil }
	switch cfg.LogStore {
	case LogStoreBolt:
		if walstore.Exists(walDir) {
			stable.Close()
			return nil, fmt.Errorf("raft log: %s holds a WAL written with the %q log store; start the member with that store (moving a log back into raft.db is not supported)", walDir, LogStoreWAL)
		}
	case "", LogStoreWAL:
		w, err := openWAL(walDir, stable, cfg.Logger)
		if err != nil {
			stable.Close()
			return nil, err
		}
		logs, closeLogs = w, w.Close
	default:
		stable.Close()
		return nil, fmt.Errorf("raft log store %q: want %q or %q", cfg.LogStore, LogStoreBolt, LogStoreWAL)
	}
	closeStores := func() { closeLogs(); stable.Close() }
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, hlog)
	if err != nil {
		closeStores()
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	advertise, err := net.ResolveTCPAddr("tcp", cfg.AdvertiseAddr)
	if err != nil {
		closeStores()
		return nil, fmt.Errorf("advertise address %q: %w", cfg.AdvertiseAddr, err)
	}
	stream, err := newStreamLayer(cfg.BindAddr, advertise, cfg.ServeTLS, cfg.DialTLS)
	if err != nil {
		closeStores()
		return nil, err
	}
	trans := raft.NewNetworkTransportWithLogger(stream, 8, 10*time.Second, hlog)

	if len(cfg.Bootstrap) > 0 {
		has, err := raft.HasExistingState(logs, stable, snaps)
		if err != nil {
			trans.Close()
			closeStores()
			return nil, fmt.Errorf("check raft state: %w", err)
		}
		if !has {
			conf := raft.Configuration{Servers: cfg.Bootstrap}
			if err := raft.BootstrapCluster(rc, logs, stable, snaps, trans, conf); err != nil {
				trans.Close()
				closeStores()
				return nil, fmt.Errorf("bootstrap raft: %w", err)
			}
		}
	}

	// Recent entries served from memory: the leader reads each entry back
	// once per follower when replicating.
	cached, err := raft.NewLogCache(1024, logs)
	if err != nil {
		trans.Close()
		closeStores()
		return nil, fmt.Errorf("raft log cache: %w", err)
	}
	r, err := raft.NewRaft(rc, fsm, cached, stable, snaps, trans)
	if err != nil {
		trans.Close()
		closeStores()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	return &Node{Raft: r, Transport: trans, stable: stable, closeLogs: closeLogs, dbPath: dbPath, walDir: walDir, closed: make(chan struct{})}, nil
}

// openWAL opens the WAL log store in dir. If there is none yet and raft.db
// holds log entries (the member ran with the bolt store), they are copied
// into a new WAL first: written under a temporary name and renamed into
// place once complete, then deleted from raft.db, so a crash at any point
// leaves either the old log or the whole new one.
func openWAL(dir string, bolt *raftboltdb.BoltStore, log *slog.Logger) (*walstore.Store, error) {
	if !walstore.Exists(dir) {
		first, err := bolt.FirstIndex()
		if err != nil {
			return nil, fmt.Errorf("raft log: read raft.db: %w", err)
		}
		last, err := bolt.LastIndex()
		if err != nil {
			return nil, fmt.Errorf("raft log: read raft.db: %w", err)
		}
		if last > 0 {
			if err := migrate(dir, bolt, first, last); err != nil {
				return nil, fmt.Errorf("raft log: move entries %d-%d from raft.db into %s: %w", first, last, dir, err)
			}
			log.Info("raft log moved from raft.db into the WAL", "first", first, "last", last, "dir", dir)
		}
	}
	w, err := walstore.Open(dir, log)
	if err != nil {
		return nil, fmt.Errorf("raft log: %w", err)
	}
	if last, err := bolt.LastIndex(); err == nil && last > 0 {
		// A migration that stopped after the rename: the WAL is complete.
		first, _ := bolt.FirstIndex()
		if err := bolt.DeleteRange(first, last); err != nil {
			w.Close()
			return nil, fmt.Errorf("raft log: clear raft.db after the move: %w", err)
		}
	}
	return w, nil
}

func migrate(dir string, bolt *raftboltdb.BoltStore, first, last uint64) error {
	tmp := dir + ".migrating"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	w, err := walstore.Open(tmp, nil)
	if err != nil {
		return err
	}
	const batch = 512
	logs := make([]*raft.Log, 0, batch)
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if err := bolt.GetLog(i, l); err != nil {
			w.Close()
			return fmt.Errorf("entry %d: %w", i, err)
		}
		logs = append(logs, l)
		if len(logs) == batch || i == last {
			if err := w.StoreLogs(logs); err != nil {
				w.Close()
				return err
			}
			logs = logs[:0]
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(dir))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// DBSize returns the bytes on disk of the member's Raft log and stable
// store: raft.db plus the WAL's segments (each preallocated to 64 MiB).
func (n *Node) DBSize() int64 {
	var size int64
	if fi, err := os.Stat(n.dbPath); err == nil {
		size = fi.Size()
	}
	segs, _ := filepath.Glob(filepath.Join(n.walDir, "*.wal"))
	for _, p := range segs {
		if fi, err := os.Stat(p); err == nil {
			size += fi.Size()
		}
	}
	return size
}

// Close shuts Raft down and closes the transport and the log store.
func (n *Node) Close() error {
	err := n.Raft.Shutdown().Error()
	n.closeOnce.Do(func() { close(n.closed) })
	err = errors.Join(err, n.Transport.Close(), n.closeLogs(), n.stable.Close())
	return err
}

func setDur(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}

// slogWriter turns hclog's text lines into slog records so that raft's logs
// go where the member's logs go.
type slogWriter struct{ log *slog.Logger }

var _ io.Writer = (*slogWriter)(nil)

func (w *slogWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		s := string(line)
		level := slog.LevelInfo
		switch {
		case strings.Contains(s, "[ERROR]"):
			level = slog.LevelError
		case strings.Contains(s, "[WARN]"):
			level = slog.LevelWarn
		case strings.Contains(s, "[DEBUG]"), strings.Contains(s, "[TRACE]"):
			level = slog.LevelDebug
		}
		w.log.Log(context.Background(), level, s, "component", "raft")
	}
	return len(p), nil
}
