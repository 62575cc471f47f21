// This file holds `kplane dns` and `kplane proxy`: their flags, then each run.

package main

import (
	"context"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/services/clusterdns"
	"github.com/kplane/kplane/services/proxy"
)

func newDNSCommand() *cobra.Command {
	var o clusterdns.Options
	return serviceCommand("dns", "Run the cluster DNS: <service>.<namespace>.svc.<zone> and the rest of Kubernetes' DNS specification",
		o.AddFlags, func(ctx context.Context, proc *component.Process) error {
			o.Logger, o.Telemetry = proc.Log, proc.Tel
			return clusterdns.RunStandard(ctx, o)
		})
}

func newProxyCommand() *cobra.Command {
	var o proxy.Options
	return serviceCommand("proxy", "Run the Service proxy: program this host's nftables so cluster IPs and node ports reach Services' endpoints",
		o.AddFlags, func(ctx context.Context, proc *component.Process) error {
			o.Logger, o.Telemetry = proc.Log, proc.Tel
			return proxy.RunStandard(ctx, o)
		})
}

// serviceCommand is command name: its flags and the process's, then run.
func serviceCommand(name, short string, addFlags func(*pflag.FlagSet), run func(context.Context, *component.Process) error) *cobra.Command {
	p := component.Options{Service: name, FollowOnly: true}
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			return run(cmd.Context(), proc)
		},
	}
	addFlags(cmd.Flags())
	p.AddFlags(cmd.Flags(), "")
	return cmd
}
