// Package etcdserver serves the etcd v3 gRPC API (KV, Watch, Lease, Cluster,
// Maintenance) over one member's Raft node and MVCC store, and the small
// internal service through which followers forward writes, read-index
// requests and lease keep-alives to the leader.
package etcdserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/kplane/kplane/raftstore/fsm"
	"github.com/kplane/kplane/raftstore/mvcc"
	"github.com/kplane/kplane/raftstore/raftnode"
)

// Version is the etcd server version the store reports; etcdctl and the
// etcd client accept it.
const Version = "3.6.0"

// DefaultMaxRequestBytes and DefaultMaxTxnOps are etcd's defaults.
const (
	DefaultMaxRequestBytes = 1536 * 1024
	DefaultMaxTxnOps       = 128
	// GRPCOverheadBytes is what the gRPC server accepts beyond
	// MaxRequestBytes, so that a request just over the limit gets etcd's
	// "request is too large" rather than a transport error.
	GRPCOverheadBytes = 512 * 1024
)

// ProposingMethods are the gRPC methods whose work is a proposal, traced
// as its raft.apply span (propose), which starts when the call's work does
// and ends with it: a server span of the call's own would cover the same
// interval. A read-only Txn proposes nothing; it gets a span of its own
// (kvServer.Txn).
func ProposingMethods() []string {
	return []string{
		"/etcdserverpb.KV/Put", "/etcdserverpb.KV/DeleteRange", "/etcdserverpb.KV/Txn", "/etcdserverpb.KV/Compact",
		"/etcdserverpb.Lease/LeaseGrant", "/etcdserverpb.Lease/LeaseRevoke",
	}
}

// Config is what the server needs to know about its member.
type Config struct {
	Name       string
	MemberID   uint64
	ClusterID  uint64
	ClientURLs []string // advertised; published to the members table

	MaxRequestBytes int // default DefaultMaxRequestBytes
	MaxTxnOps       int // default DefaultMaxTxnOps
	// MinLeaseTTL is the smallest TTL a lease is granted with, in seconds;
	// shorter requests are raised to it (as etcd does), so that a lease
	// survives a leader election. Default 2.
	MinLeaseTTL int64
	// LeaseCheckInterval is how often the leader looks for expired leases.
	// Default 500ms.
	LeaseCheckInterval time.Duration
	// UnsafeUnverifiedReads serves default (linearizable) ranges from local
	// state without confirming leadership. It exists only as a fault to
	// inject for the linearizability checker's own tests; never enable it
	// otherwise.
	UnsafeUnverifiedReads bool
	// NoLeaderGrace is how long a member may be without a leader before
	// streams that require one end with "no leader". Default 3s.
	NoLeaderGrace time.Duration
	// DialTLS, when set, is the TLS with which this member calls the
	// leader's client URL (forwarded writes, read indexes, lease renewals);
	// nil dials plaintext.
	DialTLS *tls.Config
	// PeerTLS says the Raft transport runs over TLS: members' peer URLs
	// are then https.
	PeerTLS bool
	// AutoCompaction is etcd's --auto-compaction-*; the zero value is off.
	AutoCompaction AutoCompaction
	// Clock drives auto-compaction's schedule; nil is the real clock.
	// Tests pass a fake one.
	Clock Clock

	Logger *slog.Logger
	// TracerProvider records a raft.apply span per write; nil uses the
	// global one.
	TracerProvider trace.TracerProvider
}

// Server is one member's etcd API.
type Server struct {
	cfg    Config
	node   *raftnode.Node
	raft   *raft.Raft
	fsm    *fsm.FSM
	store  *mvcc.Store
	log    *slog.Logger
	tracer trace.Tracer

	nextID       atomic.Uint64
	verifier     coalescer // the leader's VerifyLeader rounds
	followerRead coalescer // a follower's read-index requests
	// caughtUp is set once this member applied everything committed when
	// it started (see catchUp); serializable reads wait for it.
	caughtUp atomic.Bool

	barrierMu   sync.Mutex
	barrierTerm atomic.Uint64

	connsMu sync.Mutex
	conns   map[string]*grpc.ClientConn

	lessor *lessor
	// batch gathers the leader's concurrent proposals into one log entry;
	// forward gathers a follower's into one call to the leader.
	batch, forward batcher
}

// New returns a server for the member whose Raft node and FSM are given.
func New(cfg Config, node *raftnode.Node, f *fsm.FSM) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxTxnOps <= 0 {
		cfg.MaxTxnOps = DefaultMaxTxnOps
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MinLeaseTTL <= 0 {
		cfg.MinLeaseTTL = 2
	}
	if cfg.NoLeaderGrace <= 0 {
		cfg.NoLeaderGrace = 3 * time.Second
	}
	if cfg.LeaseCheckInterval <= 0 {
		cfg.LeaseCheckInterval = 500 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	s := &Server{
		tracer: cfg.TracerProvider.Tracer("github.com/kplane/kplane/raftstore"),
		cfg:    cfg,
		node:   node,
		raft:   node.Raft,
		fsm:    f,
		store:  f.Store(),
		log:    cfg.Logger,
		conns:  map[string]*grpc.ClientConn{},
	}
	s.verifier.run = func() (uint64, error) { return 0, node.VerifyLeader() }
	s.followerRead.run = s.askLeaderReadIndex
	// Request IDs: the member's low 16 bits, then a counter seeded from the
	// clock so that IDs from before a restart are not reused.
	s.nextID.Store(uint64(time.Now().UnixMilli()) << 8 & (1<<48 - 1))
	s.lessor = newLessor(s)
	s.batch.send = s.appendBatch
	s.forward.send = s.forwardBatch
	return s
}

// Register registers the etcd services and the internal peer service.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterKVServer(g, &kvServer{s: s})
	pb.RegisterWatchServer(g, &watchServer{s: s})
	pb.RegisterLeaseServer(g, &leaseServer{s: s})
	pb.RegisterClusterServer(g, &clusterServer{s: s})
	pb.RegisterMaintenanceServer(g, &maintenanceServer{s: s})
	registerPeerServer(g, &peerServer{s: s})
}

// Run runs the member's background work until ctx is done: publishing its
// name and client URLs through Raft, the barrier after winning an election,
// and (on the leader) lease expiry, the cluster version and
// auto-compaction.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(5)
	go func() { defer wg.Done(); s.catchUp(ctx) }()
	go func() { defer wg.Done(); s.monitorClusterVersion(ctx) }()
	go func() { defer wg.Done(); s.publish(ctx) }()
	go func() { defer wg.Done(); s.lessor.run(ctx) }()
	go func() { defer wg.Done(); s.watchLeadership(ctx) }()
	if c := newAutoCompactor(s); c != nil {
		wg.Add(1)
		go func() { defer wg.Done(); c.run(ctx) }()
	}
	wg.Wait()
	s.connsMu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = map[string]*grpc.ClientConn{}
	s.connsMu.Unlock()
	return nil
}

// catchUp waits until this member applied everything committed when it
// started. On start the FSM holds only the last snapshot; raft re-applies the
// rest of the log only once it learns the commit index from a leader, so
// until then local state may be older than what this member served before a
// restart.
func (s *Server) catchUp(ctx context.Context) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.linearizableRead(rctx)
		cancel()
		if err == nil {
			s.caughtUp.Store(true)
			return
		}
		s.log.Debug("catching up after start", "err", err)
		_ = sleepCtx(ctx, 100*time.Millisecond)
	}
}

// readBarrier is what a read waits for: a linearizable point, or for a
// serializable read only the catch-up after start, so that a member never
// answers from state older than what it answered before a restart.
func (s *Server) readBarrier(ctx context.Context, serializable bool) error {
	if serializable && s.caughtUp.Load() {
		return nil
	}
	return s.linearizableRead(ctx)
}

// publish proposes this member's attributes until the members table holds
// them, so every member can answer MemberList with names and client URLs.
func (s *Server) publish(ctx context.Context) {
	for {
		m, ok := s.fsm.Member(s.cfg.MemberID)
		if ok && m.Name == s.cfg.Name && equalStrings(m.ClientURLs, s.cfg.ClientURLs) {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.propose(pctx, &pb.InternalRaftRequest{ClusterMemberAttrSet: s.attributes()})
		cancel()
		if err == nil {
			continue
		}
		s.log.Debug("publish member attributes", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watchLeadership runs a Barrier as soon as this member wins an election, so
// that reads on the new leader see everything committed in earlier terms.
func (s *Server) watchLeadership(ctx context.Context) {
	ch := s.raft.LeaderCh()
	for {
		select {
		case <-ctx.Done():
			return
		case isLeader := <-ch:
			if isLeader {
				bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if err := s.ensureBarrier(bctx); err != nil {
					s.log.Warn("barrier after election", "err", err)
				}
				cancel()
			}
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// header returns a response header at revision rev (0: the store's current).
func (s *Server) header(rev int64) *pb.ResponseHeader {
	if rev == 0 {
		rev = s.store.Rev()
	}
	return &pb.ResponseHeader{
		ClusterId: s.cfg.ClusterID,
		MemberId:  s.cfg.MemberID,
		Revision:  rev,
		RaftTerm:  s.raft.CurrentTerm(),
	}
}

// fillHeader completes a header the store produced (which carries only the
// revision).
func (s *Server) fillHeader(h **pb.ResponseHeader) {
	var rev int64
	if *h != nil {
		rev = (*h).Revision
	}
	*h = s.header(rev)
}

// Errors of the write and read paths, turned into etcd's gRPC errors at the
// handler edge.
var (
	errNoLeader       = errors.New("etcdserver: no leader")
	errLeaderChanged  = errors.New("etcdserver: leader changed")
	errTimeout        = errors.New("etcdserver: request timed out")
	errRequestTooBig  = errors.New("etcdserver: request is too large")
	errStopped        = errors.New("etcdserver: server stopped")
	errNotLeaderLocal = errors.New("etcdserver: not the leader")
	// errResultLost: the proposal was committed, but this member caught up
	// past it from a snapshot, so its response (revision, prev_kv, txn
	// outcome) is unknown here.
	errResultLost = errors.New("etcdserver: request committed, but its result was lost to a snapshot install; outcome unknown to this member")
)

func (s *Server) newRequestID() uint64 {
	return s.cfg.MemberID<<48 | s.nextID.Add(1)&(1<<48-1)
}

// requestTimeout bounds a write or a linearizable read however long its
// client would wait, as etcd's request timeout does (5 s plus two election
// timeouts): without a quorum the call fails with "etcdserver: request timed
// out" instead of holding the client until its own deadline, so a caller
// such as the API service can answer 504 and move on.
const requestTimeout = 7 * time.Second

// propose is the one write path. It stamps a request ID, submits the entry to
// Raft (directly on the leader, forwarded to it otherwise) and returns only
// after the entry is committed and applied on this member, with the FSM's
// response or error. ctx's deadline, and at most requestTimeout, bounds the
// whole call.
//
// The raft.apply span covers that wait on the member that took the request
// (the client's Txn span is its parent). The trace context does not travel
// inside the log entry: that would change the replicated format and add
// ~55 bytes to every entry, and the other members' applies are not on the
// request's path — it waits for this member's.
func (s *Server) propose(ctx context.Context, req *pb.InternalRaftRequest) (_ any, err error) {
	ctx, span := s.tracer.Start(ctx, "raft.apply")
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req.ID = s.newRequestID()
	data, err := req.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encode proposal: %w", err)
	}
	if len(data) > s.cfg.MaxRequestBytes {
		return nil, errRequestTooBig
	}
	ch := s.fsm.Register(req.ID)
	defer s.fsm.Forget(req.ID)
	idx, err := s.submit(ctx, data)
	if err != nil {
		return nil, err
	}
	for {
		applied := s.fsm.AppliedCh()
		select {
		case res := <-ch:
			return res.Resp, res.Err
		default:
		}
		if idx > 0 && s.fsm.Applied() >= idx {
			// Applied here without passing through Apply: this member
			// caught up from a snapshot that already held the entry. It
			// was committed, but its response is gone.
			select {
			case res := <-ch:
				return res.Resp, res.Err
			default:
				return nil, errResultLost
			}
		}
		select {
		case res := <-ch:
			return res.Resp, res.Err
		case <-applied:
		case <-ctx.Done():
			return nil, ctxErr(ctx)
		}
	}
}

// submit gets data into the Raft log, batched with concurrent proposals
// (see batch.go): raft.Apply on the leader, the peer service's ProposeBatch
// on a follower. It retries while there is no leader yet
// or leadership moves before the entry was accepted; once the entry may have
// been appended, a failure means "outcome unknown" and is returned.
//
// On success it returns an index at or above the entry's once the leader
// applied it (0 when it was applied here, as leader).
func (s *Server) submit(ctx context.Context, data []byte) (uint64, error) {
	for {
		if s.raft.State() == raft.Leader {
			_, err := s.batch.do(ctx, data)
			if !errors.Is(err, errNotLeaderLocal) {
				return 0, err
			}
		} else {
			idx, err := s.forward.do(ctx, data)
			switch {
			case err == nil:
				return idx, nil
			case errors.Is(err, errNotLeaderLocal), isNotLeader(err), notSent(err):
				// Not appended: ask again, maybe at a new leader (or here).
			default:
				return 0, fromPeerError(err)
			}
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// applyLocal appends data to the Raft log on this member, which must lead,
// and waits for it to be committed and applied here. errNotLeaderLocal means
// the entry was not accepted; other errors mean its outcome is unknown.
func (s *Server) applyLocal(ctx context.Context, data []byte) error {
	dl, _ := ctx.Deadline()
	return s.applyRaft(dl, data)
}

// applyRaft is applyLocal with the deadline for getting the entry into
// raft's queue given as a time (the latest of a batch's callers').
func (s *Server) applyRaft(deadline time.Time, data []byte) error {
	var timeout time.Duration
	if !deadline.IsZero() {
		timeout = time.Until(deadline)
		if timeout <= 0 {
			return errTimeout
		}
	}
	err := s.raft.Apply(data, timeout).Error()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Refused before it was appended: safe to try again (at the new
		// leader once the transfer is done).
		return errNotLeaderLocal
	case errors.Is(err, raft.ErrLeadershipLost):
		return errLeaderChanged
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return errTimeout
	case errors.Is(err, raft.ErrRaftShutdown):
		return errStopped
	default:
		return fmt.Errorf("raft apply: %w", err)
	}
}

func (s *Server) attributes() *membershippb.ClusterMemberAttrSetRequest {
	return &membershippb.ClusterMemberAttrSetRequest{
		Member_ID:        s.cfg.MemberID,
		MemberAttributes: &membershippb.Attributes{Name: s.cfg.Name, ClientUrls: s.cfg.ClientURLs},
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx)
	}
}

func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errTimeout
	}
	return ctx.Err()
}

// MemberIDString formats a member ID as etcd prints it (hex) and as it is
// used for the Raft server ID.
func MemberIDString(id uint64) string { return strconv.FormatUint(id, 16) }

// ParseMemberID parses MemberIDString's output.
func ParseMemberID(s string) (uint64, error) { return strconv.ParseUint(s, 16, 64) }
