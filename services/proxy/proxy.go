// Package proxy is kplane's Service proxy (`kplane proxy`), what
// kube-proxy's nftables mode does: it watches Services, EndpointSlices
// and the Nodes it serves through the API service and keeps one nftables
// table (IPv4) so that connections to a Service's cluster IP, and to its
// node ports on any local address, reach its ready endpoints, balanced at
// random, with session affinity, the traffic policies, masquerading of
// what would otherwise not come back, and a reject for a port without
// endpoints.
//
// One proxy serves every node of its host: `kplane up` runs several node
// agents on one host, whose pods all sit behind the host's single network
// namespace, so one table must serve them all (two tables would both
// claim every cluster IP). The nodes' pod CIDRs, read from their Node
// objects, tell which node a pod's packet comes from, which the Local
// traffic policies need.
//
// Each sync rewrites the table from the caches in one transaction
// (syncs are coalesced: at most one per MinSyncPeriod, and one every
// SyncPeriod whatever happens); the first one replaces whatever an
// earlier run left. On exit the rules stay, as kube-proxy leaves them, so
// connections keep working while the proxy restarts; Config.CleanupOnExit
// deletes the table instead.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/knftables"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	"github.com/kplane/kplane/services/client"
)

// Defaults of a Config.
const (
	DefaultTable         = "kplane-proxy"
	DefaultSyncPeriod    = 30 * time.Second
	DefaultMinSyncPeriod = time.Second
)

// Config configures a Proxier.
type Config struct {
	// Conn reaches the API service as the proxy's identity (ClusterRole
	// system:node-proxier).
	Conn grpc.ClientConnInterface
	// NFT is the table to program; nil: the IPv4 table named Table on
	// this host's kernel.
	NFT knftables.Interface
	// Table names the table when NFT is nil (default kplane-proxy).
	Table string
	// NodeNames are the nodes this proxy serves: those whose pods are
	// behind this host.
	NodeNames []string
	// ClusterCIDR is the cluster's pod network: a packet to a cluster IP
	// from outside it is masqueraded. Empty: none is (as kube-proxy
	// without --cluster-cidr); the host then reaches cluster IPs only
	// if the pods route back to it.
	ClusterCIDR string
	// SyncPeriod is how often the table is rewritten whatever changes;
	// MinSyncPeriod how close two syncs may be (changes in between are
	// coalesced into the next).
	SyncPeriod, MinSyncPeriod time.Duration
	// CleanupOnExit deletes the table when Run returns.
	CleanupOnExit bool
	// Logger; nil discards.
	Logger *slog.Logger
}

// Proxier keeps the table in step with the API service's Services.
type Proxier struct {
	cfg         Config
	log         *slog.Logger
	nft         knftables.Interface
	clusterCIDR netip.Prefix
	services    *client.Informer[*corev1.Service]
	slices      *client.Informer[*discoveryv1.EndpointSlice]
	nodes       *client.Informer[*corev1.Node]
	events      *client.Recorder
	kick        chan struct{}

	mu     sync.Mutex
	synced bool                // the table has been written once
	noted  map[string]struct{} // uid/message of the notes of the last sync
	stats  Stats
}

// Stats count what a Proxier did.
type Stats struct {
	Syncs, Failures int64
	// ServicePorts is how many service ports the last sync programmed.
	ServicePorts int
}

const indexSliceOwner = "service"

// retryPeriod is the least wait before retrying a failed sync;
// syncTimeout bounds one (an nft that hangs is killed and the sync
// retried); a sync slower than slowSync is logged as a warning.
const (
	retryPeriod = time.Second
	syncTimeout = 30 * time.Second
	slowSync    = 5 * time.Second
)

// New validates cfg and builds the informers and the nftables handle.
func New(cfg Config) (*Proxier, error) {
	if cfg.Conn == nil {
		return nil, errors.New("proxy: Config.Conn is required")
	}
	if len(cfg.NodeNames) == 0 {
		return nil, errors.New("proxy: at least one node name is required")
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.SyncPeriod <= 0 {
		cfg.SyncPeriod = DefaultSyncPeriod
	}
	if cfg.MinSyncPeriod < 0 {
		return nil, fmt.Errorf("proxy: negative min sync period %s", cfg.MinSyncPeriod)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxier{cfg: cfg, log: log.With("component", "proxy"), nft: cfg.NFT, kick: make(chan struct{}, 1), noted: map[string]struct{}{}}
	if cfg.ClusterCIDR != "" {
		pfx, err := netip.ParsePrefix(cfg.ClusterCIDR)
		if err != nil || !pfx.Addr().Is4() {
			return nil, fmt.Errorf("proxy: cluster CIDR %q: want an IPv4 prefix (%v)", cfg.ClusterCIDR, err)
		}
		p.clusterCIDR = pfx.Masked()
	}
	if p.nft == nil {
		nft, err := knftables.New(knftables.IPv4Family, cfg.Table)
		if err != nil {
			return nil, fmt.Errorf("proxy: nftables: %w", err)
		}
		p.nft = nft
	}
	svcs, err := client.New[*corev1.Service](cfg.Conn)
	if err != nil {
		return nil, err
	}
	sl, err := client.New[*discoveryv1.EndpointSlice](cfg.Conn)
	if err != nil {
		return nil, err
	}
	nodes, err := client.New[*corev1.Node](cfg.Conn)
	if err != nil {
		return nil, err
	}
	events, err := client.New[*corev1.Event](cfg.Conn)
	if err != nil {
		return nil, err
	}
	p.services = client.NewInformer(client.ListWatch(svcs, "", "", "", 500), client.InformerOptions[*corev1.Service]{Logger: log})
	p.slices = client.NewInformer(client.ListWatch(sl, "", LabelServiceName, "", 500), client.InformerOptions[*discoveryv1.EndpointSlice]{
		Logger: log, Indexers: map[string]client.IndexFunc[*discoveryv1.EndpointSlice]{indexSliceOwner: sliceOwner}})
	p.nodes = client.NewInformer(client.ListWatch(nodes, "", "", "", 500), client.InformerOptions[*corev1.Node]{Logger: log})
	p.events = client.NewRecorder(client.RecorderConfig{Sink: events, Component: "kplane-proxy", Logger: log})
	onAny(p.services, p.changed)
	onAny(p.slices, p.changed)
	// Nodes change often (their status); only a served node's pod CIDR
	// matters here.
	served := func(n *corev1.Node) bool { return slices.Contains(cfg.NodeNames, n.GetMetadata().GetName()) }
	p.nodes.AddEventHandler(client.Handler[*corev1.Node]{
		OnAdd: func(n *corev1.Node) {
			if served(n) {
				p.changed()
			}
		},
		OnUpdate: func(o, n *corev1.Node) {
			if served(n) && o.GetSpec().GetPodCidr() != n.GetSpec().GetPodCidr() {
				p.changed()
			}
		},
		OnDelete: func(n *corev1.Node) {
			if served(n) {
				p.changed()
			}
		},
	})
	return p, nil
}

// onAny calls f on every notification of inf.
func onAny[T proto.Message](inf *client.Informer[T], f func()) {
	inf.AddEventHandler(client.Handler[T]{
		OnAdd:    func(T) { f() },
		OnUpdate: func(T, T) { f() },
		OnDelete: func(T) { f() },
	})
}

// sliceOwner indexes a slice by namespace/<its kubernetes.io/service-name>.
func sliceOwner(s *discoveryv1.EndpointSlice) []string {
	svc := s.GetMetadata().GetLabels()[LabelServiceName]
	if svc == "" {
		return nil
	}
	return []string{client.KeyOf(s.GetMetadata().GetNamespace(), svc)}
}

// changed asks for a sync; repeated asks before it runs are one.
func (p *Proxier) changed() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Stats returns the counts so far.
func (p *Proxier) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Run starts the informers, waits for their caches, then keeps the table
// in step until ctx ends. It returns ctx's error, or the cleanup's.
func (p *Proxier) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, run := range []func(context.Context) error{p.services.Run, p.slices.Run, p.nodes.Run} {
		wg.Go(func() { _ = run(ctx) })
	}
	wg.Go(func() { p.events.Run(ctx) })
	if !client.WaitForCacheSync(ctx, p.services, p.slices, p.nodes) {
		return ctx.Err()
	}
	p.log.Info("proxy syncing", "table", p.cfg.Table, "nodes", p.cfg.NodeNames, "clusterCIDR", p.cfg.ClusterCIDR)
	if !p.clusterCIDR.IsValid() {
		p.log.Warn("proxy: no cluster CIDR: traffic to cluster IPs from outside the pod network is not masqueraded")
	}
	periodic := time.NewTicker(p.cfg.SyncPeriod)
	defer periodic.Stop()
	var last time.Time
	pending, failed := true, false
	for {
		if pending {
			gap := p.cfg.MinSyncPeriod
			if failed {
				gap = max(gap, retryPeriod) // never a tight loop on a failing kernel
			}
			if wait := gap - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return p.exit()
				case <-time.After(wait):
				}
			}
			// Drain a kick that came before this sync: it is covered.
			select {
			case <-p.kick:
			default:
			}
			last = time.Now()
			sctx, done := context.WithTimeout(ctx, syncTimeout)
			err := p.Sync(sctx)
			done()
			if took := time.Since(last); took > slowSync {
				p.log.Warn("proxy sync slow", "took", took, "err", err)
			}
			if err != nil {
				p.log.Error("proxy sync failed; retrying", "err", err)
				failed = true
				continue // pending stays: after the gap, again
			}
			pending, failed = false, false
		}
		select {
		case <-ctx.Done():
			return p.exit()
		case <-p.kick:
			pending = true
		case <-periodic.C:
			pending = true
		}
	}
}

// exit deletes the table when asked to; the rules stay otherwise.
func (p *Proxier) exit() error {
	if !p.cfg.CleanupOnExit {
		return context.Canceled
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := DeleteTable(ctx, p.nft); err != nil {
		return err
	}
	p.log.Info("proxy table deleted", "table", p.cfg.Table)
	return context.Canceled
}

// Sync computes the table from the caches and writes it in one
// transaction. The first sync replaces the whole table.
func (p *Proxier) Sync(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ports, notes := buildModel(p.services.Store().List(), func(ns, name string) []*discoveryv1.EndpointSlice {
		out, _ := p.slices.Store().ByIndex(indexSliceOwner, client.KeyOf(ns, name))
		return out
	})
	p.note(notes)
	rs := buildRuleset(ports, p.topology())
	var ex existing
	if p.synced {
		var err error
		if ex, err = listExisting(ctx, p.nft); err != nil {
			p.stats.Failures++
			return err
		}
	}
	tx := p.nft.NewTransaction()
	fillTransaction(tx, rs, !p.synced, ex)
	start := time.Now()
	if err := p.nft.Run(ctx, tx); err != nil {
		p.stats.Failures++
		return fmt.Errorf("proxy: nftables transaction: %w", err)
	}
	p.synced = true
	p.stats.Syncs++
	p.stats.ServicePorts = len(ports)
	p.log.Debug("proxy synced", "servicePorts", len(ports), "operations", tx.NumOperations(), "took", time.Since(start))
	return nil
}

// topology reads the served nodes' pod CIDRs from the Node cache. A node
// not registered yet, or without a pod CIDR, is still served (its
// endpoints count as this host's), but its pods cannot be told apart.
func (p *Proxier) topology() topology {
	t := topology{ClusterCIDR: p.clusterCIDR}
	names := slices.Clone(p.cfg.NodeNames)
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		hn := hostNode{Name: n}
		if node, ok := p.nodes.Store().GetByName("", n); ok {
			if pfx, err := netip.ParsePrefix(node.GetSpec().GetPodCidr()); err == nil && pfx.Addr().Is4() {
				hn.PodCIDR = pfx.Masked()
			}
		}
		t.Nodes = append(t.Nodes, hn)
	}
	return t
}

// note logs and records as Warning Events the notes not given at the
// previous sync: once per Service and message while it applies (again if
// it stops and comes back); what no longer applies is forgotten.
func (p *Proxier) note(notes []note) {
	prev := p.noted
	p.noted = make(map[string]struct{}, len(notes))
	for _, n := range notes {
		key := n.svc.GetMetadata().GetUid() + "/" + n.message
		p.noted[key] = struct{}{}
		if _, ok := prev[key]; ok {
			continue
		}
		p.log.Warn("proxy: part of a Service is not programmed", "service",
			client.KeyOf(n.svc.GetMetadata().GetNamespace(), n.svc.GetMetadata().GetName()), "why", n.message)
		p.events.Eventf(n.svc, client.EventWarning, "NotProgrammed", "%s", n.message)
	}
}
