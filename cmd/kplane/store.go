// This file holds `kplane store`: one member of the replicated store, with
// etcd's member flags.

package main

import (
	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/raftstore"
	"github.com/kplane/kplane/raftstore/etcdserver"
	"github.com/kplane/kplane/raftstore/raftnode"
)

func newStoreCommand() *cobra.Command {
	var (
		cfg                     raftstore.Config
		listenClient, advClient string
		listenPeer, advPeer     string
		electionMs              int
		compactionMode          string
		compactionRetention     string
	)
	p := component.Options{Service: "store", FollowOnly: true, GCPercent: new(raftstore.DefaultGCPercent)}
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Run one member of the replicated store (etcd v3 API; flags as etcd's)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.AutoCompaction, err = etcdserver.ParseAutoCompaction(compactionMode, compactionRetention); err != nil {
				return err
			}
			p.Instance = cfg.Name
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			if err := proc.Tel.BridgeRaftMetrics(); err != nil {
				return err
			}
			cfg.Logger, cfg.TracerProvider, cfg.MeterProvider = proc.Log, proc.Tel.TracerProvider(), proc.Tel.MeterProvider()
			cfg.ListenClientURLs, cfg.AdvertiseClientURLs = splitURLs(listenClient), splitURLs(advClient)
			cfg.ListenPeerURL, cfg.InitialAdvertisePeerURL = firstURL(listenPeer), firstURL(advPeer)
			cfg.SetEtcdElectionTimeout(electionMs)
			s, err := raftstore.New(cfg)
			if err != nil {
				return err
			}
			return s.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", "default", "human-readable name for this member")
	f.StringVar(&cfg.DataDir, "data-dir", "", "path to the data directory (default \"${name}.kplane\")")
	f.StringVar(&listenClient, "listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to serve the etcd v3 gRPC API on")
	f.StringVar(&advClient, "advertise-client-urls", "", "comma-separated client URLs to advertise to the cluster (default: --listen-client-urls)")
	f.StringVar(&listenPeer, "listen-peer-urls", "http://127.0.0.1:2380", "URL to listen on for Raft peer traffic")
	f.StringVar(&advPeer, "initial-advertise-peer-urls", "", "this member's peer URL, as other members dial it (default: --listen-peer-urls)")
	f.StringVar(&cfg.InitialCluster, "initial-cluster", "", "initial cluster configuration, name=peer-url,... (default: this member alone)")
	f.StringVar(&cfg.InitialClusterState, "initial-cluster-state", "new", "\"new\" to bootstrap a new cluster, \"existing\" to join one this member was added to")
	f.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", "etcd-cluster", "initial cluster token; the cluster ID is derived from it")
	f.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", etcdserver.DefaultMaxRequestBytes, "maximum client request size in bytes")
	f.IntVar(&cfg.MaxTxnOps, "max-txn-ops", etcdserver.DefaultMaxTxnOps, "maximum number of operations in one txn branch")
	f.IntVar(&electionMs, "election-timeout", 1000, "Raft election timeout in milliseconds: a follower that hears nothing from the leader for a random 1/2 to 1 times it stands for election (a candidate without a majority tries again after as long); the leader heartbeats every twentieth to tenth of it")
	f.Uint64Var(&cfg.SnapshotThreshold, "snapshot-count", raftstore.DefaultSnapshotCount, "number of committed entries that triggers a snapshot of the state (and a truncation of the Raft log)")
	f.Uint64Var(&cfg.TrailingLogs, "snapshot-catchup-entries", raftstore.DefaultSnapshotCatchUpEntries, "number of entries kept in the Raft log after a snapshot, so that a slow follower can catch up without a snapshot")
	f.StringVar(&cfg.RaftLogStore, "raft-log-store", raftnode.LogStoreWAL, "where the Raft log lives: \"bolt\" (raft.db, two fdatasyncs per appended batch) or \"wal\" (etcd's write-ahead log, one fdatasync per batch); a member started with \"wal\" moves an existing raft.db log into the WAL, and cannot go back")
	f.StringVar(&compactionMode, "auto-compaction-mode", etcdserver.CompactionModePeriodic, "how --auto-compaction-retention is read: \"periodic\" (a span of time) or \"revision\" (a number of revisions)")
	f.StringVar(&compactionRetention, "auto-compaction-retention", "0", "history the leader keeps when it compacts by itself; 0 never compacts (the API services compact instead). periodic: a duration such as 30m, or a whole number of hours; samples the revision every tenth of the retention (at most 6m) and compacts to the one of a retention ago. revision: compacts every 5m to the current revision less this many")
	f.StringVar(&cfg.ClientTLS.CertFile, "cert-file", "", "certificate for the client URLs (https); also identifies this member to the leader's client URL, so it should allow client auth too")
	f.StringVar(&cfg.ClientTLS.KeyFile, "key-file", "", "key for --cert-file")
	f.StringVar(&cfg.ClientTLS.TrustedCAFile, "trusted-ca-file", "", "CA bundle that verifies client certificates (and other members' client-URL certificates)")
	f.BoolVar(&cfg.ClientTLS.ClientCertAuth, "client-cert-auth", false, "refuse clients without a certificate signed by --trusted-ca-file")
	f.StringSliceVar(&cfg.ClientTLS.AllowedCNs, "client-cert-allowed-cn", nil, "comma-separated common names a client certificate must carry one of (other members dial this port too: list theirs); excludes --client-cert-allowed-hostname")
	f.StringSliceVar(&cfg.ClientTLS.AllowedHostnames, "client-cert-allowed-hostname", nil, "comma-separated hostnames or IPs a client certificate must be valid for (one of them, by its subject alternative names); excludes --client-cert-allowed-cn")
	f.StringVar(&cfg.PeerTLS.CertFile, "peer-cert-file", "", "certificate for the peer URL (https), also presented when dialing peers")
	f.StringVar(&cfg.PeerTLS.KeyFile, "peer-key-file", "", "key for --peer-cert-file")
	f.StringVar(&cfg.PeerTLS.TrustedCAFile, "peer-trusted-ca-file", "", "CA bundle that verifies peers' certificates")
	f.BoolVar(&cfg.PeerTLS.ClientCertAuth, "peer-client-cert-auth", false, "refuse peers without a certificate signed by --peer-trusted-ca-file")
	f.StringSliceVar(&cfg.PeerTLS.AllowedCNs, "peer-cert-allowed-cn", nil, "comma-separated common names a peer certificate must carry one of; other connections to the peer port fail their handshake and are logged; excludes --peer-cert-allowed-hostname")
	f.StringSliceVar(&cfg.PeerTLS.AllowedHostnames, "peer-cert-allowed-hostname", nil, "comma-separated hostnames or IPs a peer certificate must be valid for (one of them, by its subject alternative names); excludes --peer-cert-allowed-cn")
	registerProcessFlags(f, &p, "127.0.0.1:6062")
	f.BoolVar(&cfg.UnsafeUnverifiedReads, "unsafe-unverified-reads", false,
		"FAULT INJECTION ONLY: serve linearizable reads from local state without confirming leadership (lets the linearizability checker's own test prove it catches stale reads)")
	_ = f.MarkHidden("unsafe-unverified-reads")
	cmd.AddCommand(newStoreSnapshotCommand())
	return cmd
}

func firstURL(s string) string {
	if us := splitURLs(s); len(us) > 0 {
		return us[0]
	}
	return ""
}
