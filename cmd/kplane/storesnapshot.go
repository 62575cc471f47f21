// This file holds `kplane store snapshot restore` and `kplane store snapshot
// status`, etcdutl's snapshot commands for kplane's backup files (which
// `etcdctl snapshot save` writes from a kplane member).

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/kplane/kplane/raftstore"
	"github.com/kplane/kplane/raftstore/backup"
)

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
			logger, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			cfg.SnapshotPath, cfg.Logger = args[0], logger
			_, err = raftstore.Restore(cfg)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", "default", "human-readable name for this member")
	f.StringVar(&cfg.DataDir, "data-dir", "", "path to the data directory to create (default \"${name}.kplane\"); it must not exist or be empty")
	f.StringVar(&cfg.InitialCluster, "initial-cluster", "", "the new cluster, name=peer-url,... (default: this member alone)")
	f.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", "etcd-cluster", "accepted for etcdutl's sake: the cluster ID comes from the token the members start with")
	f.StringVar(&cfg.InitialAdvertisePeerURL, "initial-advertise-peer-urls", "http://127.0.0.1:2380", "this member's peer URL, as in --initial-cluster")
	f.BoolVar(&cfg.SkipHashCheck, "skip-hash-check", false, "do not compare the file's SHA-256 (the store snapshot's own checksum is still checked)")
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
			return printSnapshotStatus(cmd.OutOrStdout(), format, st)
		},
	}
	cmd.Flags().StringVarP(&format, "write-out", "w", "simple", "output format: simple, table or json")
	return cmd
}

// printSnapshotStatus prints st as etcdutl does in each of its formats.
func printSnapshotStatus(w io.Writer, format string, st backup.Status) error {
	hash := fmt.Sprintf("%x", st.Hash)
	rev := fmt.Sprint(st.Revision)
	keys := fmt.Sprint(st.TotalKey)
	size := humanize.Bytes(uint64(st.TotalSize))
	switch format {
	case "simple":
		_, err := fmt.Fprintf(w, "%s, %s, %s, %s\n", hash, rev, keys, size)
		return err
	case "json":
		return json.NewEncoder(w).Encode(st)
	case "table":
		_, err := io.WriteString(w, formatTable(
			[]string{"HASH", "REVISION", "TOTAL KEYS", "TOTAL SIZE"},
			[]string{hash, rev, keys, size},
		))
		return err
	}
	return fmt.Errorf("--write-out %q: want simple, table or json", format)
}

// formatTable draws one header row and one value row in etcdctl's table
// style: headers centred, values left-aligned. Written here rather than
// with a table library for two rows.
func formatTable(header, row []string) string {
	widths := make([]int, len(header))
	for i := range header {
		widths[i] = max(len(header[i]), len(row[i]))
	}
	var b strings.Builder
	rule := func() {
		for _, w := range widths {
			b.WriteString("+" + strings.Repeat("-", w+2))
		}
		b.WriteString("+\n")
	}
	cells := func(vals []string, centre bool) {
		for i, v := range vals {
			pad := widths[i] - len(v)
			left := 0
			if centre {
				left = pad / 2
			}
			b.WriteString("| " + strings.Repeat(" ", left) + v + strings.Repeat(" ", pad-left) + " ")
		}
		b.WriteString("|\n")
	}
	rule()
	cells(header, true)
	rule()
	cells(row, false)
	rule()
	return b.String()
}
