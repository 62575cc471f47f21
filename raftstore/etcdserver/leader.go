// This file holds etcd's "require leader" contract: a client that sets the
// hasleader metadata (clientv3.WithRequireLeader, which Kubernetes uses for
// its watches) gets "no leader" instead of a silent stream from a member cut
// off from the cluster, so it can move to another member.

package etcdserver

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

func requiresLeader(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return false
	}
	for _, v := range md.Get(rpctypes.MetadataRequireLeaderKey) {
		if v == rpctypes.MetadataHasLeader {
			return true
		}
	}
	return false
}

func (s *Server) hasLeader() bool {
	_, id := s.raft.LeaderWithID()
	return id != ""
}

// UnaryInterceptor refuses requests that require a leader while this member
// knows none.
func (s *Server) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if requiresLeader(ctx) && !s.hasLeader() {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	return handler(ctx, req)
}

// StreamInterceptor refuses streams that require a leader while this member
// knows none, and ends them with "no leader" when it loses its leader for
// longer than an election would take.
func (s *Server) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !requiresLeader(ss.Context()) {
		return handler(srv, ss)
	}
	if !s.hasLeader() {
		return rpctypes.ErrGRPCNoLeader
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	lost := make(chan struct{})
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		since := time.Time{}
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if s.hasLeader() {
				since = time.Time{}
				continue
			}
			if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) > s.cfg.NoLeaderGrace {
				close(lost)
				cancel()
				return
			}
		}
	}()
	err := handler(srv, &ctxStream{ServerStream: ss, ctx: ctx})
	select {
	case <-lost:
		return rpctypes.ErrGRPCNoLeader
	default:
		return err
	}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *ctxStream) Context() context.Context { return c.ctx }
