// This file holds Options and RunStandard: the Service proxy as `kplane
// proxy` runs it — its flags (those of kube-proxy's it has, by
// kube-proxy's names), the connection to the API service, and the
// one-shot --cleanup — so that the command only wires them.

package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"sigs.k8s.io/knftables"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/services/client"
)

// User is the identity the proxy authenticates as (the API service's
// bootstrap policy binds it to system:node-proxier, kube-proxy's role).
const User = "system:kplane-proxy"

// Options are the proxy's settings as its flags name them.
type Options struct {
	// API names the API service and the proxy's identity there.
	API client.Credentials
	// NodeNames are the nodes served (comma-separated in the flag).
	NodeNames []string
	// ClusterCIDR, Table, SyncPeriod, MinSyncPeriod, CleanupOnExit: see
	// Config.
	ClusterCIDR, Table        string
	SyncPeriod, MinSyncPeriod time.Duration
	CleanupOnExit             bool
	// Cleanup deletes the table and exits, as kube-proxy --cleanup.
	Cleanup bool
	// Logger (nil: none) and Telemetry (nil: none) are the process's.
	Logger    *slog.Logger
	Telemetry *telemetry.Telemetry
}

// AddFlags adds `kplane proxy`'s flags to f, filling o.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.API.AddFlags(f, User)
	f.StringSliceVar(&o.NodeNames, "node-name", nil, "the nodes this proxy serves: every node whose pods are behind this host (comma-separated; their pod CIDRs are read from their Node objects)")
	f.StringVar(&o.ClusterCIDR, "cluster-cidr", "", "the cluster's pod network (IPv4): traffic to a cluster IP from outside it is masqueraded; empty: none is")
	f.StringVar(&o.Table, "table", DefaultTable, "the nftables table (family ip) the proxy owns")
	f.DurationVar(&o.SyncPeriod, "sync-period", DefaultSyncPeriod, "how often the table is rewritten whatever changes")
	f.DurationVar(&o.MinSyncPeriod, "min-sync-period", DefaultMinSyncPeriod, "the least time between two syncs; changes in between are coalesced")
	f.BoolVar(&o.CleanupOnExit, "cleanup-on-exit", false, "delete the table on a clean stop (by default the rules stay, as kube-proxy leaves them, so Services keep working while the proxy restarts)")
	f.BoolVar(&o.Cleanup, "cleanup", false, "delete the table and exit")
}

// RunStandard connects to the API service and runs the proxy until ctx
// ends (a clean stop: nil), or with Cleanup deletes the table and
// returns.
func RunStandard(ctx context.Context, o Options) error {
	log := o.Logger
	table := o.Table
	if table == "" {
		table = DefaultTable
	}
	if o.Cleanup {
		nft, err := knftables.New(knftables.IPv4Family, table)
		if err != nil {
			return fmt.Errorf("proxy: nftables: %w", err)
		}
		return DeleteTable(ctx, nft)
	}
	var nodes []string
	for _, n := range o.NodeNames {
		if n = strings.TrimSpace(n); n != "" {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return errors.New("--node-name: name at least one node")
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
	p, err := New(Config{Conn: conn, Table: table, NodeNames: nodes, ClusterCIDR: o.ClusterCIDR,
		SyncPeriod: o.SyncPeriod, MinSyncPeriod: o.MinSyncPeriod, CleanupOnExit: o.CleanupOnExit, Logger: log})
	if err != nil {
		return err
	}
	if log != nil {
		log.Info("proxy starting", "server", o.API.Server, "table", table, "nodes", nodes, "clusterCIDR", o.ClusterCIDR)
	}
	if err := p.Run(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
