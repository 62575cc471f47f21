// This file holds the fuzz and model tests of the store: two stores fed the
// same requests answer and end alike, a snapshot restores the same state,
// and reads at every revision match a simple model.

package mvcc

import (
	"bytes"
	"slices"

	"errors"
	"fmt"
	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"math/rand/v2"
	"os"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// opReader decodes arbitrary bytes into store requests: every byte string is
// a valid (if odd) sequence of requests, which is what fuzzing needs.
type opReader struct{ b []byte }

func (r *opReader) next() int {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return int(c)
}

var fuzzKeys = []string{"a", "ab", "abc", "b", "b/1", "b/2", "c", "\x00x", "zz"}

func (r *opReader) key() []byte { return []byte(fuzzKeys[r.next()%len(fuzzKeys)]) }

func (r *opReader) span() (key, end []byte) {
	key = r.key()
	switch r.next() % 5 {
	case 0, 1:
		return key, nil
	case 2:
		return key, []byte{0}
	case 3:
		return key, append(bytes.Clone(key), 0xff)
	default:
		return key, r.key()
	}
}

func (r *opReader) value() []byte { return fmt.Appendf(nil, "v%d", r.next()%7) }

func (r *opReader) put() *pb.PutRequest {
	req := &pb.PutRequest{Key: r.key(), Value: r.value()}
	flags := r.next()
	req.PrevKv = flags&1 != 0
	if flags&2 != 0 {
		req.Lease = int64(1 + r.next()%4)
	}
	if flags&4 != 0 {
		req.IgnoreValue = true
		req.Value = nil
	}
	if flags&8 != 0 {
		req.IgnoreLease = true
		req.Lease = 0
	}
	return req
}

func (r *opReader) deleteRange() *pb.DeleteRangeRequest {
	key, end := r.span()
	return &pb.DeleteRangeRequest{Key: key, RangeEnd: end, PrevKv: r.next()%2 == 0}
}

func (r *opReader) rangeReq() *pb.RangeRequest {
	key, end := r.span()
	req := &pb.RangeRequest{Key: key, RangeEnd: end, Limit: int64(r.next() % 4)}
	flags := r.next()
	if flags&1 != 0 {
		req.Revision = int64(r.next() % 40)
	}
	req.KeysOnly = flags&2 != 0
	req.CountOnly = flags&4 != 0
	if flags&8 != 0 {
		req.SortOrder = pb.RangeRequest_SortOrder(r.next() % 3)
		req.SortTarget = pb.RangeRequest_SortTarget(r.next() % 5)
	}
	if flags&16 != 0 {
		req.MinModRevision = int64(r.next() % 20)
		req.MaxCreateRevision = int64(r.next() % 40)
	}
	return req
}

func (r *opReader) compare() *pb.Compare {
	key, end := r.span()
	c := &pb.Compare{Key: key, RangeEnd: end, Result: pb.Compare_CompareResult(r.next() % 4), Target: pb.Compare_CompareTarget(r.next() % 5)}
	n := int64(r.next() % 8)
	switch c.Target {
	case pb.Compare_VERSION:
		c.TargetUnion = &pb.Compare_Version{Version: n}
	case pb.Compare_CREATE:
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: n}
	case pb.Compare_MOD:
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: n}
	case pb.Compare_VALUE:
		c.TargetUnion = &pb.Compare_Value{Value: r.value()}
	case pb.Compare_LEASE:
		c.TargetUnion = &pb.Compare_Lease{Lease: n % 5}
	}
	return c
}

func (r *opReader) ops(depth int) []*pb.RequestOp {
	n := r.next() % 4
	out := make([]*pb.RequestOp, 0, n)
	for range n {
		switch k := r.next() % 4; {
		case k == 0:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: r.put()}})
		case k == 1:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r.deleteRange()}})
		case k == 2 || depth >= 2:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r.rangeReq()}})
		default:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: r.txn(depth + 1)}})
		}
	}
	return out
}

func (r *opReader) txn(depth int) *pb.TxnRequest {
	req := &pb.TxnRequest{}
	for range r.next() % 3 {
		req.Compare = append(req.Compare, r.compare())
	}
	req.Success = r.ops(depth)
	req.Failure = r.ops(depth)
	return req
}

// applyNext decodes one request and applies it to s, returning a canonical
// rendering of the outcome (response bytes or error).
func applyNext(r *opReader, s *Store) string {
	marshal := func(m interface{ Marshal() ([]byte, error) }, err error) string {
		if err != nil {
			return "error: " + err.Error()
		}
		b, merr := m.Marshal()
		if merr != nil {
			return "marshal error: " + merr.Error()
		}
		return fmt.Sprintf("%x", b)
	}
	switch r.next() % 10 {
	case 0, 1, 2:
		resp, err := s.Put(r.put())
		return marshal(resp, err)
	case 3:
		resp, err := s.DeleteRange(r.deleteRange())
		return marshal(resp, err)
	case 4, 5:
		resp, err := s.Txn(r.txn(0))
		return marshal(resp, err)
	case 6:
		resp, err := s.Range(r.rangeReq())
		return marshal(resp, err)
	case 7:
		id := int64(1 + r.next()%4)
		return fmt.Sprint("grant ", s.LeaseGrant(id, 10))
	case 8:
		id := int64(1 + r.next()%4)
		rev, err := s.LeaseRevoke(id)
		return fmt.Sprint("revoke ", rev, err)
	default:
		rev := s.Rev() - int64(r.next()%4)
		resp, err := s.Compact(rev)
		return marshal(resp, err)
	}
}

// checkApply applies the requests encoded in data to two stores and checks
// that they answer alike and end alike, and that a snapshot of one restores
// to the same state.
func checkApply(t *testing.T, data []byte) {
	a, b := New(Config{}), New(Config{})
	defer a.Close()
	defer b.Close()
	ra, rb := &opReader{b: data}, &opReader{b: bytes.Clone(data)}
	ws := a.NewWatchStream()
	if _, err := ws.Watch(0, []byte{0}, []byte{0}, 1, WatchOptions{PrevKV: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; len(ra.b) > 0 && i < 3000; i++ {
		before := a.Rev()
		oa, ob := applyNext(ra, a), applyNext(rb, b)
		if oa != ob {
			t.Fatalf("request %d: stores answered differently:\n%s\n%s", i, oa, ob)
		}
		if a.Rev() < before || a.Rev() > before+1 {
			t.Fatalf("request %d moved the revision from %d to %d", i, before, a.Rev())
		}
	}
	ha, hb := mustHash(t, a, 0), mustHash(t, b, 0)
	if ha != hb || a.Rev() != b.Rev() || a.CompactRev() != b.CompactRev() {
		t.Fatalf("stores diverged: hash %x/%x rev %d/%d compact %d/%d", ha, hb, a.Rev(), b.Rev(), a.CompactRev(), b.CompactRev())
	}
	var buf bytes.Buffer
	if _, err := a.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	c := New(Config{})
	defer c.Close()
	if err := c.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if hc := mustHash(t, c, 0); hc != ha || c.Rev() != a.Rev() || c.CompactRev() != a.CompactRev() {
		t.Fatalf("restored store differs: hash %x/%x rev %d/%d", hc, ha, c.Rev(), a.Rev())
	}
	if diff := fmt.Sprint(histStrings(a)) != fmt.Sprint(histStrings(c)); diff {
		t.Fatal("restored history differs")
	}
	ws.Close()
}

func FuzzApply(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00\x01\x02\x03\x00\x00\x01\x05\x02\x04\x01\x07\x00"))
	f.Add([]byte("\x07\x01\x00\x02\x01\x03\x02\x01\x08\x01\x09\x00"))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 4 {
		seed := make([]byte, 256)
		for i := range seed {
			seed[i] = byte(rng.IntN(256))
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkApply(t, data)
	})
}

// Two stores fed the same random sequence of requests end with the same
// HashKV (and answer every request alike on the way).
//
// KPLANE_SOAK=1 runs many more and longer sequences.
func TestDeterminism(t *testing.T) {
	seeds, length := uint64(25), 3000
	if os.Getenv("KPLANE_SOAK") != "" {
		seeds, length = 2000, 30000
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			data := make([]byte, length)
			for i := range data {
				data[i] = byte(rng.IntN(256))
			}
			checkApply(t, data)
		})
	}
}

// TestAgainstModel checks puts, deletes and ranges at every revision
// against a naive model that copies the whole key space at every revision.
func TestAgainstModel(t *testing.T) {
	type kv = kvSummary
	rng := rand.New(rand.NewPCG(7, 7))
	s := newTestStore(t)
	states := map[int64]map[string]kv{1: {}}
	cur := map[string]kv{}
	rev := int64(1)
	keys := []string{"a", "a/1", "a/2", "b", "b/1", "c", "d"}
	// A watcher on everything, with prev_kv, checked against the model's
	// events; with the default buffer it falls behind and catches up.
	ws := s.NewWatchStream()
	defer ws.Close()
	wid, err := ws.Watch(0, []byte{0}, []byte{0}, 0, WatchOptions{PrevKV: true})
	if err != nil {
		t.Fatal(err)
	}
	var modelEvents []string
	event := func(rev int64, del bool, key string, now, prev kv) string {
		if del {
			return fmt.Sprintf("%d DEL %s prev=%+v", rev, key, prev)
		}
		return fmt.Sprintf("%d PUT %+v prev=%+v", rev, now, prev)
	}
	for i := range 400 {
		k := keys[rng.IntN(len(keys))]
		if rng.IntN(4) == 0 {
			end := keys[rng.IntN(len(keys))]
			resp := mustDelete(t, s, k, end)
			next := map[string]kv{}
			n := int64(0)
			var deleted []string
			for key, v := range cur {
				if key >= k && key < end {
					n++
					deleted = append(deleted, key)
					continue
				}
				next[key] = v
			}
			slices.Sort(deleted)
			for _, key := range deleted {
				modelEvents = append(modelEvents, event(rev+1, true, key, kv{}, cur[key]))
			}
			if resp.Deleted != n {
				t.Fatalf("op %d: delete [%s, %s) deleted %d, model %d", i, k, end, resp.Deleted, n)
			}
			if n > 0 {
				rev++
				cur = next
				states[rev] = cur
			}
			continue
		}
		v := fmt.Sprint(i)
		mustPut(t, s, k, v)
		rev++
		next := map[string]kv{}
		for key, val := range cur {
			next[key] = val
		}
		old, ok := cur[k]
		nv := kv{Key: k, Value: v, Create: rev, Mod: rev, Version: 1}
		if ok {
			nv.Create, nv.Version = old.Create, old.Version+1
		}
		next[k] = nv
		modelEvents = append(modelEvents, event(rev, false, k, nv, old))
		cur = next
		states[rev] = cur
	}
	if s.Rev() != rev {
		t.Fatalf("store at %d, model at %d", s.Rev(), rev)
	}
	var gotEvents []string
	for _, r := range receive(t, ws, wid, rev) {
		for _, ev := range r.Events {
			gotEvents = append(gotEvents, event(ev.Kv.ModRevision, ev.Type == mvccpb.DELETE, string(ev.Kv.Key), summarize(ev.Kv), summarize(ev.PrevKv)))
		}
	}
	if diff := cmp.Diff(modelEvents, gotEvents); diff != "" {
		t.Fatalf("watch events differ from the model (-model +store):\n%s", diff)
	}
	compactAt := rev / 2
	if _, err := s.Compact(compactAt); err != nil {
		t.Fatal(err)
	}
	last := map[string]kv{}
	for r := int64(1); r <= rev; r++ {
		if st, ok := states[r]; ok {
			last = st
		}
		resp, err := s.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: r})
		if r < compactAt {
			if !errors.Is(err, ErrCompacted) {
				t.Fatalf("range at %d below compaction %d: got %v", r, compactAt, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]kv{}
		for _, x := range resp.Kvs {
			got[string(x.Key)] = summarize(x)
		}
		if fmt.Sprint(got) != fmt.Sprint(last) {
			t.Fatalf("range at %d:\n got %v\nwant %v", r, got, last)
		}
	}
}
