// This file holds the test of reads, snapshots and watches running
// concurrently with writes (meant for -race).

package mvcc

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Reads, snapshots and watch bookkeeping run concurrently with the single
// writer; run with -race to check the locking.
func TestConcurrentReadsDuringWrites(t *testing.T) {
	s := newTestStore(t)
	if err := s.LeaseGrant(1, 10); err != nil {
		t.Fatal(err)
	}
	const writes = 1500
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := range writes {
			k := fmt.Sprintf("k/%d", i%31)
			switch i % 9 {
			case 3:
				if _, err := s.DeleteRange(&pb.DeleteRangeRequest{Key: []byte(k)}); err != nil {
					t.Error(err)
					return
				}
			case 5:
				if _, err := s.Put(&pb.PutRequest{Key: []byte(k), Value: []byte("l"), Lease: 1}); err != nil {
					t.Error(err)
					return
				}
			case 7:
				if _, err := s.Compact(s.Rev() - 50); err != nil && s.Rev() > 60 {
					t.Error(err)
					return
				}
			default:
				mustPut(t, s, k, fmt.Sprint(i))
			}
		}
	}()
	readers := []func(){
		func() {
			rev := s.Rev()
			if _, err := s.Range(&pb.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0"), Revision: rev}); err != nil && rev > s.CompactRev() {
				t.Errorf("range at %d: %v", rev, err)
			}
		},
		func() { _, _, _, _ = s.HashKV(0) },
		func() { s.Lease(1); s.Leases() },
		func() {
			if _, err := s.Snapshot().WriteTo(io.Discard); err != nil {
				t.Error(err)
			}
		},
		func() {
			ws := s.NewWatchStream()
			id, err := ws.Watch(0, []byte("k/"), []byte("k0"), max(s.CompactRev(), 1), WatchOptions{PrevKV: true})
			if err != nil {
				t.Error(err)
			}
			ws.RequestProgress(id)
			ws.RequestProgressAll()
			// Read whatever arrives, without waiting for more than is there.
			for drained := false; !drained; {
				select {
				case <-ws.Chan():
				default:
					drained = true
				}
			}
			ws.Close()
		},
	}
	for _, read := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if i > 2000 {
					return
				}
				read()
			}
		}()
	}
	wg.Wait()
	// The final state restores to the same hash.
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	r := newTestStore(t)
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if mustHash(t, r, 0) != mustHash(t, s, 0) {
		t.Error("restored hash differs")
	}
}
