// This file holds the KV service: Range (linearizable or serializable),
// Put, DeleteRange, Txn and Compact, with etcd's input checks.

package etcdserver

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.opentelemetry.io/otel/codes"
)

type kvServer struct{ s *Server }

var _ pb.KVServer = (*kvServer)(nil)

func (k *kvServer) Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := k.s.checkRange(req); err != nil {
		return nil, err
	}
	if err := k.s.readBarrier(ctx, req.Serializable); err != nil {
		return nil, toGRPCError(err)
	}
	resp, err := k.s.store.Range(req)
	if err != nil {
		return nil, toGRPCError(err)
	}
	k.s.fillHeader(&resp.Header)
	return resp, nil
}

func (k *kvServer) Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	if err := k.s.checkPut(req); err != nil {
		return nil, err
	}
	resp, err := k.s.propose(ctx, &pb.InternalRaftRequest{Put: req})
	if err != nil {
		return nil, toGRPCError(err)
	}
	out := resp.(*pb.PutResponse)
	k.s.fillHeader(&out.Header)
	return out, nil
}

func (k *kvServer) DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := k.s.checkDeleteRange(req); err != nil {
		return nil, err
	}
	resp, err := k.s.propose(ctx, &pb.InternalRaftRequest{DeleteRange: req})
	if err != nil {
		return nil, toGRPCError(err)
	}
	out := resp.(*pb.DeleteRangeResponse)
	k.s.fillHeader(&out.Header)
	return out, nil
}

func (k *kvServer) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := k.s.checkTxn(req); err != nil {
		return nil, err
	}
	var resp *pb.TxnResponse
	if isReadOnlyTxn(req) {
		// A read-only txn is a read: it needs no log entry, only a
		// linearizable point (unless every range in it is serializable).
		// Txn has no server span (ProposingMethods): this is its span.
		ctx, span := k.s.tracer.Start(ctx, "txn.read")
		r, err := k.readTxn(ctx, req)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		if err != nil {
			return nil, err
		}
		resp = r
	} else {
		r, err := k.s.propose(ctx, &pb.InternalRaftRequest{Txn: req})
		if err != nil {
			return nil, toGRPCError(err)
		}
		resp = r.(*pb.TxnResponse)
	}
	k.s.fillHeader(&resp.Header)
	fillTxnHeaders(k.s, resp)
	return resp, nil
}

// readTxn serves a read-only txn at a linearizable point (or, when every
// range in it is serializable, at this member's applied state).
func (k *kvServer) readTxn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := k.s.readBarrier(ctx, isSerializableTxn(req)); err != nil {
		return nil, toGRPCError(err)
	}
	r, err := k.s.store.Txn(req)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return r, nil
}

func (k *kvServer) Compact(ctx context.Context, req *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	if err := k.s.checkSize(req); err != nil {
		return nil, err
	}
	resp, err := k.s.propose(ctx, &pb.InternalRaftRequest{Compaction: req})
	if err != nil {
		return nil, toGRPCError(err)
	}
	out := resp.(*pb.CompactionResponse)
	k.s.fillHeader(&out.Header)
	return out, nil
}

// fillTxnHeaders gives the responses nested in a txn the full header, as
// etcd does.
func fillTxnHeaders(s *Server, resp *pb.TxnResponse) {
	for _, r := range resp.Responses {
		switch v := r.Response.(type) {
		case *pb.ResponseOp_ResponseRange:
			if v.ResponseRange != nil {
				s.fillHeader(&v.ResponseRange.Header)
			}
		case *pb.ResponseOp_ResponsePut:
			if v.ResponsePut != nil {
				s.fillHeader(&v.ResponsePut.Header)
			}
		case *pb.ResponseOp_ResponseDeleteRange:
			if v.ResponseDeleteRange != nil {
				s.fillHeader(&v.ResponseDeleteRange.Header)
			}
		case *pb.ResponseOp_ResponseTxn:
			if v.ResponseTxn != nil {
				s.fillHeader(&v.ResponseTxn.Header)
				fillTxnHeaders(s, v.ResponseTxn)
			}
		}
	}
}

func isReadOnlyTxn(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch v := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
			case *pb.RequestOp_RequestTxn:
				if !isReadOnlyTxn(v.RequestTxn) {
					return false
				}
			default:
				return false
			}
		}
	}
	return true
}

func isSerializableTxn(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch v := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				if v.RequestRange == nil || !v.RequestRange.Serializable {
					return false
				}
			case *pb.RequestOp_RequestTxn:
				if !isSerializableTxn(v.RequestTxn) {
					return false
				}
			}
		}
	}
	return true
}

// checkSize rejects a request larger than --max-request-bytes.
func (s *Server) checkSize(m interface{ Size() int }) error {
	if m.Size() > s.cfg.MaxRequestBytes {
		return rpctypes.ErrGRPCRequestTooLarge
	}
	return nil
}

func (s *Server) checkRange(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return s.checkSize(r)
}

func (s *Server) checkPut(r *pb.PutRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if r.IgnoreValue && len(r.Value) != 0 {
		return rpctypes.ErrGRPCValueProvided
	}
	if r.IgnoreLease && r.Lease != 0 {
		return rpctypes.ErrGRPCLeaseProvided
	}
	return s.checkSize(r)
}

func (s *Server) checkDeleteRange(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return s.checkSize(r)
}

func (s *Server) checkTxn(r *pb.TxnRequest) error {
	if err := s.checkSize(r); err != nil {
		return err
	}
	return s.checkTxnOps(r)
}

func (s *Server) checkTxnOps(r *pb.TxnRequest) error {
	max := s.cfg.MaxTxnOps
	if len(r.Compare) > max || len(r.Success) > max || len(r.Failure) > max {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			var err error
			switch v := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				err = s.checkRange(v.RequestRange)
			case *pb.RequestOp_RequestPut:
				err = s.checkPut(v.RequestPut)
			case *pb.RequestOp_RequestDeleteRange:
				err = s.checkDeleteRange(v.RequestDeleteRange)
			case *pb.RequestOp_RequestTxn:
				err = s.checkTxnOps(v.RequestTxn)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}
