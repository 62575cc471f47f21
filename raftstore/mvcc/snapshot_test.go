// This file holds the tests of snapshots: round trips, consistency under
// concurrent writes, corrupt input refused, and watchers across a restore.

package mvcc

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// populate writes a mixed history: puts, rewrites, deletes, a txn, leases.
func populate(t *testing.T, s *Store, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		k := fmt.Sprintf("key/%02d", i%23)
		switch {
		case i%10 == 3:
			mustDelete(t, s, k, "")
		case i%10 == 7:
			if _, err := s.Txn(&pb.TxnRequest{
				Compare: []*pb.Compare{cmpVersion(k, pb.Compare_GREATER, 0)},
				Success: []*pb.RequestOp{opPut(k, fmt.Sprint("txn", i)), opPut("txn/"+k, "1")},
				Failure: []*pb.RequestOp{opPut(k, "created")},
			}); err != nil {
				t.Fatal(err)
			}
		case i%17 == 5:
			id := int64(i)
			if err := s.LeaseGrant(id, 30); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Put(&pb.PutRequest{Key: []byte(k), Value: []byte("leased"), Lease: id}); err != nil {
				t.Fatal(err)
			}
		default:
			mustPut(t, s, k, fmt.Sprint(i))
		}
	}
}

func snapshotBytes(t *testing.T, s *Store) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := s.Snapshot().WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

// sameState checks that two stores answer alike at every readable revision.
func sameState(t *testing.T, a, b *Store) {
	t.Helper()
	if a.Rev() != b.Rev() || a.CompactRev() != b.CompactRev() {
		t.Fatalf("revisions: %d/%d vs %d/%d", a.Rev(), a.CompactRev(), b.Rev(), b.CompactRev())
	}
	for rev := max(a.CompactRev(), 1); rev <= a.Rev(); rev++ {
		if ha, hb := mustHash(t, a, rev), mustHash(t, b, rev); ha != hb {
			t.Errorf("HashKV(%d): %x vs %x", rev, ha, hb)
		}
		ra, err := a.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		rb, err := b.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(summaries(ra), summaries(rb)); diff != "" {
			t.Errorf("range at %d differs (-a +b):\n%s", rev, diff)
		}
	}
	if diff := cmp.Diff(a.Leases(), b.Leases()); diff != "" {
		t.Errorf("leases differ (-a +b):\n%s", diff)
	}
	if diff := cmp.Diff(histStrings(a), histStrings(b)); diff != "" {
		t.Errorf("histories differ (-a +b):\n%s", diff)
	}
}

func summaries(r *pb.RangeResponse) []kvSummary {
	var out []kvSummary
	for _, kv := range r.Kvs {
		out = append(out, summarize(kv))
	}
	return out
}

func histStrings(s *Store) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for i := range s.hist.len() {
		rec := s.hist.at(i)
		for _, ev := range rec.events {
			str := fmt.Sprintf("%d %s", rec.rev, eventString(ev))
			if ev.PrevKv != nil {
				str += fmt.Sprintf(" prev=%+v", summarize(ev.PrevKv))
			}
			out = append(out, str)
		}
	}
	return out
}

func TestSnapshotRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		compact int64
	}{
		{name: "no compaction"},
		{name: "compacted", compact: 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newTestStore(t)
			populate(t, src, 0, 120)
			if tt.compact > 0 {
				if _, err := src.Compact(tt.compact); err != nil {
					t.Fatal(err)
				}
			}
			data := snapshotBytes(t, src)
			dst := newTestStore(t)
			mustPut(t, dst, "junk", "to be replaced")
			if err := dst.Restore(bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			sameState(t, src, dst)
			// Both go on alike.
			populate(t, src, 120, 160)
			populate(t, dst, 120, 160)
			sameState(t, src, dst)
		})
	}
}

func TestSnapshotIsConsistentWhileWritesGoOn(t *testing.T) {
	s := newTestStore(t)
	populate(t, s, 0, 80)
	want := snapshotBytes(t, s)
	snap := s.Snapshot()
	populate(t, s, 80, 200)
	if _, err := s.Compact(150); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Error("a snapshot taken before later writes and a compaction changed")
	}
}

func TestRestoreRejectsCorruptSnapshots(t *testing.T) {
	src := newTestStore(t)
	populate(t, src, 0, 30)
	good := snapshotBytes(t, src)
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	tests := []struct {
		name string
		data []byte
	}{
		{name: "empty", data: nil},
		{name: "not a snapshot", data: []byte("hello, world, this is not it")},
		{name: "truncated", data: good[:len(good)-10]},
		{name: "bit flip", data: flipped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := newTestStore(t)
			mustPut(t, dst, "keep", "me")
			hash := mustHash(t, dst, 0)
			if err := dst.Restore(bytes.NewReader(tt.data)); !errors.Is(err, ErrSnapshotCorrupt) {
				t.Fatalf("got %v, want ErrSnapshotCorrupt", err)
			}
			if dst.Rev() != 2 || mustHash(t, dst, 0) != hash {
				t.Error("a failed restore changed the store")
			}
		})
	}
}

// Watchers survive a Restore (etcd #15271): a follower's watchers are caught
// up from the restored history, never sent an event twice or out of order.
func TestWatchersAcrossRestore(t *testing.T) {
	t.Run("snapshot ahead of the watchers", func(t *testing.T) {
		leader, follower := newTestStore(t), New(Config{WatchBufferSize: 4})
		defer follower.Close()
		populate(t, leader, 0, 50)
		populate(t, follower, 0, 50)
		ws := follower.NewWatchStream()
		defer ws.Close()
		synced, _ := ws.Watch(0, []byte("key/"), []byte("key0"), 0, WatchOptions{})
		behind, _ := ws.Watch(0, []byte("key/"), []byte("key0"), 10, WatchOptions{PrevKV: true})
		// The leader moves on; the follower installs its snapshot instead of
		// the log.
		var log []written
		for i := 0; i < 60; i++ {
			log = append(log, putW(t, leader, fmt.Sprintf("key/%02d", i%23), fmt.Sprint("after", i)))
		}
		if err := follower.Restore(bytes.NewReader(snapshotBytes(t, leader))); err != nil {
			t.Fatal(err)
		}
		// And applies more log.
		for i := 0; i < 20; i++ {
			w := putW(t, leader, "key/late", fmt.Sprint(i))
			log = append(log, w)
			if got := putW(t, follower, "key/late", fmt.Sprint(i)); got != w {
				t.Fatalf("follower wrote %v, leader %v", got, w)
			}
		}
		sameState(t, leader, follower)
		per := map[int64][]WatchResponse{}
		deadline := 0
		for len(per[synced]) == 0 || per[synced][len(per[synced])-1].Revision < follower.Rev() ||
			len(per[behind]) == 0 || per[behind][len(per[behind])-1].Revision < follower.Rev() {
			r := receiveAny(t, ws)
			per[r.WatchID] = append(per[r.WatchID], r)
			if deadline++; deadline > 10000 {
				t.Fatal("too many responses")
			}
		}
		checkStream(t, per[synced], log)
		// The lagging watcher sees its catch-up from 10 and then the rest.
		var want []written
		for _, ev := range eventsFrom(t, leader, 10) {
			want = append(want, ev)
		}
		checkStream(t, per[behind], want)
	})
	t.Run("snapshot behind the watchers", func(t *testing.T) {
		s := newTestStore(t)
		populate(t, s, 0, 40)
		old := snapshotBytes(t, s)
		oldRev := s.Rev()
		ws := s.NewWatchStream()
		defer ws.Close()
		id, _ := ws.Watch(0, []byte("key/"), []byte("key0"), oldRev+1, WatchOptions{})
		var log []written
		for i := 0; i < 10; i++ {
			log = append(log, putW(t, s, fmt.Sprintf("key/%02d", i), "x"))
		}
		seen := receive(t, ws, id, s.Rev())
		// Restore the older snapshot, then replay the same log: the watcher
		// must not see the replayed revisions again.
		if err := s.Restore(bytes.NewReader(old)); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ {
			putW(t, s, fmt.Sprintf("key/%02d", i), "x")
		}
		for i := 0; i < 5; i++ {
			log = append(log, putW(t, s, fmt.Sprintf("key/%02d", i), "new"))
		}
		seen = append(seen, receive(t, ws, id, s.Rev())...)
		checkStream(t, seen, log)
	})
	t.Run("watcher's next revision compacted in the snapshot", func(t *testing.T) {
		leader, follower := newTestStore(t), newTestStore(t)
		populate(t, leader, 0, 30)
		populate(t, follower, 0, 30)
		ws := follower.NewWatchStream()
		defer ws.Close()
		id, _ := ws.Watch(0, []byte("key/"), []byte("key0"), 0, WatchOptions{})
		populate(t, leader, 30, 60)
		if _, err := leader.Compact(leader.Rev() - 5); err != nil {
			t.Fatal(err)
		}
		if err := follower.Restore(bytes.NewReader(snapshotBytes(t, leader))); err != nil {
			t.Fatal(err)
		}
		resps := receive(t, ws, id, 0)
		if last := resps[len(resps)-1]; last.CompactRevision != leader.CompactRev() || len(last.Events) != 0 {
			t.Errorf("got %+v, want a compacted response at %d", last, leader.CompactRev())
		}
	})
}

func receiveAny(t *testing.T, ws *WatchStream) WatchResponse {
	t.Helper()
	select {
	case r, ok := <-ws.Chan():
		if !ok {
			t.Fatal("stream closed")
		}
		return r
	case <-timeAfterWaitLimit():
		t.Fatal("timed out waiting for a watch response")
	}
	return WatchResponse{}
}

// eventsFrom lists a store's key/ events from rev on, from its history.
func eventsFrom(t *testing.T, s *Store, rev int64) []written {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []written
	for i := range s.hist.len() {
		rec := s.hist.at(i)
		if rec.rev < rev {
			continue
		}
		for _, ev := range rec.events {
			if bytes.HasPrefix(ev.Kv.Key, []byte("key/")) {
				out = append(out, written{rev: rec.rev, key: string(ev.Kv.Key), value: string(ev.Kv.Value), del: ev.Type == 1})
			}
		}
	}
	return out
}
