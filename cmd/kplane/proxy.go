// This file holds `kplane proxy`: its flags (proxy.Options), then the
// Service proxy run.

package main

import (
	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/services/proxy"
)

func newProxyCommand() *cobra.Command {
	var o proxy.Options
	p := component.Options{Service: "proxy", FollowOnly: true}
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the Service proxy: program this host's nftables so cluster IPs and node ports reach Services' endpoints",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			return proxy.RunStandard(cmd.Context(), o, proc.Log, proc.Tel.DialOption())
		},
	}
	o.AddFlags(cmd.Flags())
	p.AddFlags(cmd.Flags(), "")
	return cmd
}
