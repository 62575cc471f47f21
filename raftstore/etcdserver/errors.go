// This file turns store and Raft errors into etcd's gRPC errors, once, at the
// handler edge.

package etcdserver

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/raftstore/mvcc"
)

func toGRPCError(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, mvcc.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, mvcc.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev
	case errors.Is(err, mvcc.ErrKeyNotFound):
		return rpctypes.ErrGRPCKeyNotFound
	case errors.Is(err, mvcc.ErrLeaseNotFound):
		return rpctypes.ErrGRPCLeaseNotFound
	case errors.Is(err, mvcc.ErrLeaseExists):
		return rpctypes.ErrGRPCLeaseExist
	case errors.Is(err, mvcc.ErrDuplicateKey):
		return rpctypes.ErrGRPCDuplicateKey
	case errors.Is(err, errNoLeader):
		return rpctypes.ErrGRPCNoLeader
	case errors.Is(err, errNotLeaderLocal):
		return rpctypes.ErrGRPCNotLeader
	case errors.Is(err, errLeaderChanged):
		return rpctypes.ErrGRPCLeaderChanged
	case errors.Is(err, errTimeout):
		return rpctypes.ErrGRPCTimeout
	case errors.Is(err, errRequestTooBig):
		return rpctypes.ErrGRPCRequestTooLarge
	case errors.Is(err, errResultLost):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, errStopped):
		return rpctypes.ErrGRPCStopped
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unknown, err.Error())
}
