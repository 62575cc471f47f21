// This file holds Txn: compares evaluated at one revision, the chosen ops
// checked before anything is written, then run as one revision.

package mvcc

import (
	"bytes"
	"cmp"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Txn applies a transaction as etcd does, as one revision:
//
//  1. Both branches are checked for duplicate keys (a key put twice, or put
//     and deleted, by ops that can run together) → ErrDuplicateKey.
//  2. Every compare, including those of nested txns on the chosen path, is
//     evaluated against the state before the txn; a compare over a range
//     holds if it holds for every key in it, and over no key it is evaluated
//     against an empty KeyValue (except VALUE, which is then false).
//  3. The ops on the chosen path are checked (leases, ignore_value/lease,
//     range revisions); any error fails the whole txn, which changes nothing.
//  4. The ops run in order, numbered by sub-revision; a Range inside the txn
//     sees the txn's own earlier writes.
//
// The revision moves by one if any op changed something.
func (s *Store) Txn(req *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := checkTxnDuplicates(req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	path := s.evalPath(req, s.rev)
	if err := s.checkPath(req, path); err != nil {
		return nil, err
	}
	w := s.newWriter()
	resp := w.execTxn(req, path)
	setTxnHeaders(resp, w.commit())
	return resp, nil
}

// txnPath is the outcome of a txn's compares and, for each op that is a
// nested txn, of its own (nil for other ops).
type txnPath struct {
	succeeded bool
	nested    []*txnPath
}

func branch(req *pb.TxnRequest, succeeded bool) []*pb.RequestOp {
	if succeeded {
		return req.Success
	}
	return req.Failure
}

func (s *Store) evalPath(req *pb.TxnRequest, rev int64) *txnPath {
	p := &txnPath{succeeded: true}
	for _, c := range req.Compare {
		if !s.compare(c, rev) {
			p.succeeded = false
			break
		}
	}
	ops := branch(req, p.succeeded)
	for i, op := range ops {
		if t := op.GetRequestTxn(); t != nil {
			if p.nested == nil {
				p.nested = make([]*txnPath, len(ops))
			}
			p.nested[i] = s.evalPath(t, rev)
		}
	}
	return p
}

var emptyKV mvccpb.KeyValue

// compare evaluates one compare at rev.
func (s *Store) compare(c *pb.Compare, rev int64) bool {
	kvs, _ := s.rangeKVs(newKeySpan(c.Key, c.RangeEnd), rev, 0, false)
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false
		}
		return compareKV(c, &emptyKV)
	}
	for _, kv := range kvs {
		if !compareKV(c, kv) {
			return false
		}
	}
	return true
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var r int
	switch c.Target {
	case pb.Compare_VALUE:
		r = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		r = cmp.Compare(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		r = cmp.Compare(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		r = cmp.Compare(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		r = cmp.Compare(kv.Lease, c.GetLease())
	default:
		return false
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return r == 0
	case pb.Compare_NOT_EQUAL:
		return r != 0
	case pb.Compare_GREATER:
		return r > 0
	case pb.Compare_LESS:
		return r < 0
	}
	return false
}

// checkPath checks every op on the chosen path against the state before the
// txn; the duplicate rules guarantee that no op on the path depends on an
// earlier write of the same txn for these checks.
func (s *Store) checkPath(req *pb.TxnRequest, p *txnPath) error {
	for i, op := range branch(req, p.succeeded) {
		switch r := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			if r.RequestRange != nil && r.RequestRange.Revision > 0 {
				if _, err := s.checkReadRev(r.RequestRange.Revision); err != nil {
					return err
				}
			}
		case *pb.RequestOp_RequestPut:
			if r.RequestPut != nil {
				if err := s.checkPut(r.RequestPut); err != nil {
					return err
				}
			}
		case *pb.RequestOp_RequestTxn:
			if r.RequestTxn != nil {
				if err := s.checkPath(r.RequestTxn, p.nested[i]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// execTxn runs the ops of a checked path.
func (w *writer) execTxn(req *pb.TxnRequest, p *txnPath) *pb.TxnResponse {
	ops := branch(req, p.succeeded)
	resp := &pb.TxnResponse{Succeeded: p.succeeded, Responses: make([]*pb.ResponseOp, len(ops))}
	for i, op := range ops {
		out := &pb.ResponseOp{}
		switch r := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			if r.RequestRange != nil {
				rev := r.RequestRange.Revision
				if rev <= 0 {
					// The txn's own revision: earlier writes of this txn are visible.
					rev = w.rev
				}
				out.Response = &pb.ResponseOp_ResponseRange{ResponseRange: w.s.rangeAt(r.RequestRange, rev)}
			}
		case *pb.RequestOp_RequestPut:
			if r.RequestPut != nil {
				out.Response = &pb.ResponseOp_ResponsePut{ResponsePut: w.applyPut(r.RequestPut)}
			}
		case *pb.RequestOp_RequestDeleteRange:
			if r.RequestDeleteRange != nil {
				out.Response = &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: w.applyDeleteRange(r.RequestDeleteRange)}
			}
		case *pb.RequestOp_RequestTxn:
			if r.RequestTxn != nil {
				out.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: w.execTxn(r.RequestTxn, p.nested[i])}
			}
		}
		resp.Responses[i] = out
	}
	return resp
}

// setTxnHeaders gives the txn response and every response inside it a header
// at the txn's revision.
func setTxnHeaders(resp *pb.TxnResponse, rev int64) {
	resp.Header = &pb.ResponseHeader{Revision: rev}
	for _, op := range resp.Responses {
		switch r := op.Response.(type) {
		case *pb.ResponseOp_ResponseRange:
			r.ResponseRange.Header = &pb.ResponseHeader{Revision: rev}
		case *pb.ResponseOp_ResponsePut:
			r.ResponsePut.Header = &pb.ResponseHeader{Revision: rev}
		case *pb.ResponseOp_ResponseDeleteRange:
			r.ResponseDeleteRange.Header = &pb.ResponseHeader{Revision: rev}
		case *pb.ResponseOp_ResponseTxn:
			setTxnHeaders(r.ResponseTxn, rev)
		}
	}
}

// checkTxnDuplicates applies etcd's rule to both branches of a txn.
func checkTxnDuplicates(req *pb.TxnRequest) error {
	if _, _, err := checkIntervals(req.Success); err != nil {
		return err
	}
	_, _, err := checkIntervals(req.Failure)
	return err
}

// checkIntervals returns the keys put and the spans deleted by ops and the txns
// nested in them, or ErrDuplicateKey if a key is put twice, or put and deleted,
// by ops that can both run. The two branches of one nested txn never run
// together, so they may put the same key.
func checkIntervals(ops []*pb.RequestOp) (map[string]struct{}, []keySpan, error) {
	var dels []keySpan
	for _, op := range ops {
		if d := op.GetRequestDeleteRange(); d != nil {
			dels = append(dels, newKeySpan(d.Key, d.RangeEnd))
		}
	}
	deleted := func(k []byte) bool {
		for _, sp := range dels {
			if sp.contains(k) {
				return true
			}
		}
		return false
	}
	puts := make(map[string]struct{})
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		putsThen, delsThen, err := checkIntervals(t.Success)
		if err != nil {
			return nil, nil, err
		}
		putsElse, delsElse, err := checkIntervals(t.Failure)
		if err != nil {
			return nil, nil, err
		}
		for k := range putsThen {
			if _, dup := puts[k]; dup || deleted([]byte(k)) {
				return nil, nil, ErrDuplicateKey
			}
			puts[k] = struct{}{}
		}
		for k := range putsElse {
			if _, dup := puts[k]; dup {
				if _, sameTxn := putsThen[k]; !sameTxn {
					return nil, nil, ErrDuplicateKey
				}
			}
			if deleted([]byte(k)) {
				return nil, nil, ErrDuplicateKey
			}
			puts[k] = struct{}{}
		}
		dels = append(dels, delsThen...)
		dels = append(dels, delsElse...)
	}
	for _, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		if _, dup := puts[string(p.Key)]; dup || deleted(p.Key) {
			return nil, nil, ErrDuplicateKey
		}
		puts[string(p.Key)] = struct{}{}
	}
	return puts, dels, nil
}
