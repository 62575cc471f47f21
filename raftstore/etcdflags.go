// This file holds MemberOptions: etcd's member flags as `kplane store`
// takes them (AddFlags), turned into a Config (Complete) where their form
// differs from Config's — comma-separated URLs, the election timeout in
// milliseconds, the auto-compaction mode and retention — and the GC
// target the command runs with.

package raftstore

import (
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kplane/kplane/raftstore/etcdserver"
	"github.com/kplane/kplane/raftstore/raftnode"
)

// DefaultGCPercent is the store's default GC target (kplane store
// --gc-percent): Go's own. A larger target did not pay on the put
// benchmark: at 300 the members used 5-10% more CPU per put than at 100 in
// each of four alternating rounds (BENCHMARKS.md, store section), the
// larger heap costing more fresh pages than the fewer collections saved;
// the store's live heap (every key's history in memory) already spaces
// collections out.
const DefaultGCPercent = 100

// MemberOptions are a member's settings as etcd's flags name them; the
// embedded Config takes those of the same form.
type MemberOptions struct {
	Config
	// ListenClient and AdvertiseClient are comma-separated URL lists;
	// ListenPeer and AdvertisePeer the first URL of theirs is used.
	ListenClient, AdvertiseClient, ListenPeer, AdvertisePeer string
	// ElectionTimeoutMs is etcd's --election-timeout (see
	// SetEtcdElectionTimeout).
	ElectionTimeoutMs int
	// CompactionMode and CompactionRetention are etcd's
	// --auto-compaction-* (see etcdserver.ParseAutoCompaction).
	CompactionMode, CompactionRetention string
}

// AddFlags adds etcd's member flags to f, filling o, with etcd's defaults
// where kplane has the setting.
func (o *MemberOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Name, "name", "default", "human-readable name for this member")
	f.StringVar(&o.DataDir, "data-dir", "", "path to the data directory (default \"${name}.kplane\")")
	f.StringVar(&o.ListenClient, "listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to serve the etcd v3 gRPC API on")
	f.StringVar(&o.AdvertiseClient, "advertise-client-urls", "", "comma-separated client URLs to advertise to the cluster (default: --listen-client-urls)")
	f.StringVar(&o.ListenPeer, "listen-peer-urls", "http://127.0.0.1:2380", "URL to listen on for Raft peer traffic")
	f.StringVar(&o.AdvertisePeer, "initial-advertise-peer-urls", "", "this member's peer URL, as other members dial it (default: --listen-peer-urls)")
	f.StringVar(&o.InitialCluster, "initial-cluster", "", "initial cluster configuration, name=peer-url,... (default: this member alone)")
	f.StringVar(&o.InitialClusterState, "initial-cluster-state", "new", "\"new\" to bootstrap a new cluster, \"existing\" to join one this member was added to")
	f.StringVar(&o.InitialClusterToken, "initial-cluster-token", "etcd-cluster", "initial cluster token; the cluster ID is derived from it")
	f.IntVar(&o.MaxRequestBytes, "max-request-bytes", etcdserver.DefaultMaxRequestBytes, "maximum client request size in bytes")
	f.IntVar(&o.MaxTxnOps, "max-txn-ops", etcdserver.DefaultMaxTxnOps, "maximum number of operations in one txn branch")
	f.IntVar(&o.ElectionTimeoutMs, "election-timeout", 1000, "Raft election timeout in milliseconds: a follower that hears nothing from the leader for a random 1/2 to 1 times it stands for election (a candidate without a majority tries again after as long); the leader heartbeats every twentieth to tenth of it")
	f.Uint64Var(&o.SnapshotThreshold, "snapshot-count", DefaultSnapshotCount, "number of committed entries that triggers a snapshot of the state (and a truncation of the Raft log)")
	f.Uint64Var(&o.TrailingLogs, "snapshot-catchup-entries", DefaultSnapshotCatchUpEntries, "number of entries kept in the Raft log after a snapshot, so that a slow follower can catch up without a snapshot")
	f.StringVar(&o.RaftLogStore, "raft-log-store", raftnode.LogStoreWAL, "where the Raft log lives: \"bolt\" (raft.db, two fdatasyncs per appended batch) or \"wal\" (etcd's write-ahead log, one fdatasync per batch); a member started with \"wal\" moves an existing raft.db log into the WAL, and cannot go back")
	f.StringVar(&o.CompactionMode, "auto-compaction-mode", etcdserver.CompactionModePeriodic, "how --auto-compaction-retention is read: \"periodic\" (a span of time) or \"revision\" (a number of revisions)")
	f.StringVar(&o.CompactionRetention, "auto-compaction-retention", "0", "history the leader keeps when it compacts by itself; 0 never compacts (the API services compact instead). periodic: a duration such as 30m, or a whole number of hours; samples the revision every tenth of the retention (at most 6m) and compacts to the one of a retention ago. revision: compacts every 5m to the current revision less this many")
	f.StringVar(&o.ClientTLS.CertFile, "cert-file", "", "certificate for the client URLs (https); also identifies this member to the leader's client URL, so it should allow client auth too")
	f.StringVar(&o.ClientTLS.KeyFile, "key-file", "", "key for --cert-file")
	f.StringVar(&o.ClientTLS.TrustedCAFile, "trusted-ca-file", "", "CA bundle that verifies client certificates (and other members' client-URL certificates)")
	f.BoolVar(&o.ClientTLS.ClientCertAuth, "client-cert-auth", false, "refuse clients without a certificate signed by --trusted-ca-file")
	f.StringSliceVar(&o.ClientTLS.AllowedCNs, "client-cert-allowed-cn", nil, "comma-separated common names a client certificate must carry one of (other members dial this port too: list theirs); excludes --client-cert-allowed-hostname")
	f.StringSliceVar(&o.ClientTLS.AllowedHostnames, "client-cert-allowed-hostname", nil, "comma-separated hostnames or IPs a client certificate must be valid for (one of them, by its subject alternative names); excludes --client-cert-allowed-cn")
	f.StringVar(&o.PeerTLS.CertFile, "peer-cert-file", "", "certificate for the peer URL (https), also presented when dialing peers")
	f.StringVar(&o.PeerTLS.KeyFile, "peer-key-file", "", "key for --peer-cert-file")
	f.StringVar(&o.PeerTLS.TrustedCAFile, "peer-trusted-ca-file", "", "CA bundle that verifies peers' certificates")
	f.BoolVar(&o.PeerTLS.ClientCertAuth, "peer-client-cert-auth", false, "refuse peers without a certificate signed by --peer-trusted-ca-file")
	f.StringSliceVar(&o.PeerTLS.AllowedCNs, "peer-cert-allowed-cn", nil, "comma-separated common names a peer certificate must carry one of; other connections to the peer port fail their handshake and are logged; excludes --peer-cert-allowed-hostname")
	f.StringSliceVar(&o.PeerTLS.AllowedHostnames, "peer-cert-allowed-hostname", nil, "comma-separated hostnames or IPs a peer certificate must be valid for (one of them, by its subject alternative names); excludes --peer-cert-allowed-cn")
	f.BoolVar(&o.UnsafeUnverifiedReads, "unsafe-unverified-reads", false,
		"FAULT INJECTION ONLY: serve linearizable reads from local state without confirming leadership (lets the linearizability checker's own test prove it catches stale reads)")
	_ = f.MarkHidden("unsafe-unverified-reads")
}

// Complete turns o into the member's Config.
func (o *MemberOptions) Complete() (Config, error) {
	cfg := o.Config
	var err error
	if cfg.AutoCompaction, err = etcdserver.ParseAutoCompaction(o.CompactionMode, o.CompactionRetention); err != nil {
		return Config{}, err
	}
	cfg.ListenClientURLs, cfg.AdvertiseClientURLs = splitURLs(o.ListenClient), splitURLs(o.AdvertiseClient)
	if us := splitURLs(o.ListenPeer); len(us) > 0 {
		cfg.ListenPeerURL = us[0]
	}
	if us := splitURLs(o.AdvertisePeer); len(us) > 0 {
		cfg.InitialAdvertisePeerURL = us[0]
	}
	cfg.SetEtcdElectionTimeout(o.ElectionTimeoutMs)
	return cfg, nil
}

// splitURLs splits a comma-separated flag, dropping empty entries.
func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// SetEtcdElectionTimeout sets the election and heartbeat timeouts from
// etcd's --election-timeout in milliseconds (0 or less leaves the
// defaults). hashicorp/raft randomises its timeouts between 1 and 2 times
// the setting, where etcd's election timeout is the lower bound of its
// own.
func (c *Config) SetEtcdElectionTimeout(ms int) {
	if ms > 0 {
		c.ElectionTimeout = time.Duration(ms) * time.Millisecond / 2
		c.HeartbeatTimeout = c.ElectionTimeout
	}
}

// AddFlags adds etcdutl snapshot restore's flags to f, filling c
// (`kplane store snapshot restore`).
func (c *RestoreConfig) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&c.Name, "name", "default", "human-readable name for this member")
	f.StringVar(&c.DataDir, "data-dir", "", "path to the data directory to create (default \"${name}.kplane\"); it must not exist or be empty")
	f.StringVar(&c.InitialCluster, "initial-cluster", "", "the new cluster, name=peer-url,... (default: this member alone)")
	f.StringVar(&c.InitialClusterToken, "initial-cluster-token", "etcd-cluster", "accepted for etcdutl's sake: the cluster ID comes from the token the members start with")
	f.StringVar(&c.InitialAdvertisePeerURL, "initial-advertise-peer-urls", "http://127.0.0.1:2380", "this member's peer URL, as in --initial-cluster")
	f.BoolVar(&c.SkipHashCheck, "skip-hash-check", false, "do not compare the file's SHA-256 (the store snapshot's own checksum is still checked)")
}
