// This file holds linearizable reads: the read index (VerifyLeader
// coalesced across concurrent readers, or asked of the leader by a
// follower), waiting until it is applied, and the barrier a new leader
// runs before its first read.

package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// linearizableRead returns once this member's state reflects every write
// committed before the call: on the leader, after a confirmed quorum
// (VerifyLeader, coalesced across concurrent readers) and the commit index
// observed before it applied; on a follower, after the leader's read index
// applied locally.
func (s *Server) linearizableRead(ctx context.Context) error {
	if s.cfg.UnsafeUnverifiedReads {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	for {
		var idx uint64
		var err error
		if s.raft.State() == raft.Leader {
			idx, err = s.readIndex(ctx)
		} else {
			idx, err = s.followerRead.do(ctx)
			switch {
			case err == nil, errors.Is(err, errNotLeaderLocal):
			case isNotLeader(err), isUnavailable(err):
				err = errNotLeaderLocal // ask again, maybe a new leader
			case errors.Is(err, errNoLeader):
				if ctx.Err() != nil {
					return err
				}
				err = errNotLeaderLocal
			default:
				return fromPeerError(err)
			}
		}
		if err == nil {
			return s.waitApplied(ctx, idx)
		}
		if !errors.Is(err, errNotLeaderLocal) && !isNotLeader(err) {
			return err
		}
		s.log.Debug("linearizable read: asking again", "err", err)
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// readIndex is the leader's side of a linearizable read: it returns a
// commit index every write acknowledged before the call is at or below, and
// confirms this member still leads after observing it.
func (s *Server) readIndex(ctx context.Context) (uint64, error) {
	term := s.raft.CurrentTerm()
	if err := s.ensureBarrier(ctx); err != nil {
		if errors.Is(err, errLeaderChanged) {
			return 0, errNotLeaderLocal
		}
		return 0, err
	}
	idx := s.raft.CommitIndex()
	if _, err := s.verifier.do(ctx); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, errNotLeaderLocal
		}
		return 0, err
	}
	if s.raft.CurrentTerm() != term {
		// Leadership was lost and won again meanwhile: idx may be below
		// the new term's marker. Ask again.
		return 0, errNotLeaderLocal
	}
	return idx, nil
}

// ensureBarrier makes sure that, in the current term, an entry of this
// leader was committed and applied here before the leader serves reads:
// until then its commit index may lag entries committed by earlier leaders.
//
// The entry is a command (this member's attributes again), not raft's own
// Barrier: raft hands only commands and configuration changes to the FSM,
// so read indexes must point at such entries, or a reader would wait for an
// applied index that never comes. Past this entry, the log of the term holds
// only commands and configuration changes.
func (s *Server) ensureBarrier(ctx context.Context) error {
	term := s.raft.CurrentTerm()
	if s.barrierTerm.Load() == term {
		return nil
	}
	s.barrierMu.Lock()
	defer s.barrierMu.Unlock()
	if s.barrierTerm.Load() == term {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	req := &pb.InternalRaftRequest{ID: s.newRequestID(), ClusterMemberAttrSet: s.attributes()}
	data, err := req.Marshal()
	if err != nil {
		return fmt.Errorf("encode term marker: %w", err)
	}
	if err := s.applyLocal(ctx, data); err != nil {
		return fmt.Errorf("term marker: %w", err)
	}
	s.barrierTerm.Store(term)
	return nil
}

// waitApplied blocks until this member applied index idx.
func (s *Server) waitApplied(ctx context.Context, idx uint64) error {
	for {
		ch := s.fsm.AppliedCh()
		if s.fsm.Applied() >= idx {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctxErr(ctx)
		}
	}
}

// coalescer shares one call among concurrent callers: a caller joins the
// next round that starts after it arrived (never one already in flight), so
// the answer it gets was obtained after it asked. Used for the leader's
// VerifyLeader (a quorum round trip) and a follower's read-index request.
type coalescer struct {
	run     func() (uint64, error)
	mu      sync.Mutex
	waiting []chan indexResult
	running bool
}

type indexResult struct {
	idx uint64
	err error
}

func (c *coalescer) do(ctx context.Context) (uint64, error) {
	ch := make(chan indexResult, 1)
	c.mu.Lock()
	c.waiting = append(c.waiting, ch)
	if !c.running {
		c.running = true
		go c.loop()
	}
	c.mu.Unlock()
	select {
	case r := <-ch:
		return r.idx, r.err
	case <-ctx.Done():
		return 0, ctxErr(ctx)
	}
}

func (c *coalescer) loop() {
	for {
		c.mu.Lock()
		batch := c.waiting
		c.waiting = nil
		if len(batch) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		idx, err := c.run()
		for _, ch := range batch {
			ch <- indexResult{idx, err}
		}
	}
}

// askLeaderReadIndex is one follower round of the read-index coalescer.
func (s *Server) askLeaderReadIndex() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pc, err := s.leaderPeer(ctx)
	if err != nil {
		return 0, err
	}
	return pc.ReadIndex(ctx)
}

// leaderPeer returns a client of the current leader's peer service, waiting
// (within ctx) for a leader to be known.
func (s *Server) leaderPeer(ctx context.Context) (*peerClient, error) {
	for {
		_, id := s.raft.LeaderWithID()
		if id != "" && id != raft.ServerID(MemberIDString(s.cfg.MemberID)) {
			mid, err := ParseMemberID(string(id))
			if err == nil {
				if m, ok := s.fsm.Member(mid); ok && len(m.ClientURLs) > 0 {
					cc, err := s.conn(m.ClientURLs[0])
					if err != nil {
						return nil, err
					}
					return &peerClient{cc: cc}, nil
				}
			}
		}
		if id == raft.ServerID(MemberIDString(s.cfg.MemberID)) && s.raft.State() == raft.Leader {
			return nil, errNotLeaderLocal
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			if errors.Is(err, errTimeout) {
				return nil, errNoLeader
			}
			return nil, err
		}
	}
}

// conn returns a cached client connection to a member's client URL.
func (s *Server) conn(clientURL string) (*grpc.ClientConn, error) {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	if c, ok := s.conns[clientURL]; ok {
		return c, nil
	}
	u, err := url.Parse(clientURL)
	if err != nil {
		return nil, fmt.Errorf("member client url %q: %w", clientURL, err)
	}
	creds := insecure.NewCredentials()
	if s.cfg.DialTLS != nil {
		creds = credentials.NewTLS(s.cfg.DialTLS)
	}
	c, err := grpc.NewClient(u.Host,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(s.cfg.MaxRequestBytes+GRPCOverheadBytes)),
	)
	if err != nil {
		return nil, fmt.Errorf("dial member %s: %w", clientURL, err)
	}
	s.conns[clientURL] = c
	return c, nil
}
