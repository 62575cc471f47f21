// This file holds Options: `kplane dns`'s settings as its flags name them,
// with AddFlags, and Upstreams, which turns --forward into addresses.

package clusterdns

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

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
