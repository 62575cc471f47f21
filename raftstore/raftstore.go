// Package raftstore runs one member of kplane's replicated store: an MVCC
// key-value state machine (raftstore/mvcc, applied by raftstore/fsm) on a
// hashicorp/raft node (raftstore/raftnode), serving the etcd v3 gRPC API
// (raftstore/etcdserver) on its client URL. Configure it with the same
// settings as an etcd member; New prepares it, Run serves until ctx ends.
package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/raftstore/etcdserver"
	"github.com/kplane/kplane/raftstore/fsm"
	"github.com/kplane/kplane/raftstore/mvcc"
	"github.com/kplane/kplane/raftstore/raftnode"
)

// Config mirrors etcd's member flags.
type Config struct {
	Name    string
	DataDir string
	// ListenClientURLs are served; AdvertiseClientURLs are told to other
	// members and clients (default: the listen URLs).
	ListenClientURLs    []string
	AdvertiseClientURLs []string
	// ListenPeerURL is where Raft's transport listens (one URL);
	// InitialAdvertisePeerURL is the peer URL others dial (default: the
	// listen URL).
	ListenPeerURL           string
	InitialAdvertisePeerURL string
	// InitialCluster is etcd's "name1=http://host:port,name2=..." list.
	InitialCluster string
	// InitialClusterState is "new" (bootstrap with InitialCluster) or
	// "existing" (join a cluster this member was added to with MemberAdd).
	InitialClusterState string
	InitialClusterToken string

	MaxRequestBytes int
	MaxTxnOps       int

	// Raft timing; zero means raftnode's defaults. In-process tests shorten
	// them.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// SnapshotThreshold is etcd's --snapshot-count: committed entries
	// between snapshots (default DefaultSnapshotCount). TrailingLogs is
	// etcd's --snapshot-catchup-entries: entries kept in the log after a
	// snapshot (default DefaultSnapshotCatchUpEntries); a follower further
	// behind catches up from a snapshot.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// RaftLogStore is raftnode.Config.LogStore: "wal" (the default) or
	// "bolt".
	RaftLogStore string
	// LeaseCheckInterval and MinLeaseTTL: see etcdserver.Config.
	LeaseCheckInterval time.Duration
	MinLeaseTTL        int64

	// ClientTLS serves the client URLs over TLS (etcd's --cert-file,
	// --key-file, --trusted-ca-file, --client-cert-auth and the
	// --client-cert-allowed-cn/-hostname allow-lists); the member also
	// reaches the leader's client URL with it. PeerTLS does the same for
	// the Raft transport (--peer-*). Empty: plaintext, http:// URLs.
	ClientTLS, PeerTLS TLSInfo

	// AutoCompaction is etcd's --auto-compaction-mode and
	// --auto-compaction-retention (etcdserver.ParseAutoCompaction); the zero
	// value, the default, never compacts. Clock drives its schedule (nil:
	// the real clock; tests pass a fake one).
	AutoCompaction etcdserver.AutoCompaction
	Clock          etcdserver.Clock

	// UnsafeUnverifiedReads: see etcdserver.Config. Fault injection only.
	UnsafeUnverifiedReads bool

	Logger *slog.Logger
	// TracerProvider and MeterProvider instrument the gRPC server (a span
	// and rpc.server.* metrics per call), the raft.apply span and the Raft
	// gauges; nil uses the global ones.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// The defaults of Config.SnapshotThreshold and Config.TrailingLogs.
const (
	DefaultSnapshotCount          = raftnode.DefaultSnapshotThreshold
	DefaultSnapshotCatchUpEntries = raftnode.DefaultTrailingLogs
)

// ErrRemoved is returned by Run when this member was removed from the
// cluster (its Raft node shut itself down).
var ErrRemoved = errors.New("raftstore: this member was removed from the cluster")

// Store is one prepared member.
type Store struct {
	cfg       Config
	log       *slog.Logger
	memberID  uint64
	clusterID uint64
	mvcc      *mvcc.Store
	fsm       *fsm.FSM
	node      *raftnode.Node
	server    *etcdserver.Server
	grpc      *grpc.Server
	listeners []net.Listener
}

// ParseInitialCluster parses "name=url,name=url" into a name→peer URL map.
func ParseInitialCluster(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, u, ok := strings.Cut(part, "=")
		if !ok || name == "" || u == "" {
			return nil, fmt.Errorf("initial cluster entry %q: want name=peer-url", part)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("initial cluster: member %q given twice", name)
		}
		out[name] = u
	}
	return out, nil
}

// initialMembers parses the initial cluster and checks that it names this
// member with the peer URL it advertises.
func initialMembers(name, initialCluster, advertisePeerURL string) (map[string]string, error) {
	members, err := ParseInitialCluster(initialCluster)
	if err != nil {
		return nil, err
	}
	if u, ok := members[name]; !ok {
		return nil, fmt.Errorf("initial cluster %q does not name this member %q", initialCluster, name)
	} else if u != advertisePeerURL {
		return nil, fmt.Errorf("initial cluster gives %s peer URL %s, but --initial-advertise-peer-urls is %s", name, u, advertisePeerURL)
	}
	return members, nil
}

// raftServers is the Raft configuration of a new cluster of these members
// (name to peer URL): each a voter whose ID is derived from its peer URL, in
// name order.
func raftServers(members map[string]string) ([]raft.Server, error) {
	names := make([]string, 0, len(members))
	for n := range members {
		names = append(names, n)
	}
	sort.Strings(names)
	servers := make([]raft.Server, 0, len(names))
	for _, n := range names {
		addr, err := hostPort(members[n])
		if err != nil {
			return nil, fmt.Errorf("initial cluster member %s: %w", n, err)
		}
		servers = append(servers, raft.Server{
			Suffrage: raft.Voter,
			ID:       raft.ServerID(etcdserver.MemberIDString(etcdserver.MemberID(members[n]))),
			Address:  raft.ServerAddress(addr),
		})
	}
	return servers, nil
}

func hostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("url %q: %w", raw, err)
	}
	if u.Host == "" {
		return "", fmt.Errorf("url %q has no host:port", raw)
	}
	return u.Host, nil
}

// New validates cfg, opens the member's data directory, starts Raft (which
// already talks to peers) and binds the client listeners; Run serves them.
func New(cfg Config) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Name == "" {
		cfg.Name = "default"
	}
	if cfg.DataDir == "" {
		cfg.DataDir = cfg.Name + ".kplane"
	}
	if len(cfg.ListenClientURLs) == 0 {
		cfg.ListenClientURLs = []string{"http://127.0.0.1:2379"}
	}
	if len(cfg.AdvertiseClientURLs) == 0 {
		cfg.AdvertiseClientURLs = cfg.ListenClientURLs
	}
	if cfg.ListenPeerURL == "" {
		cfg.ListenPeerURL = defaultPeerURL
	}
	if cfg.InitialAdvertisePeerURL == "" {
		cfg.InitialAdvertisePeerURL = cfg.ListenPeerURL
	}
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.Name + "=" + cfg.InitialAdvertisePeerURL
	}
	if cfg.InitialClusterState == "" {
		cfg.InitialClusterState = "new"
	}
	if cfg.InitialClusterToken == "" {
		cfg.InitialClusterToken = "etcd-cluster"
	}
	if cfg.InitialClusterState != "new" && cfg.InitialClusterState != "existing" {
		return nil, fmt.Errorf("initial cluster state %q: want new or existing", cfg.InitialClusterState)
	}
	log := cfg.Logger.With("member", cfg.Name)
	tlsCfg, err := cfg.tls(log)
	if err != nil {
		return nil, err
	}

	members, err := initialMembers(cfg.Name, cfg.InitialCluster, cfg.InitialAdvertisePeerURL)
	if err != nil {
		return nil, err
	}
	var bootstrap []raft.Server
	if cfg.InitialClusterState == "new" {
		if bootstrap, err = raftServers(members); err != nil {
			return nil, err
		}
	}
	bind, err := hostPort(cfg.ListenPeerURL)
	if err != nil {
		return nil, fmt.Errorf("listen peer url: %w", err)
	}
	advertise, err := hostPort(cfg.InitialAdvertisePeerURL)
	if err != nil {
		return nil, fmt.Errorf("advertise peer url: %w", err)
	}

	s := &Store{
		cfg:       cfg,
		log:       log,
		memberID:  etcdserver.MemberID(cfg.InitialAdvertisePeerURL),
		clusterID: etcdserver.ClusterID(cfg.InitialClusterToken),
	}
	// Bind the client listeners first: a port that is taken fails New before
	// Raft starts.
	for _, u := range cfg.ListenClientURLs {
		hp, err := hostPort(u)
		if err != nil {
			s.closeListeners()
			return nil, fmt.Errorf("listen client url: %w", err)
		}
		l, err := net.Listen("tcp", hp)
		if err != nil {
			s.closeListeners()
			return nil, fmt.Errorf("listen for clients: %w", err)
		}
		s.listeners = append(s.listeners, l)
	}

	s.mvcc = mvcc.New(mvcc.Config{Logger: log.With("component", "mvcc")})
	s.fsm = fsm.New(s.mvcc, log.With("component", "fsm"))
	node, err := raftnode.New(raftnode.Config{
		ID:                 raft.ServerID(etcdserver.MemberIDString(s.memberID)),
		BindAddr:           bind,
		AdvertiseAddr:      advertise,
		Dir:                raftDir(cfg.DataDir),
		Bootstrap:          bootstrap,
		HeartbeatTimeout:   cfg.HeartbeatTimeout,
		ElectionTimeout:    cfg.ElectionTimeout,
		LeaderLeaseTimeout: cfg.LeaderLeaseTimeout,
		SnapshotThreshold:  cfg.SnapshotThreshold,
		SnapshotInterval:   cfg.SnapshotInterval,
		TrailingLogs:       cfg.TrailingLogs,
		LogStore:           cfg.RaftLogStore,
		ServeTLS:           tlsCfg.peerServe,
		DialTLS:            tlsCfg.peerDial,
		Logger:             log,
	}, s.fsm)
	if err != nil {
		s.closeListeners()
		s.mvcc.Close()
		return nil, err
	}
	s.node = node
	s.server = etcdserver.New(etcdserver.Config{
		Name:                  cfg.Name,
		MemberID:              s.memberID,
		ClusterID:             s.clusterID,
		ClientURLs:            cfg.AdvertiseClientURLs,
		MaxRequestBytes:       cfg.MaxRequestBytes,
		MaxTxnOps:             cfg.MaxTxnOps,
		MinLeaseTTL:           cfg.MinLeaseTTL,
		LeaseCheckInterval:    cfg.LeaseCheckInterval,
		UnsafeUnverifiedReads: cfg.UnsafeUnverifiedReads,
		DialTLS:               tlsCfg.clientDial,
		PeerTLS:               tlsCfg.peerServe != nil,
		AutoCompaction:        cfg.AutoCompaction,
		Clock:                 cfg.Clock,
		Logger:                log.With("component", "etcdserver"),
		TracerProvider:        cfg.TracerProvider,
	}, node, s.fsm)
	maxReq := cfg.MaxRequestBytes
	if maxReq <= 0 {
		maxReq = etcdserver.DefaultMaxRequestBytes
	}
	opts := []grpc.ServerOption{
		// A pool of stream workers instead of a goroutine per request: a
		// worker's stack has already grown to what a request needs, where a
		// fresh goroutine grows (copies) its stack on every request. Measured
		// on the put benchmark: 12-17 % more puts/s (BENCHMARKS.md).
		grpc.NumStreamWorkers(uint32(4 * runtime.GOMAXPROCS(0))),
		// A write's span is its raft.apply (etcdserver.Server.propose),
		// from the proposal to its apply here: otelgrpc's server span
		// would cover the same interval, so those methods get none.
		grpc.StatsHandler(telemetry.ServerHandlerWithSpans(cfg.TracerProvider, cfg.MeterProvider, etcdserver.ProposingMethods()...)),
		grpc.ChainUnaryInterceptor(s.server.UnaryInterceptor),
		grpc.ChainStreamInterceptor(s.server.StreamInterceptor),
		grpc.MaxRecvMsgSize(maxReq + etcdserver.GRPCOverheadBytes),
		grpc.MaxSendMsgSize(1<<31 - 1),
		grpc.MaxConcurrentStreams(1<<31 - 1),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if tlsCfg.clientServe != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg.clientServe)))
	}
	s.grpc = grpc.NewServer(opts...)
	s.server.Register(s.grpc)
	// gRPC's standard health service, as etcd serves it.
	healthpb.RegisterHealthServer(s.grpc, health.NewServer())
	return s, nil
}

func (s *Store) closeListeners() {
	for _, l := range s.listeners {
		l.Close()
	}
}

// MemberID returns the member's ID; ClusterID the cluster's.
func (s *Store) MemberID() uint64  { return s.memberID }
func (s *Store) ClusterID() uint64 { return s.clusterID }

// ClientAddrs returns the host:port the client listeners are bound to.
func (s *Store) ClientAddrs() []string {
	out := make([]string, len(s.listeners))
	for i, l := range s.listeners {
		out[i] = l.Addr().String()
	}
	return out
}

// ClusterVersion returns the cluster version this member applied: the
// newest replicated format every member reads (fsm.Version1 until the
// leader has heard from every member).
func (s *Store) ClusterVersion() uint32 { return s.fsm.ClusterVersion() }

// Raft exposes the member's Raft node (for tests and status).
func (s *Store) Raft() *raft.Raft { return s.node.Raft }

// Run serves clients until ctx ends, then stops the gRPC server, Raft and
// the store. It returns the first serving error, if any.
func (s *Store) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mp := s.cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	reg, merr := s.registerMetrics(mp)
	if merr != nil {
		return merr
	}
	defer func() { _ = reg.Unregister() }()
	var wg sync.WaitGroup
	errc := make(chan error, len(s.listeners)+2)
	for _, l := range s.listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.grpc.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("serve %s: %w", l.Addr(), err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = s.server.Run(ctx)
	}()
	// Raft shuts itself down when this member is removed from the cluster;
	// the member then has nothing left to serve and exits, as etcd does.
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if s.node.Raft.State() == raft.Shutdown {
				errc <- ErrRemoved
				return
			}
		}
	}()
	s.log.Info("store member started", "id", etcdserver.MemberIDString(s.memberID), "clients", s.ClientAddrs(), "peer", s.cfg.InitialAdvertisePeerURL)

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		s.grpc.Stop()
	}
	wg.Wait()
	err = errors.Join(err, s.node.Close())
	s.mvcc.Close()
	return err
}
