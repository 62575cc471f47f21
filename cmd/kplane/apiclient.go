// This file holds the flags the components that talk to the API service
// share: the connection (client.Credentials) and leader election.

package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/kplane/kplane/services/client"
)

// registerCredentials adds the connection flags; user names the identity
// the certificate or token should carry, for the help text.
func registerCredentials(f *pflag.FlagSet, c *client.Credentials, user string) {
	f.StringVar(&c.Server, "server", "127.0.0.1:6443", serverFlagHelp)
	f.StringVar(&c.CAFile, "ca-file", "", "CA bundle to verify the API service's certificate")
	f.StringVar(&c.CertFile, "cert-file", "", "client certificate (CN "+user+")")
	f.StringVar(&c.KeyFile, "key-file", "", "client key for --cert-file")
	f.StringVar(&c.Token, "token", "", "bearer token of "+user)
	f.StringVar(&c.TokenFile, "token-file", "", "file holding the bearer token (keeps it out of the process list)")
	f.BoolVar(&c.Plaintext, "insecure-plaintext", false, "plaintext gRPC to the API service (local experiments only)")
}

// serverFlagHelp is the help of every component's --server flag.
const serverFlagHelp = "the API service's gRPC address, or a comma-separated list of its replicas' (calls are balanced over the healthy ones and fail over)"

// leaderElectFlags choose whether a replicated component elects a leader
// through a coordination/v1 Lease, and the Lease's timing.
type leaderElectFlags struct {
	enabled                      bool
	name, namespace, identity    string
	leaseDuration, renewDeadline time.Duration
	retryPeriod                  time.Duration
}

// register adds the flags with Kubernetes' names and defaults; lease is the
// default Lease name, acts what only the leader does, for the help text.
func (l *leaderElectFlags) register(f *pflag.FlagSet, lease, acts string) {
	f.BoolVar(&l.enabled, "leader-elect", true, "run as one of several replicas; only the holder of the Lease "+acts)
	f.StringVar(&l.name, "leader-elect-resource-name", lease, "name of the leader-election Lease")
	f.StringVar(&l.namespace, "leader-elect-resource-namespace", "kube-system", "namespace of the leader-election Lease")
	f.StringVar(&l.identity, "leader-elect-identity", "", "this replica's holder identity in the Lease (default hostname_random)")
	f.DurationVar(&l.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long standbys wait after the last renewal before taking over")
	f.DurationVar(&l.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before it stops leading")
	f.DurationVar(&l.retryPeriod, "leader-elect-retry-period", 2*time.Second, "wait between leader-election attempts")
}
