// This file holds Config.AddFlags: `kplane simruntime`'s flags, each
// filling its Config field.

package simruntime

import "github.com/spf13/pflag"

// AddFlags adds the runtime's flags to f, filling c.
func (c *Config) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&c.Socket, "socket", "/run/kplane/simruntime.sock", "unix socket to serve the CRI on")
	f.StringVar(&c.Name, "name", "sim", "runtime name (seeds IDs; the node's name when run by a node agent)")
	f.StringVar(&c.PodCIDR, "pod-cidr", "", "CIDR pod IPs come from (empty: none until UpdateRuntimeConfig gives one)")
	f.DurationVar(&c.PullLatency, "pull-latency", 0, "how long an image pull takes unless the image's tag says otherwise")
	f.StringSliceVar(&c.Images, "image", nil, "image present from the start (repeatable)")
}
