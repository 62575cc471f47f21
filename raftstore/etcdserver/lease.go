// This file holds leases: the Lease service, and the lessor that decides
// expiry. Lease state (ID, TTL, attached keys) is replicated in the MVCC
// store; deadlines are not — only the leader keeps them, in memory. A member
// that becomes leader gives every lease a full TTL from that moment, as etcd
// does, and revokes expired leases through Raft.

package etcdserver

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/kplane/kplane/raftstore/mvcc"
)

// maxLeaseTTL is etcd's limit (9,000,000,000 seconds).
const maxLeaseTTL = 9_000_000_000

type lessor struct {
	s *Server

	mu        sync.Mutex
	term      uint64 // the term the deadlines below were set in; 0: not leading
	deadlines map[int64]time.Time
	revoking  map[int64]bool
}

func newLessor(s *Server) *lessor {
	return &lessor{s: s, deadlines: map[int64]time.Time{}, revoking: map[int64]bool{}}
}

// sync brings the deadlines up to date with the replicated lease table while
// this member leads in term; it reports whether it leads. Must hold l.mu.
func (l *lessor) syncLocked(now time.Time) bool {
	s := l.s
	if s.raft.State() != raft.Leader {
		l.term = 0
		clear(l.deadlines)
		return false
	}
	term := s.raft.CurrentTerm()
	if term != l.term {
		// New leadership: every lease gets its full TTL from now.
		l.term = term
		clear(l.deadlines)
	}
	seen := map[int64]bool{}
	for _, li := range s.store.Leases() {
		seen[li.ID] = true
		if _, ok := l.deadlines[li.ID]; !ok {
			l.deadlines[li.ID] = now.Add(time.Duration(li.TTL) * time.Second)
		}
	}
	for id := range l.deadlines {
		if !seen[id] {
			delete(l.deadlines, id)
		}
	}
	return true
}

func (l *lessor) run(ctx context.Context) {
	t := time.NewTicker(l.s.cfg.LeaseCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l.s.raft.State() != raft.Leader {
			l.mu.Lock()
			l.syncLocked(time.Now())
			l.mu.Unlock()
			continue
		}
		// Only read state that reflects everything committed before.
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := l.s.ensureBarrier(bctx)
		cancel()
		if err != nil {
			continue
		}
		now := time.Now()
		var expired []int64
		l.mu.Lock()
		if l.syncLocked(now) {
			for id, dl := range l.deadlines {
				if !now.Before(dl) && !l.revoking[id] {
					l.revoking[id] = true
					expired = append(expired, id)
				}
			}
		}
		l.mu.Unlock()
		for _, id := range expired {
			go l.revokeExpired(ctx, id)
		}
	}
}

func (l *lessor) revokeExpired(ctx context.Context, id int64) {
	defer func() {
		l.mu.Lock()
		delete(l.revoking, id)
		l.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Only the leader that saw the deadline pass may revoke: no forwarding
	// to a successor, which may have had the lease kept alive since.
	req := &pb.InternalRaftRequest{ID: l.s.newRequestID(), LeaseRevoke: &pb.LeaseRevokeRequest{ID: id}}
	data, err := req.Marshal()
	if err != nil {
		l.s.log.Error("encode lease revoke", "lease", id, "err", err)
		return
	}
	if err := l.s.applyLocal(ctx, data); err != nil && !errors.Is(err, errNotLeaderLocal) {
		l.s.log.Warn("revoke expired lease", "lease", id, "err", err)
	}
}

// renewLocal refreshes a lease's deadline; only the leader can.
func (l *lessor) renewLocal(ctx context.Context, id int64) (int64, error) {
	if l.s.raft.State() != raft.Leader {
		return 0, errNotLeaderLocal
	}
	// The lease table read below must reflect every committed grant/revoke.
	if _, err := l.s.readIndex(ctx); err != nil {
		return 0, err
	}
	li, ok := l.s.store.Lease(id)
	if !ok {
		return 0, mvcc.ErrLeaseNotFound
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.syncLocked(now) {
		return 0, errNotLeaderLocal
	}
	if dl, ok := l.deadlines[id]; ok && !now.Before(dl) {
		// Expired and about to be revoked: too late to renew.
		return 0, mvcc.ErrLeaseNotFound
	}
	l.deadlines[id] = now.Add(time.Duration(li.TTL) * time.Second)
	return li.TTL, nil
}

func (l *lessor) timeToLiveLocal(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if l.s.raft.State() != raft.Leader {
		return nil, errNotLeaderLocal
	}
	if _, err := l.s.readIndex(ctx); err != nil {
		return nil, err
	}
	li, ok := l.s.store.Lease(req.ID)
	if !ok {
		return nil, mvcc.ErrLeaseNotFound
	}
	l.mu.Lock()
	now := time.Now()
	leading := l.syncLocked(now)
	dl := l.deadlines[req.ID]
	l.mu.Unlock()
	if !leading {
		return nil, errNotLeaderLocal
	}
	remaining := int64(math.Ceil(dl.Sub(now).Seconds()))
	if remaining < 0 {
		remaining = 0
	}
	resp := &pb.LeaseTimeToLiveResponse{ID: req.ID, TTL: remaining, GrantedTTL: li.TTL}
	if req.Keys {
		resp.Keys = li.Keys
	}
	return resp, nil
}

// renew refreshes a lease on the leader, wherever it is.
func (l *lessor) renew(ctx context.Context, id int64) (int64, error) {
	for {
		if l.s.raft.State() == raft.Leader {
			ttl, err := l.renewLocal(ctx, id)
			if !errors.Is(err, errNotLeaderLocal) {
				return ttl, err
			}
		} else {
			pc, err := l.s.leaderPeer(ctx)
			if err != nil && !errors.Is(err, errNotLeaderLocal) {
				return 0, err
			}
			if err == nil {
				ttl, err := pc.LeaseRenew(ctx, id)
				if err == nil {
					return ttl, nil
				}
				if !isNotLeader(err) && !isUnavailable(err) {
					return 0, fromPeerError(err)
				}
			}
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

func (l *lessor) timeToLive(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	for {
		if l.s.raft.State() == raft.Leader {
			resp, err := l.timeToLiveLocal(ctx, req)
			if !errors.Is(err, errNotLeaderLocal) {
				return resp, err
			}
		} else {
			pc, err := l.s.leaderPeer(ctx)
			if err != nil && !errors.Is(err, errNotLeaderLocal) {
				return nil, err
			}
			if err == nil {
				resp, err := pc.LeaseTimeToLive(ctx, req)
				if err == nil {
					return resp, nil
				}
				if !isNotLeader(err) && !isUnavailable(err) {
					return nil, fromPeerError(err)
				}
			}
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

type leaseServer struct{ s *Server }

var _ pb.LeaseServer = (*leaseServer)(nil)

func (ls *leaseServer) LeaseGrant(ctx context.Context, req *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if req.TTL > maxLeaseTTL {
		return nil, rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	grant := &pb.LeaseGrantRequest{ID: req.ID, TTL: req.TTL}
	if grant.TTL < ls.s.cfg.MinLeaseTTL {
		grant.TTL = ls.s.cfg.MinLeaseTTL
	}
	// The proposer picks the ID, so that Apply stays deterministic.
	if grant.ID == 0 {
		grant.ID = randomLeaseID()
	}
	resp, err := ls.s.propose(ctx, &pb.InternalRaftRequest{LeaseGrant: grant})
	if err != nil {
		return nil, toGRPCError(err)
	}
	out := resp.(*pb.LeaseGrantResponse)
	ls.s.fillHeader(&out.Header)
	return out, nil
}

func randomLeaseID() int64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		// Positive, non-zero, like etcd's IDs.
		if id := int64(binary.BigEndian.Uint64(b[:]) >> 1); id != 0 {
			return id
		}
	}
}

func (ls *leaseServer) LeaseRevoke(ctx context.Context, req *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	resp, err := ls.s.propose(ctx, &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: req.ID}})
	if err != nil {
		return nil, toGRPCError(err)
	}
	out := resp.(*pb.LeaseRevokeResponse)
	ls.s.fillHeader(&out.Header)
	return out, nil
}

func (ls *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(stream.Context(), 5*time.Second)
		ttl, err := ls.s.lessor.renew(ctx, req.ID)
		cancel()
		resp := &pb.LeaseKeepAliveResponse{Header: ls.s.header(0), ID: req.ID, TTL: ttl}
		switch {
		case err == nil:
		case errors.Is(err, mvcc.ErrLeaseNotFound) || isLeaseNotFound(err):
			// etcd answers a keep-alive of an unknown or expired lease
			// with TTL 0.
			resp.TTL = 0
		default:
			return toGRPCError(err)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func isLeaseNotFound(err error) bool {
	return err != nil && err.Error() == rpctypes.ErrGRPCLeaseNotFound.Error()
}

func (ls *leaseServer) LeaseTimeToLive(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp, err := ls.s.lessor.timeToLive(ctx, req)
	if err != nil {
		if errors.Is(err, mvcc.ErrLeaseNotFound) || isLeaseNotFound(err) {
			// etcd answers TTL -1 for a lease that does not exist.
			return &pb.LeaseTimeToLiveResponse{Header: ls.s.header(0), ID: req.ID, TTL: -1}, nil
		}
		return nil, toGRPCError(err)
	}
	resp.Header = ls.s.header(0)
	return resp, nil
}

func (ls *leaseServer) LeaseLeases(ctx context.Context, _ *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	if err := ls.s.linearizableRead(ctx); err != nil {
		return nil, toGRPCError(err)
	}
	infos := ls.s.store.Leases()
	out := &pb.LeaseLeasesResponse{Header: ls.s.header(0), Leases: make([]*pb.LeaseStatus, 0, len(infos))}
	for _, li := range infos {
		out.Leases = append(out.Leases, &pb.LeaseStatus{ID: li.ID})
	}
	return out, nil
}
