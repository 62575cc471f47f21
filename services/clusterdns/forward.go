// This file holds the forwarding of names outside the zone to the upstream
// name servers, and reading them from a resolv.conf.

package clusterdns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/miekg/dns"
)

// forwarder relays queries to upstream servers, in order, until one answers.
type forwarder struct {
	upstreams []string
}

// exchange sends r to each upstream in turn (over TCP when the client came
// over TCP, else UDP, retrying a truncated UDP answer over TCP) and returns
// the first answer.
func (f *forwarder) exchange(ctx context.Context, r *dns.Msg, tcp bool) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var errs []error
	for _, u := range f.upstreams {
		netw := "udp"
		if tcp {
			netw = "tcp"
		}
		c := &dns.Client{Net: netw, Timeout: 2 * time.Second}
		resp, _, err := c.ExchangeContext(ctx, r.Copy(), u)
		if err == nil && resp.Truncated && !tcp {
			c.Net = "tcp"
			resp, _, err = c.ExchangeContext(ctx, r.Copy(), u)
		}
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", u, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// UpstreamsFromResolvConf returns the name servers of a resolv.conf file
// as host:port addresses.
func UpstreamsFromResolvConf(path string) ([]string, error) {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("clusterdns: %s: %w", path, err)
	}
	out := make([]string, 0, len(cc.Servers))
	for _, s := range cc.Servers {
		out = append(out, net.JoinHostPort(s, cc.Port))
	}
	return out, nil
}
