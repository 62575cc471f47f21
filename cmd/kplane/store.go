// This file holds `kplane store` (one member of the replicated store, with
// etcd's member flags) and `kplane store snapshot restore|status`,
// etcdutl's snapshot commands for kplane's backup files (which `etcdctl
// snapshot save` writes from a kplane member).

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/raftstore"
	"github.com/kplane/kplane/raftstore/backup"
)

func newStoreCommand() *cobra.Command {
	var o raftstore.MemberOptions
	p := component.Options{Service: "store", FollowOnly: true, GCPercent: new(raftstore.DefaultGCPercent)}
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Run one member of the replicated store (etcd v3 API; flags as etcd's)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.Complete()
			if err != nil {
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
			s, err := raftstore.New(cfg)
			if err != nil {
				return err
			}
			return s.Run(cmd.Context())
		},
	}
	o.AddFlags(cmd.Flags())
	p.AddFlags(cmd.Flags(), "127.0.0.1:6062")
	cmd.AddCommand(newStoreSnapshotCommand())
	return cmd
}

func newStoreSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Restore a store member from, or describe, a backup taken with `etcdctl snapshot save`",
	}
	cmd.AddCommand(newSnapshotRestoreCommand(), newSnapshotStatusCommand())
	return cmd
}

func newSnapshotRestoreCommand() *cobra.Command {
	var (
		cfg      raftstore.RestoreConfig
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Build a new member's data directory from a backup, with a new cluster membership",
		Long: `Build a new member's data directory from a backup file written by
"etcdctl snapshot save" against a kplane store member. Restore every member of
the new cluster from the same file with the same --initial-cluster, then start
each with "kplane store" and the same --name, --initial-cluster,
--initial-advertise-peer-urls and --data-dir: together they hold the backup's
keys at its revision, and new writes continue above it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			logger, err := component.NewLogger(logLevel)
			if err != nil {
				return err
			}
			cfg.SnapshotPath, cfg.Logger = args[0], logger
			_, err = raftstore.Restore(cfg)
			return err
		},
	}
	f := cmd.Flags()
	cfg.AddFlags(f)
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	return cmd
}

func newSnapshotStatusCommand() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "status FILE",
		Short: "Check a backup's integrity and print its hash, revision, total keys and size",
		Long: `Check a backup file (hash included) and print what etcdutl snapshot status
prints: the hash (the store's HashKV at the backup's revision, as
"etcdctl endpoint hashkv" reports it), the revision, the total keys (every
stored revision of every key, as etcd counts its key bucket) and the size.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("snapshot status: %w", err)
			}
			st, err := backup.ReadStatus(data)
			if err != nil {
				return fmt.Errorf("snapshot status %s: %w", args[0], err)
			}
			return st.Print(cmd.OutOrStdout(), format)
		},
	}
	cmd.Flags().StringVarP(&format, "write-out", "w", "simple", "output format: simple, table or json")
	return cmd
}
