// This file holds the Cluster service. Membership is Raft's configuration:
// MemberAdd and MemberRemove are configuration changes made on the leader
// (followers forward them through the leader's Cluster service), and
// MemberList reads the configuration and the members table.

package etcdserver

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/url"
	"sort"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MemberID derives a member's ID from its advertised peer URL. A member
// added with MemberAdd (which carries only peer URLs) and the process later
// started with that peer URL arrive at the same ID.
func MemberID(peerURL string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(peerURL))
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

// ClusterID derives the cluster ID from the initial cluster token, so that
// every member, including ones that join later, agrees on it.
func ClusterID(token string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("kplane-cluster:" + token))
	return h.Sum64()
}

type clusterServer struct{ s *Server }

var _ pb.ClusterServer = (*clusterServer)(nil)

func (c *clusterServer) members(ctx context.Context) ([]*pb.Member, error) {
	f := c.s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, toGRPCError(fmt.Errorf("raft configuration: %w", err))
	}
	table := c.s.fsm.Members()
	var out []*pb.Member
	for _, srv := range f.Configuration().Servers {
		id, err := ParseMemberID(string(srv.ID))
		if err != nil {
			continue
		}
		m := &pb.Member{
			ID:        id,
			PeerURLs:  []string{c.s.peerURL(string(srv.Address))},
			IsLearner: srv.Suffrage != raft.Voter,
		}
		if t, ok := table[id]; ok {
			m.Name = t.Name
			m.ClientURLs = t.ClientURLs
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (c *clusterServer) MemberList(ctx context.Context, req *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	if req.Linearizable {
		if err := c.s.linearizableRead(ctx); err != nil {
			return nil, toGRPCError(err)
		}
	}
	ms, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.MemberListResponse{Header: c.s.header(0), Members: ms}, nil
}

// leaderClient returns the leader's Cluster service when this member does
// not lead, and nil when it does (the change is then made here).
func (c *clusterServer) leaderClient(ctx context.Context) (pb.ClusterClient, error) {
	if c.s.raft.State() == raft.Leader {
		return nil, nil
	}
	_, err := c.s.leaderPeer(ctx)
	if err != nil {
		return nil, toGRPCError(err)
	}
	_, id := c.s.raft.LeaderWithID()
	mid, err := ParseMemberID(string(id))
	if err != nil {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	m, ok := c.s.fsm.Member(mid)
	if !ok || len(m.ClientURLs) == 0 {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	cc, err := c.s.conn(m.ClientURLs[0])
	if err != nil {
		return nil, toGRPCError(err)
	}
	return pb.NewClusterClient(cc), nil
}

func peerAddress(peerURL string) (string, error) {
	u, err := url.Parse(peerURL)
	if err != nil || u.Host == "" {
		return "", status.Errorf(codes.InvalidArgument, "etcdserver: invalid peer URL %q", peerURL)
	}
	return u.Host, nil
}

func changeTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return 10 * time.Second
}

func (c *clusterServer) MemberAdd(ctx context.Context, req *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	if len(req.PeerURLs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "etcdserver: no peer URLs given")
	}
	if lc, err := c.leaderClient(ctx); err != nil || lc != nil {
		if err != nil {
			return nil, err
		}
		return lc.MemberAdd(ctx, req)
	}
	addr, err := peerAddress(req.PeerURLs[0])
	if err != nil {
		return nil, err
	}
	id := MemberID(req.PeerURLs[0])
	existing, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range existing {
		if m.ID == id {
			return nil, rpctypes.ErrGRPCMemberExist
		}
		for _, u := range m.PeerURLs {
			if u == c.s.peerURL(addr) {
				return nil, rpctypes.ErrGRPCPeerURLExist
			}
		}
	}
	sid := raft.ServerID(MemberIDString(id))
	var f raft.IndexFuture
	if req.IsLearner {
		f = c.s.raft.AddNonvoter(sid, raft.ServerAddress(addr), 0, changeTimeout(ctx))
	} else {
		f = c.s.raft.AddVoter(sid, raft.ServerAddress(addr), 0, changeTimeout(ctx))
	}
	if err := f.Error(); err != nil {
		return nil, toGRPCError(raftError(err))
	}
	ms, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.MemberAddResponse{
		Header:  c.s.header(0),
		Member:  &pb.Member{ID: id, PeerURLs: req.PeerURLs, IsLearner: req.IsLearner},
		Members: ms,
	}, nil
}

func (c *clusterServer) MemberRemove(ctx context.Context, req *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	if lc, err := c.leaderClient(ctx); err != nil || lc != nil {
		if err != nil {
			return nil, err
		}
		return lc.MemberRemove(ctx, req)
	}
	found := false
	existing, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range existing {
		if m.ID == req.ID {
			found = true
		}
	}
	if !found {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	f := c.s.raft.RemoveServer(raft.ServerID(MemberIDString(req.ID)), 0, changeTimeout(ctx))
	if err := f.Error(); err != nil {
		return nil, toGRPCError(raftError(err))
	}
	ms, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.MemberRemoveResponse{Header: c.s.header(0), Members: ms}, nil
}

func (c *clusterServer) MemberUpdate(ctx context.Context, req *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	if lc, err := c.leaderClient(ctx); err != nil || lc != nil {
		if err != nil {
			return nil, err
		}
		return lc.MemberUpdate(ctx, req)
	}
	if len(req.PeerURLs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "etcdserver: no peer URLs given")
	}
	addr, err := peerAddress(req.PeerURLs[0])
	if err != nil {
		return nil, err
	}
	existing, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	var cur *pb.Member
	for _, m := range existing {
		if m.ID == req.ID {
			cur = m
		}
	}
	if cur == nil {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	sid := raft.ServerID(MemberIDString(req.ID))
	var f raft.IndexFuture
	if cur.IsLearner {
		f = c.s.raft.AddNonvoter(sid, raft.ServerAddress(addr), 0, changeTimeout(ctx))
	} else {
		f = c.s.raft.AddVoter(sid, raft.ServerAddress(addr), 0, changeTimeout(ctx))
	}
	if err := f.Error(); err != nil {
		return nil, toGRPCError(raftError(err))
	}
	ms, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.MemberUpdateResponse{Header: c.s.header(0), Members: ms}, nil
}

func (c *clusterServer) MemberPromote(ctx context.Context, req *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	if lc, err := c.leaderClient(ctx); err != nil || lc != nil {
		if err != nil {
			return nil, err
		}
		return lc.MemberPromote(ctx, req)
	}
	existing, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	var cur *pb.Member
	for _, m := range existing {
		if m.ID == req.ID {
			cur = m
		}
	}
	if cur == nil {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	if !cur.IsLearner {
		return nil, rpctypes.ErrGRPCMemberNotLearner
	}
	addr, _ := peerAddress(cur.PeerURLs[0])
	f := c.s.raft.AddVoter(raft.ServerID(MemberIDString(req.ID)), raft.ServerAddress(addr), 0, changeTimeout(ctx))
	if err := f.Error(); err != nil {
		return nil, toGRPCError(raftError(err))
	}
	ms, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.MemberPromoteResponse{Header: c.s.header(0), Members: ms}, nil
}

// raftError maps errors of Raft's futures to the store's errors.
func raftError(err error) error {
	switch err {
	case raft.ErrNotLeader:
		return errNotLeaderLocal
	case raft.ErrLeadershipLost, raft.ErrLeadershipTransferInProgress:
		return errLeaderChanged
	case raft.ErrEnqueueTimeout:
		return errTimeout
	case raft.ErrRaftShutdown:
		return errStopped
	}
	return err
}
