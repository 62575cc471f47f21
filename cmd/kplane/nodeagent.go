// This file holds `kplane nodeagent`: kplane's kubelet, its flags mapped
// onto nodeagent.FleetOptions — one node, or with --nodes N that many
// simulated nodes in one process.
// `kplane simruntime` serves the node agent's built-in runtime on its own
// socket, for debugging it with any CRI client.

package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/nodeagent"
	"github.com/kplane/kplane/nodeagent/simruntime"
)

func newNodeAgentCommand() *cobra.Command {
	o := nodeagent.DefaultFleetOptions()
	p := component.Options{Service: "nodeagent", FollowOnly: true, GCPercent: new(nodeagent.DefaultGCPercent)}
	cmd := &cobra.Command{
		Use:   "nodeagent",
		Short: "Run the node agent (kplane's kubelet) for one node, or many simulated nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			p.Instance = strings.Join(o.NodeNames(), ",")
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			o.Logger, o.Telemetry = proc.Log, proc.Tel
			fleet, err := nodeagent.NewFleet(o)
			if err != nil {
				return err
			}
			proc.Log.Info("node agents running", "nodes", o.Nodes, "server", o.Server, "logs", o.LogListen)
			return fleet.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	o.AddFlags(f)
	p.AddFlags(f, "127.0.0.1:6061")
	return cmd
}

func newSimRuntimeCommand() *cobra.Command {
	var (
		cfg      simruntime.Config
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "simruntime",
		Short: "Serve the built-in simulated container runtime (CRI v1) on a unix socket",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := component.NewLogger(logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = logger
			rt, err := simruntime.New(cfg)
			if err != nil {
				return err
			}
			defer rt.Close()
			return rt.Run(cmd.Context())
		},
	}
	cfg.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
