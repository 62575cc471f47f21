// This file holds the fuzz test of a real 3-member kplane store: arbitrary
// KV requests to any member crash none, and the members end with the same
// state.

package robustness

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// reqGen turns fuzz bytes into etcd KV requests. It reads the input as a
// stream of choices; when the input runs out every choice is zero.
type reqGen struct {
	data []byte
	pos  int
}

func (g *reqGen) byte() byte {
	if g.pos >= len(g.data) {
		return 0
	}
	b := g.data[g.pos]
	g.pos++
	return b
}

func (g *reqGen) done() bool { return g.pos >= len(g.data) }

func (g *reqGen) key() []byte {
	switch b := g.byte(); b % 8 {
	case 0:
		return nil // empty key: invalid for most requests
	case 1:
		return []byte{0}
	case 2:
		return []byte{0xff, 0xff}
	default:
		return []byte{'/', 'f', 'a' + b%5}
	}
}

func (g *reqGen) rangeEnd(key []byte) []byte {
	switch g.byte() % 5 {
	case 0:
		return nil // one key
	case 1:
		return []byte{0} // every key from key on
	case 2:
		end := append([]byte(nil), key...) // a prefix
		if len(end) > 0 {
			end[len(end)-1]++
		}
		return end
	case 3:
		return []byte{'/', 'a'} // often below key: empty range
	default:
		return []byte{'/', 'f', 'z'}
	}
}

func (g *reqGen) value() []byte {
	n := int(g.byte())
	if n == 255 {
		n = 2 << 20 // above --max-request-bytes: must be refused
	}
	return make([]byte, n)
}

func (g *reqGen) signed() int64 { return int64(int8(g.byte())) }

func (g *reqGen) rangeReq() *pb.RangeRequest {
	k := g.key()
	f := g.byte()
	return &pb.RangeRequest{
		Key: k, RangeEnd: g.rangeEnd(k),
		Limit: g.signed(), Revision: g.signed(),
		SortOrder: pb.RangeRequest_SortOrder(f % 4), SortTarget: pb.RangeRequest_SortTarget((f / 4) % 6),
		Serializable: f&1 == 1, KeysOnly: f&2 == 2, CountOnly: f&4 == 4,
		MinModRevision: g.signed(), MaxModRevision: g.signed(),
	}
}

func (g *reqGen) putReq() *pb.PutRequest {
	f := g.byte()
	r := &pb.PutRequest{Key: g.key(), Value: g.value(), PrevKv: f&1 == 1, IgnoreValue: f&2 == 2, IgnoreLease: f&4 == 4}
	if f&8 == 8 {
		r.Lease = int64(g.byte()) // no such lease: must be refused
	}
	return r
}

func (g *reqGen) deleteReq() *pb.DeleteRangeRequest {
	k := g.key()
	return &pb.DeleteRangeRequest{Key: k, RangeEnd: g.rangeEnd(k), PrevKv: g.byte()&1 == 1}
}

func (g *reqGen) compare() *pb.Compare {
	f := g.byte()
	c := &pb.Compare{Key: g.key(), Result: pb.Compare_CompareResult(f % 4), Target: pb.Compare_CompareTarget((f / 4) % 5)}
	switch c.Target {
	case pb.Compare_VERSION:
		c.TargetUnion = &pb.Compare_Version{Version: g.signed()}
	case pb.Compare_CREATE:
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: g.signed()}
	case pb.Compare_MOD:
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: g.signed()}
	case pb.Compare_VALUE:
		c.TargetUnion = &pb.Compare_Value{Value: g.value()}
	case pb.Compare_LEASE:
		c.TargetUnion = &pb.Compare_Lease{Lease: g.signed()}
	}
	if f&0x80 != 0 {
		c.RangeEnd = g.rangeEnd(c.Key)
	}
	return c
}

func (g *reqGen) requestOp(depth int) *pb.RequestOp {
	switch g.byte() % 4 {
	case 0:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: g.rangeReq()}}
	case 1:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: g.putReq()}}
	case 2:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: g.deleteReq()}}
	default:
		if depth > 2 {
			return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: g.rangeReq()}}
		}
		return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: g.txnReq(depth + 1)}}
	}
}

func (g *reqGen) txnReq(depth int) *pb.TxnRequest {
	t := &pb.TxnRequest{}
	for range g.byte() % 3 {
		t.Compare = append(t.Compare, g.compare())
	}
	for range g.byte() % 4 {
		t.Success = append(t.Success, g.requestOp(depth))
	}
	for range g.byte() % 3 {
		t.Failure = append(t.Failure, g.requestOp(depth))
	}
	return t
}

// FuzzKVRequests sends arbitrary Range, Put, DeleteRange and (nested) Txn
// requests to the members of a real 3-member kplane store, each request to a
// member picked by the input. Any request may be refused; none may crash a
// member, and afterwards every member must hold the same key-value state at
// the same revision (Maintenance HashKV where implemented, and a hash of a
// serializable Range on each member alone).
func FuzzKVRequests(f *testing.F) {
	f.Add([]byte{1, 3, 4, 10, 1, 0, 0})                              // put /fd
	f.Add([]byte{0, 3, 1, 0, 0, 0, 0, 0})                            // range everything
	f.Add([]byte{2, 4, 2, 0, 1, 5, 3})                               // delete a prefix
	f.Add([]byte{3, 2, 9, 3, 5, 2, 1, 3, 4, 5, 0, 1, 4, 2, 0})       // txn with compares
	f.Add([]byte{1, 3, 255, 0, 1, 0, 1, 3, 0, 8, 7})                 // oversized value, bad lease
	f.Add([]byte{3, 1, 3, 3, 3, 3, 3, 3, 3, 3, 1, 5, 5, 5, 5, 5})    // nested txns
	f.Add([]byte{0, 0, 0, 0, 0x80, 0x7f, 0x80, 0x7f, 0x80, 2, 0})    // negative limits and revisions
	f.Add([]byte{3, 2, 0x83, 0x8c, 5, 5, 2, 2, 1, 5, 5, 2, 1, 7, 0}) // compare with a range_end

	flavor := kplaneFlavor(f)
	ctx := context.Background()
	c, err := NewCluster(ctx, flavor, f.TempDir(), 3, nil)
	if err != nil {
		f.Fatalf("start kplane store: %v", err)
	}
	f.Cleanup(c.Close)
	if _, err := c.Leader(ctx); err != nil {
		f.Fatal(err)
	}
	conns := make([]pb.KVClient, 3)
	for i := range conns {
		conn, err := c.Conn(i)
		if err != nil {
			f.Fatal(err)
		}
		conns[i] = pb.NewKVClient(conn)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		g := &reqGen{data: data}
		for n := 0; !g.done() && n < 16; n++ {
			kv := conns[int(g.byte())%len(conns)]
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			switch g.byte() % 4 {
			case 0:
				_, _ = kv.Range(rctx, g.rangeReq())
			case 1:
				_, _ = kv.Put(rctx, g.putReq())
			case 2:
				_, _ = kv.DeleteRange(rctx, g.deleteReq())
			default:
				_, _ = kv.Txn(rctx, g.txnReq(0))
			}
			cancel()
		}
		for _, m := range c.Members() {
			if !m.Running() {
				t.Fatalf("member %s exited:\n%s", m.Name, tail(m.LogPath, 30))
			}
		}
		// A write through every member's peers fixes the revision to
		// compare at.
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := conns[rand.IntN(len(conns))].Put(rctx, &pb.PutRequest{Key: []byte("/fuzz-fence"), Value: []byte("x")})
		if err != nil {
			t.Fatalf("fence write: %v", err)
		}
		if _, err := c.CheckConvergence(ctx, resp.Header.Revision); err != nil {
			t.Fatalf("members diverged: %v", err)
		}
	})
}
