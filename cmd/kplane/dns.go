// This file holds `kplane dns`: its flags (clusterdns.Options), then the
// cluster DNS run.

package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/services/clusterdns"
)

func newDNSCommand() *cobra.Command {
	var o clusterdns.Options
	p := component.Options{Service: "dns", FollowOnly: true}
	cmd := &cobra.Command{
		Use:   "dns",
		Short: "Run the cluster DNS: <service>.<namespace>.svc.<zone> and the rest of Kubernetes' DNS specification",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			upstreams, err := o.Upstreams()
			if err != nil {
				return err
			}
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			conn, err := o.API.Dial(proc.Tel.DialOption())
			if err != nil {
				return err
			}
			defer conn.Close()
			s, err := clusterdns.New(clusterdns.Config{Conn: conn, Addr: o.Listen, FreeBind: o.FreeBind, Zone: o.Zone, TTL: o.TTL, Upstreams: upstreams, Logger: proc.Log})
			if err != nil {
				return err
			}
			proc.Log.Info("dns starting", "server", o.API.Server, "addr", s.Addr(), "zone", o.Zone, "upstreams", upstreams)
			if err := s.Run(cmd.Context()); !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	o.AddFlags(cmd.Flags())
	p.AddFlags(cmd.Flags(), "")
	return cmd
}
