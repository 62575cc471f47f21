// This file holds the flags every component that talks to the API service
// shares: Credentials.AddFlags (--server, --ca-file, --cert-file, --token,
// ...) and LeaderElectionFlags (Kubernetes' --leader-elect-*).

package client

import (
	"time"

	"github.com/spf13/pflag"
)

// ServerFlagHelp is the help of every component's --server flag.
const ServerFlagHelp = "the API service's gRPC address, or a comma-separated list of its replicas' (calls are balanced over the healthy ones and fail over)"

// AddFlags adds the connection flags to f, filling c; user names the
// identity the certificate or token should carry, for the help text.
func (c *Credentials) AddFlags(f *pflag.FlagSet, user string) {
	f.StringVar(&c.Server, "server", "127.0.0.1:6443", ServerFlagHelp)
	f.StringVar(&c.CAFile, "ca-file", "", "CA bundle to verify the API service's certificate")
	f.StringVar(&c.CertFile, "cert-file", "", "client certificate (CN "+user+")")
	f.StringVar(&c.KeyFile, "key-file", "", "client key for --cert-file")
	f.StringVar(&c.Token, "token", "", "bearer token of "+user)
	f.StringVar(&c.TokenFile, "token-file", "", "file holding the bearer token (keeps it out of the process list)")
	f.BoolVar(&c.Plaintext, "insecure-plaintext", false, "plaintext gRPC to the API service (local experiments only)")
}

// LeaderElectionFlags choose whether a replicated component elects a
// leader through a coordination/v1 Lease, and the Lease's timing.
type LeaderElectionFlags struct {
	Enabled                      bool
	Name, Namespace, Identity    string
	LeaseDuration, RenewDeadline time.Duration
	RetryPeriod                  time.Duration
}

// AddFlags adds the flags with Kubernetes' names and defaults; lease is the
// default Lease name, acts what only the leader does, for the help text.
func (l *LeaderElectionFlags) AddFlags(f *pflag.FlagSet, lease, acts string) {
	f.BoolVar(&l.Enabled, "leader-elect", true, "run as one of several replicas; only the holder of the Lease "+acts)
	f.StringVar(&l.Name, "leader-elect-resource-name", lease, "name of the leader-election Lease")
	f.StringVar(&l.Namespace, "leader-elect-resource-namespace", "kube-system", "namespace of the leader-election Lease")
	f.StringVar(&l.Identity, "leader-elect-identity", "", "this replica's holder identity in the Lease (default hostname_random)")
	f.DurationVar(&l.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long standbys wait after the last renewal before taking over")
	f.DurationVar(&l.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before it stops leading")
	f.DurationVar(&l.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "wait between leader-election attempts")
}
