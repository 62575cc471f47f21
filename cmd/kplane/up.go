package main

// This file holds `kplane up`: a local HA cluster on loopback. Today that is
// a 3-member store, each member a `kplane store` process of this binary.

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/localcluster"
)

func newUpCommand() *cobra.Command {
	var cfg localcluster.Config
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a local HA cluster on loopback (today: a 3-member store) until Ctrl-C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			c, err := localcluster.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer c.Stop()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "kplane store: %d members on loopback; logs in each member's data dir:\n", len(c.Members))
			for _, m := range c.Members {
				fmt.Fprintf(out, "  %s  client %s  peer %s  log %s\n", m.Name, m.ClientURL, m.PeerURL, m.LogPath)
			}
			fmt.Fprintf(out, "\nUse it with:\n  etcdctl --endpoints=%s member list -w table\n", c.Endpoints())
			fmt.Fprintf(out, "  export ETCDCTL_ENDPOINTS=%s\n\nCtrl-C stops the cluster.\n", strings.ReplaceAll(c.Endpoints(), " ", ""))
			return c.Wait(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", ".kplane", "directory holding every member's data directory and log")
	f.IntVar(&cfg.Members, "members", 3, "number of store members")
	f.IntVar(&cfg.BasePort, "base-port", 2379, "member i serves clients on base-port+2i and peers on base-port+2i+1 (fixed, so a restart finds its peers); 0 picks free ports")
	return cmd
}
