// This file holds the Maintenance service: Status, MoveLeader and HashKV
// answer from Raft and the store; Alarm, Defragment and Hash answer what is
// true of an in-memory store; Downgrade is not supported. Snapshot is in
// snapshot.go.

package etcdserver

import (
	"context"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type maintenanceServer struct{ s *Server }

var _ pb.MaintenanceServer = (*maintenanceServer)(nil)

// Alarm: the store raises no alarms (no space quota yet), so the list is
// empty and activating or deactivating one changes nothing.
func (m *maintenanceServer) Alarm(ctx context.Context, req *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	return &pb.AlarmResponse{Header: m.s.header(0)}, nil
}

func (m *maintenanceServer) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	s := m.s
	_, lid := s.raft.LeaderWithID()
	var leader uint64
	if lid != "" {
		leader, _ = ParseMemberID(string(lid))
	}
	size := s.node.DBSize()
	learner := false
	if f := s.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			if srv.ID == raft.ServerID(MemberIDString(s.cfg.MemberID)) && srv.Suffrage != raft.Voter {
				learner = true
			}
		}
	}
	return &pb.StatusResponse{
		Header:           s.header(0),
		Version:          Version,
		DbSize:           size,
		DbSizeInUse:      size,
		Leader:           leader,
		RaftIndex:        s.raft.CommitIndex(),
		RaftTerm:         s.raft.CurrentTerm(),
		RaftAppliedIndex: s.fsm.Applied(),
		IsLearner:        learner,
		StorageVersion:   Version,
	}, nil
}

// Defragment: the store keeps its state in memory and the Raft log is
// truncated by snapshots, so there is nothing to defragment.
func (m *maintenanceServer) Defragment(ctx context.Context, req *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	return &pb.DefragmentResponse{Header: m.s.header(0)}, nil
}

// Hash answers the hash of the whole key space at the current revision (the
// same as HashKV at revision 0).
func (m *maintenanceServer) Hash(ctx context.Context, req *pb.HashRequest) (*pb.HashResponse, error) {
	h, rev, _, err := m.s.store.HashKV(0)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.HashResponse{Header: m.s.header(rev), Hash: h}, nil
}

func (m *maintenanceServer) HashKV(ctx context.Context, req *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	h, rev, compactRev, err := m.s.store.HashKV(req.Revision)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.HashKVResponse{Header: m.s.header(rev), Hash: h, CompactRevision: compactRev, HashRevision: rev}, nil
}

func (m *maintenanceServer) MoveLeader(ctx context.Context, req *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	s := m.s
	if s.raft.State() != raft.Leader {
		return nil, rpctypes.ErrGRPCNotLeader
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, toGRPCError(err)
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID == raft.ServerID(MemberIDString(req.TargetID)) && srv.Suffrage == raft.Voter {
			if err := s.raft.LeadershipTransferToServer(srv.ID, srv.Address).Error(); err != nil {
				return nil, toGRPCError(raftError(err))
			}
			return &pb.MoveLeaderResponse{Header: s.header(0)}, nil
		}
	}
	return nil, rpctypes.ErrGRPCBadLeaderTransferee
}

func (m *maintenanceServer) Downgrade(ctx context.Context, req *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, status.Error(codes.Unimplemented, "kplane store: downgrade is not supported")
}
