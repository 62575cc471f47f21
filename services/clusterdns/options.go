// This file holds Options: `kplane dns`'s settings as its flags name them,
// with AddFlags, Upstreams, which turns --forward into addresses, and
// RunStandard, the run the command wires.

package clusterdns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/services/client"
)

// User is the identity the cluster DNS authenticates as (the API
// service's bootstrap policy binds it to system:coredns).
const User = "system:kplane-dns"

// Options are the cluster DNS's settings.
type Options struct {
	// API names the API service and the DNS's identity there.
	API client.Credentials
	// Listen is the UDP and TCP address answered on; Zone the zone served.
	Listen, Zone string
	// FreeBind binds Listen before its address is on an interface.
	FreeBind bool
	// TTL of the zone's answers and of negative answers.
	TTL time.Duration
	// Forward is where names outside the zone go: a resolv.conf (a path),
	// a comma-separated list of host:port, or none.
	Forward string
	// Logger (nil: none) and Telemetry (nil: none) are the process's.
	Logger    *slog.Logger
	Telemetry *telemetry.Telemetry
}

// AddFlags adds `kplane dns`'s flags to f, filling o.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.API.AddFlags(f, User)
	f.StringVar(&o.Listen, "listen", "127.0.0.1:53", "UDP and TCP address to answer on (port 0: a free one)")
	f.BoolVar(&o.FreeBind, "freebind", false, "bind --listen even before an interface has its address (IP_FREEBIND), e.g. a pod bridge's gateway address that appears with the node's first pod")
	f.StringVar(&o.Zone, "cluster-domain", DefaultZone, "the zone served (the node agents' --cluster-domain)")
	f.DurationVar(&o.TTL, "ttl", DefaultTTL, "TTL of the zone's answers and of negative answers (whole seconds)")
	f.StringVar(&o.Forward, "forward", "/etc/resolv.conf", "where names outside the zone go: a resolv.conf whose nameservers are used, a comma-separated list of host:port, or none (REFUSED)")
}

// Upstreams turns Forward into upstream addresses: none, a file (a
// resolv.conf) or a list of host:port.
func (o *Options) Upstreams() ([]string, error) {
	v := o.Forward
	switch {
	case v == "" || v == "none":
		return nil, nil
	case strings.HasPrefix(v, "/") || strings.HasPrefix(v, "."):
		if _, err := os.Stat(v); err != nil {
			return nil, fmt.Errorf("--forward: %w", err)
		}
		return UpstreamsFromResolvConf(v)
	}
	return strings.Split(v, ","), nil
}

// RunStandard connects to the API service and serves until ctx ends (a
// clean stop: nil).
func RunStandard(ctx context.Context, o Options) error {
	upstreams, err := o.Upstreams()
	if err != nil {
		return err
	}
	var dial []grpc.DialOption
	if o.Telemetry != nil {
		dial = append(dial, o.Telemetry.DialOption())
	}
	conn, err := o.API.Dial(dial...)
	if err != nil {
		return err
	}
	defer conn.Close()
	s, err := New(Config{Conn: conn, Addr: o.Listen, FreeBind: o.FreeBind, Zone: o.Zone, TTL: o.TTL, Upstreams: upstreams, Logger: o.Logger})
	if err != nil {
		return err
	}
	if o.Logger != nil {
		o.Logger.Info("dns starting", "server", o.API.Server, "addr", s.Addr(), "zone", o.Zone, "upstreams", upstreams)
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
