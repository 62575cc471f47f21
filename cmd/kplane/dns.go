// This file holds `kplane dns`: flags into a clusterdns.Config, then Run.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/services/apiserver/authz"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/clusterdns"
)

func newDNSCommand() *cobra.Command {
	var (
		api        client.Credentials
		addr, zone string
		ttl        time.Duration
		forward    string
	)
	p := component.Options{Service: "dns", FollowOnly: true}
	cmd := &cobra.Command{
		Use:   "dns",
		Short: "Run the cluster DNS: <service>.<namespace>.svc.<zone> and the rest of Kubernetes' DNS specification",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			upstreams, err := parseForward(forward)
			if err != nil {
				return err
			}
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			conn, err := api.Dial(proc.Tel.DialOption())
			if err != nil {
				return err
			}
			defer conn.Close()
			s, err := clusterdns.New(clusterdns.Config{Conn: conn, Addr: addr, Zone: zone, TTL: ttl, Upstreams: upstreams, Logger: proc.Log})
			if err != nil {
				return err
			}
			proc.Log.Info("dns starting", "server", api.Server, "addr", s.Addr(), "zone", zone, "upstreams", upstreams)
			if err := s.Run(cmd.Context()); !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	api.AddFlags(f, authz.DNSUser)
	f.StringVar(&addr, "listen", "127.0.0.1:53", "UDP and TCP address to answer on (port 0: a free one)")
	f.StringVar(&zone, "cluster-domain", clusterdns.DefaultZone, "the zone served (the node agents' --cluster-domain)")
	f.DurationVar(&ttl, "ttl", clusterdns.DefaultTTL, "TTL of the zone's answers and of negative answers (whole seconds)")
	f.StringVar(&forward, "forward", "/etc/resolv.conf", "where names outside the zone go: a resolv.conf whose nameservers are used, a comma-separated list of host:port, or none (REFUSED)")
	p.AddFlags(f, "")
	return cmd
}

// parseForward turns --forward into upstream addresses: none, a file (a
// resolv.conf) or a list of host:port.
func parseForward(v string) ([]string, error) {
	switch {
	case v == "" || v == "none":
		return nil, nil
	case strings.HasPrefix(v, "/") || strings.HasPrefix(v, "."):
		if _, err := os.Stat(v); err != nil {
			return nil, fmt.Errorf("--forward: %w", err)
		}
		return clusterdns.UpstreamsFromResolvConf(v)
	}
	return strings.Split(v, ","), nil
}
