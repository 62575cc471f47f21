// This file holds the internal peer service: what a follower asks of the
// leader (append a proposal, a read index, lease keep-alive and time-to-live,
// which only the leader knows). It is served on the client URL beside the
// etcd API. Its messages are etcd's and protobuf's well-known types, so the
// service descriptor is written here by hand instead of generated from a
// .proto of our own.

package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kplane/kplane/raftstore/fsm"
)

const (
	peerServiceName   = "kplane.raftstore.v1.Peer"
	notLeaderMessage  = "kplane: this member is not the leader"
	methodPropose     = "/" + peerServiceName + "/Propose"
	methodProposeBat  = "/" + peerServiceName + "/ProposeBatch"
	methodReadIndex   = "/" + peerServiceName + "/ReadIndex"
	methodLeaseRenew  = "/" + peerServiceName + "/LeaseRenew"
	methodLeaseTTL    = "/" + peerServiceName + "/LeaseTimeToLive"
	methodVersion     = "/" + peerServiceName + "/Version"
	methodClusterVer  = "/" + peerServiceName + "/ClusterVersion"
	peerForwardBuffer = 100 * time.Millisecond
)

type peerService interface {
	Propose(context.Context, *pb.InternalRaftRequest) (*wrapperspb.UInt64Value, error)
	ProposeBatch(context.Context, *wrapperspb.BytesValue) (*wrapperspb.UInt64Value, error)
	ReadIndex(context.Context, *emptypb.Empty) (*wrapperspb.UInt64Value, error)
	LeaseRenew(context.Context, *pb.LeaseKeepAliveRequest) (*pb.LeaseKeepAliveResponse, error)
	LeaseTimeToLive(context.Context, *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error)
	Version(context.Context, *emptypb.Empty) (*wrapperspb.UInt32Value, error)
	ClusterVersion(context.Context, *emptypb.Empty) (*wrapperspb.UInt32Value, error)
}

func unaryHandler[Req any, Resp any](call func(peerService, context.Context, *Req) (Resp, error), fullMethod string) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(Req)
		if err := dec(in); err != nil {
			return nil, err
		}
		if interceptor == nil {
			return call(srv.(peerService), ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return call(srv.(peerService), ctx, req.(*Req))
		})
	}
}

var peerServiceDesc = grpc.ServiceDesc{
	ServiceName: peerServiceName,
	HandlerType: (*peerService)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Propose", Handler: unaryHandler(peerService.Propose, methodPropose)},
		{MethodName: "ProposeBatch", Handler: unaryHandler(peerService.ProposeBatch, methodProposeBat)},
		{MethodName: "ReadIndex", Handler: unaryHandler(peerService.ReadIndex, methodReadIndex)},
		{MethodName: "LeaseRenew", Handler: unaryHandler(peerService.LeaseRenew, methodLeaseRenew)},
		{MethodName: "LeaseTimeToLive", Handler: unaryHandler(peerService.LeaseTimeToLive, methodLeaseTTL)},
		{MethodName: "Version", Handler: unaryHandler(peerService.Version, methodVersion)},
		{MethodName: "ClusterVersion", Handler: unaryHandler(peerService.ClusterVersion, methodClusterVer)},
	},
	Metadata: "raftstore/etcdserver/peer.go",
}

func registerPeerServer(g *grpc.Server, p peerService) { g.RegisterService(&peerServiceDesc, p) }

// peerServer is the leader's side.
type peerServer struct{ s *Server }

var _ peerService = (*peerServer)(nil)

func notLeaderStatus() error { return status.Error(codes.FailedPrecondition, notLeaderMessage) }

func isNotLeader(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.FailedPrecondition && st.Message() == notLeaderMessage
}

// isEtcdError reports whether st is one of etcd's own errors (as the
// leader's handlers return them), rather than a transport failure.
func isEtcdError(st *status.Status) bool {
	return strings.HasPrefix(st.Message(), "etcdserver: ")
}

// notSent reports whether a failed call to the leader certainly never
// reached it (the connection could not be made), so that trying again, maybe
// at a new leader, cannot apply a proposal twice.
func notSent(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	msg := st.Message()
	return strings.Contains(msg, "while dialing") || strings.Contains(msg, "connection refused")
}

// fromPeerError turns a failed forward into a store error: an unreachable
// leader is "no leader", otherwise the status passes through.
func fromPeerError(err error) error {
	if st, ok := status.FromError(err); ok {
		if isEtcdError(st) {
			// The leader's own answer (e.g. "leader changed"): pass it on.
			return err
		}
		switch st.Code() {
		case codes.Unavailable:
			return fmt.Errorf("%w: %s", errNoLeader, st.Message())
		case codes.DeadlineExceeded:
			return errTimeout
		}
	}
	return err
}

// Propose appends a forwarded proposal (already stamped with its request ID)
// to the log and returns once it is committed and applied on the leader.
func (p *peerServer) Propose(ctx context.Context, req *pb.InternalRaftRequest) (*wrapperspb.UInt64Value, error) {
	if err := fsm.CheckRequest(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "forwarded proposal: %v", err)
	}
	data, err := req.Marshal()
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "decode proposal: %v", err)
	}
	if len(data) > p.s.cfg.MaxRequestBytes {
		return nil, toGRPCError(errRequestTooBig)
	}
	return p.propose(ctx, data)
}

// ProposeBatch appends the requests of a forwarded batch (fsm's batch
// envelope, each request stamped with its ID), in order and in one log
// entry, and returns once that entry is committed and applied on the leader.
func (p *peerServer) ProposeBatch(ctx context.Context, in *wrapperspb.BytesValue) (*wrapperspb.UInt64Value, error) {
	reqs, err := p.s.splitForwarded(in.GetValue())
	if err != nil {
		return nil, err
	}
	return p.propose(ctx, reqs...)
}

func (p *peerServer) propose(ctx context.Context, reqs ...[]byte) (*wrapperspb.UInt64Value, error) {
	if p.s.raft.State() != raft.Leader {
		return nil, notLeaderStatus()
	}
	ctx, cancel := shortenDeadline(ctx)
	defer cancel()
	if _, err := p.s.batch.do(ctx, reqs...); err != nil {
		if errors.Is(err, errNotLeaderLocal) {
			return nil, notLeaderStatus()
		}
		return nil, toGRPCError(err)
	}
	return wrapperspb.UInt64(p.s.fsm.Applied()), nil
}

// ReadIndex returns a read index (see Server.readIndex).
func (p *peerServer) ReadIndex(ctx context.Context, _ *emptypb.Empty) (*wrapperspb.UInt64Value, error) {
	if p.s.raft.State() != raft.Leader {
		return nil, notLeaderStatus()
	}
	idx, err := p.s.readIndex(ctx)
	if err != nil {
		if errors.Is(err, errNotLeaderLocal) {
			return nil, notLeaderStatus()
		}
		return nil, toGRPCError(err)
	}
	return wrapperspb.UInt64(idx), nil
}

// LeaseRenew refreshes a lease's deadline on the leader.
func (p *peerServer) LeaseRenew(ctx context.Context, req *pb.LeaseKeepAliveRequest) (*pb.LeaseKeepAliveResponse, error) {
	ttl, err := p.s.lessor.renewLocal(ctx, req.ID)
	if err != nil {
		if errors.Is(err, errNotLeaderLocal) {
			return nil, notLeaderStatus()
		}
		return nil, toGRPCError(err)
	}
	return &pb.LeaseKeepAliveResponse{ID: req.ID, TTL: ttl}, nil
}

// LeaseTimeToLive answers from the leader's deadlines.
func (p *peerServer) LeaseTimeToLive(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp, err := p.s.lessor.timeToLiveLocal(ctx, req)
	if err != nil {
		if errors.Is(err, errNotLeaderLocal) {
			return nil, notLeaderStatus()
		}
		return nil, toGRPCError(err)
	}
	return resp, nil
}

// shortenDeadline leaves the forwarding member a little time to answer its
// own client after the leader's answer arrives.
func shortenDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > 2*peerForwardBuffer {
		return context.WithDeadline(ctx, dl.Add(-peerForwardBuffer))
	}
	return context.WithCancel(ctx)
}

// peerClient is the follower's side.
type peerClient struct{ cc *grpc.ClientConn }

// ProposeBatch forwards a batch envelope of stamped requests.
func (c *peerClient) ProposeBatch(ctx context.Context, batch []byte) (uint64, error) {
	out := new(wrapperspb.UInt64Value)
	if err := c.cc.Invoke(ctx, methodProposeBat, wrapperspb.Bytes(batch), out); err != nil {
		return 0, err
	}
	return out.GetValue(), nil
}

func (c *peerClient) ReadIndex(ctx context.Context) (uint64, error) {
	out := new(wrapperspb.UInt64Value)
	if err := c.cc.Invoke(ctx, methodReadIndex, &emptypb.Empty{}, out); err != nil {
		return 0, err
	}
	return out.GetValue(), nil
}

func (c *peerClient) LeaseRenew(ctx context.Context, id int64) (int64, error) {
	out := new(pb.LeaseKeepAliveResponse)
	if err := c.cc.Invoke(ctx, methodLeaseRenew, &pb.LeaseKeepAliveRequest{ID: id}, out); err != nil {
		return 0, err
	}
	return out.TTL, nil
}

func (c *peerClient) LeaseTimeToLive(ctx context.Context, req *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	out := new(pb.LeaseTimeToLiveResponse)
	if err := c.cc.Invoke(ctx, methodLeaseTTL, req, out); err != nil {
		return nil, err
	}
	return out, nil
}

// isUnavailable reports a leader that could not be reached; idempotent
// calls (read index, lease keep-alive and time-to-live) try again.
func isUnavailable(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable
}
