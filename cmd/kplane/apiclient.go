// This file holds what the components that talk to the API service share:
// the connection flags and dialing, the leader-election flags, and the
// logger every subcommand builds from --log-level.

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/services/client"
)

// newLogger returns a text logger on stderr at the given level (debug, info,
// warn or error).
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// apiClientFlags say how a component reaches the API service and who it is
// there: a client certificate, or a bearer token.
type apiClientFlags struct {
	server, caFile, certFile, keyFile string
	token, tokenFile                  string
	plaintext                         bool
}

// register adds the flags; user names the identity the certificate or token
// should carry, for the help text.
func (a *apiClientFlags) register(f *pflag.FlagSet, user string) {
	f.StringVar(&a.server, "server", "127.0.0.1:6443", serverFlagHelp)
	f.StringVar(&a.caFile, "ca-file", "", "CA bundle to verify the API service's certificate")
	f.StringVar(&a.certFile, "cert-file", "", "client certificate (CN "+user+")")
	f.StringVar(&a.keyFile, "key-file", "", "client key for --cert-file")
	f.StringVar(&a.token, "token", "", "bearer token of "+user)
	f.StringVar(&a.tokenFile, "token-file", "", "file holding the bearer token (keeps it out of the process list)")
	f.BoolVar(&a.plaintext, "insecure-plaintext", false, "plaintext gRPC to the API service (local experiments only)")
}

// dial connects to the API service with the flags' credentials; extra
// carries the telemetry stats handler.
func (a *apiClientFlags) dial(extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	token := a.token
	if a.tokenFile != "" {
		b, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	creds := insecure.NewCredentials()
	if !a.plaintext {
		tlsCfg, err := clientTLS(a.caFile, a.certFile, a.keyFile)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tlsCfg)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, extra...)
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(token)))
	}
	return client.Dial(client.SplitServers(a.server), opts...)
}

// serverFlagHelp is the help of every component's --server flag.
const serverFlagHelp = "the API service's gRPC address, or a comma-separated list of its replicas' (calls are balanced over the healthy ones and fail over)"

// bearerToken sends a bearer token with every call.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so --insecure-plaintext works for local experiments.
func (bearerToken) RequireTransportSecurity() bool { return false }

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
