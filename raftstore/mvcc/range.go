// This file holds Range: reads of a key, a range or a prefix at a revision,
// with etcd's limits, counts and sort orders.

package mvcc

import (
	"bytes"
	"cmp"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// checkReadRev resolves a requested read revision (0 = current) against the
// state: ErrFutureRev above the current revision, ErrCompacted below the
// compaction point. The caller holds s.mu.
func (s *Store) checkReadRev(rev int64) (int64, error) {
	switch {
	case rev <= 0:
		return s.rev, nil
	case rev > s.rev:
		return 0, ErrFutureRev
	case rev < s.compactRev:
		return 0, ErrCompacted
	}
	return rev, nil
}

// rangeKVs returns the values live at rev in sp, in key order, at most limit
// of them (0 = no limit), and how many there are in all. With countOnly it
// returns only the count.
func (s *Store) rangeKVs(sp keySpan, rev, limit int64, countOnly bool) (kvs []*mvccpb.KeyValue, count int64) {
	s.ascend(s.tree, sp, func(ki *keyIndex) bool {
		e, ok := ki.at(rev)
		if !ok {
			return true
		}
		count++
		if !countOnly && (limit <= 0 || int64(len(kvs)) < limit) {
			kvs = append(kvs, e.kv)
		}
		return true
	})
	return kvs, count
}

// Range reads one key, a range [key, range_end), or every key from key on
// (range_end "\x00"), at the current revision or at req.Revision. It honours
// every option of etcd's RangeRequest the way etcd's server does: limit (with
// more), count_only, keys_only, sort order and target, and the min/max
// mod/create revision filters; count is the number of keys in the range
// before the filters and the limit. It returns ErrFutureRev or ErrCompacted
// for a revision out of reach. serializable is the caller's concern.
func (s *Store) Range(req *pb.RangeRequest) (*pb.RangeResponse, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	rev, err := s.checkReadRev(req.Revision)
	if err != nil {
		return nil, err
	}
	return s.rangeAt(req, rev), nil
}

// rangeAt runs a checked range at rev; the caller holds s.mu.
func (s *Store) rangeAt(req *pb.RangeRequest, rev int64) *pb.RangeResponse {
	limit := req.Limit
	filtered := req.MinModRevision != 0 || req.MaxModRevision != 0 || req.MinCreateRevision != 0 || req.MaxCreateRevision != 0
	if req.SortOrder != pb.RangeRequest_NONE || filtered {
		// Everything is fetched, then filtered, sorted and cut.
		limit = 0
	}
	if limit > 0 {
		// One more than asked tells whether there is more.
		limit++
	}
	kvs, count := s.rangeKVs(newKeySpan(req.Key, req.RangeEnd), rev, limit, req.CountOnly)
	if filtered {
		kvs = slices.DeleteFunc(kvs, func(kv *mvccpb.KeyValue) bool {
			return (req.MaxModRevision != 0 && kv.ModRevision > req.MaxModRevision) ||
				(req.MinModRevision != 0 && kv.ModRevision < req.MinModRevision) ||
				(req.MaxCreateRevision != 0 && kv.CreateRevision > req.MaxCreateRevision) ||
				(req.MinCreateRevision != 0 && kv.CreateRevision < req.MinCreateRevision)
		})
	}
	sortKVs(kvs, req.SortOrder, req.SortTarget)
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: rev}, Count: count}
	if req.Limit > 0 && int64(len(kvs)) > req.Limit {
		kvs = kvs[:req.Limit]
		resp.More = true
	}
	if req.KeysOnly {
		for i, kv := range kvs {
			c := *kv
			c.Value = nil
			kvs[i] = &c
		}
	}
	resp.Kvs = kvs
	return resp
}

// sortKVs sorts as etcd does: a target other than KEY with order NONE means
// ascending; KEY ascending is the natural order.
func sortKVs(kvs []*mvccpb.KeyValue, order pb.RangeRequest_SortOrder, target pb.RangeRequest_SortTarget) {
	if target != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if order == pb.RangeRequest_NONE || (target == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND) {
		return
	}
	var by func(a, b *mvccpb.KeyValue) int
	switch target {
	case pb.RangeRequest_VERSION:
		by = func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.Version, b.Version) }
	case pb.RangeRequest_CREATE:
		by = func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) }
	case pb.RangeRequest_MOD:
		by = func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.ModRevision, b.ModRevision) }
	case pb.RangeRequest_VALUE:
		by = func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Value, b.Value) }
	default:
		by = func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) }
	}
	// Ties keep key order in either direction, so the result is deterministic.
	if order == pb.RangeRequest_DESCEND {
		slices.SortStableFunc(kvs, func(a, b *mvccpb.KeyValue) int { return by(b, a) })
		return
	}
	slices.SortStableFunc(kvs, by)
}
