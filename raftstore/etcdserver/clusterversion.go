// This file holds how the cluster version rises (see fsm/version.go): every
// member answers the peer service's Version call with the newest format its
// build reads, and the leader, as etcd's monitors members' versions, asks
// every member of the Raft configuration now and then and, once all of
// them read a newer format than the cluster version, proposes it. A member
// of a build older than the peer Version call answers Unimplemented: it
// reads Version1.

package etcdserver

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kplane/kplane/raftstore/fsm"
)

// clusterVersionInterval is how often the leader asks the members.
const clusterVersionInterval = 2 * time.Second

// Version answers the newest replicated format this member's build reads.
func (p *peerServer) Version(context.Context, *emptypb.Empty) (*wrapperspb.UInt32Value, error) {
	return wrapperspb.UInt32(fsm.Version), nil
}

// ClusterVersion answers the cluster version this member applied (for
// operators and tests: the kplane_store_cluster_version metric says the
// same).
func (p *peerServer) ClusterVersion(context.Context, *emptypb.Empty) (*wrapperspb.UInt32Value, error) {
	return wrapperspb.UInt32(p.s.fsm.ClusterVersion()), nil
}

// Version asks a member which format its build reads.
func (c *peerClient) Version(ctx context.Context) (uint32, error) {
	out := new(wrapperspb.UInt32Value)
	if err := c.cc.Invoke(ctx, methodVersion, &emptypb.Empty{}, out); err != nil {
		if status.Code(err) == codes.Unimplemented {
			return fsm.Version1, nil
		}
		return 0, err
	}
	return out.GetValue(), nil
}

// ClusterVersion returns the cluster version this member applied.
func (s *Server) ClusterVersion() uint32 { return s.fsm.ClusterVersion() }

// monitorClusterVersion raises the cluster version, on the leader, as soon
// as every member reads a newer format.
func (s *Server) monitorClusterVersion(ctx context.Context) {
	t := time.NewTicker(clusterVersionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.raft.State() != raft.Leader {
			continue
		}
		v, err := s.membersVersion(ctx)
		if err != nil {
			s.log.Debug("cluster version: asking the members", "err", err)
			continue
		}
		if v <= s.fsm.ClusterVersion() {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = s.propose(pctx, &pb.InternalRaftRequest{ClusterVersionSet: fsm.ClusterVersionRequest(v)})
		cancel()
		if err != nil {
			s.log.Warn("cluster version: proposing", "version", v, "err", err)
			continue
		}
		s.log.Info("cluster version raised: every member reads the new format", "version", v)
	}
}

// membersVersion is the lowest format any member of the Raft configuration
// reads; an error if some member cannot be asked (the version must not rise
// past a member nobody has heard from).
func (s *Server) membersVersion(ctx context.Context) (uint32, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, err
	}
	lowest := fsm.Version
	self := raft.ServerID(MemberIDString(s.cfg.MemberID))
	for _, srv := range f.Configuration().Servers {
		if srv.ID == self {
			continue
		}
		mid, err := ParseMemberID(string(srv.ID))
		if err != nil {
			return 0, err
		}
		m, ok := s.fsm.Member(mid)
		if !ok || len(m.ClientURLs) == 0 {
			return 0, errors.New("member " + string(srv.ID) + " has not published its client URLs")
		}
		cc, err := s.conn(m.ClientURLs[0])
		if err != nil {
			return 0, err
		}
		actx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := (&peerClient{cc: cc}).Version(actx)
		cancel()
		if err != nil {
			return 0, err
		}
		lowest = min(lowest, v)
	}
	return lowest, nil
}
