// This file holds the tests of watches: catching up then live, options,
// errors, future and compacted starts, progress, stalled streams, and many
// watchers on one stream.

package mvcc

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// waitLimit bounds every wait for a watch response; it is a safety net
// against hangs, not a timing assertion.
const waitLimit = 30 * time.Second

// written is one write the test made, to check watch streams against.
type written struct {
	rev   int64
	key   string
	value string
	del   bool
}

func (w written) String() string {
	if w.del {
		return fmt.Sprintf("%d:DEL %s", w.rev, w.key)
	}
	return fmt.Sprintf("%d:PUT %s=%s", w.rev, w.key, w.value)
}

func eventString(ev *mvccpb.Event) string {
	return written{rev: ev.Kv.ModRevision, key: string(ev.Kv.Key), value: string(ev.Kv.Value), del: ev.Type == mvccpb.DELETE}.String()
}

// receive reads responses for watcher id until one reaches untilRev (or, with
// untilRev 0, exactly n responses arrive).
func receive(t *testing.T, ws *WatchStream, id, untilRev int64) []WatchResponse {
	t.Helper()
	var out []WatchResponse
	deadline := time.After(waitLimit)
	for {
		select {
		case resp, ok := <-ws.Chan():
			if !ok {
				t.Fatalf("stream closed after %d responses", len(out))
			}
			if resp.WatchID != id {
				continue
			}
			out = append(out, resp)
			if resp.Revision >= untilRev || resp.CompactRevision != 0 {
				return out
			}
		case <-deadline:
			t.Fatalf("no response reaching revision %d within %v; got %d responses", untilRev, waitLimit, len(out))
		}
	}
}

// checkStream checks P4 for one watcher: events in revision order, every
// write in want exactly once, every revision in one response, and every
// response's Revision at least its last event's.
func checkStream(t *testing.T, resps []WatchResponse, want []written) {
	t.Helper()
	var got []string
	seenRev := map[int64]int{}
	last := int64(0)
	for i, r := range resps {
		revsHere := map[int64]bool{}
		for _, ev := range r.Events {
			rev := ev.Kv.ModRevision
			if rev < last {
				t.Errorf("response %d: event at %d after one at %d", i, rev, last)
			}
			last = rev
			if !revsHere[rev] {
				revsHere[rev] = true
				seenRev[rev]++
			}
			got = append(got, eventString(ev))
			if r.Revision < rev {
				t.Errorf("response %d: header revision %d below its event at %d", i, r.Revision, rev)
			}
		}
	}
	for rev, n := range seenRev {
		if n > 1 {
			t.Errorf("revision %d split over %d responses", rev, n)
		}
	}
	var exp []string
	for _, w := range want {
		exp = append(exp, w.String())
	}
	if strings.Join(got, "\n") != strings.Join(exp, "\n") {
		t.Errorf("events differ: got %d, want %d\n got: %.400s\nwant: %.400s", len(got), len(exp), strings.Join(got, " "), strings.Join(exp, " "))
	}
}

func putW(t *testing.T, s *Store, k, v string) written {
	t.Helper()
	return written{rev: mustPut(t, s, k, v).Header.Revision, key: k, value: v}
}

func delW(t *testing.T, s *Store, k string) written {
	t.Helper()
	return written{rev: mustDelete(t, s, k, "").Header.Revision, key: k, del: true}
}

func since(ws []written, rev int64, prefix string) []written {
	var out []written
	for _, w := range ws {
		if w.rev >= rev && strings.HasPrefix(w.key, prefix) {
			out = append(out, w)
		}
	}
	return out
}

func TestWatchCatchUpThenLive(t *testing.T) {
	s := newTestStore(t)
	var log []written
	for i := range 200 {
		log = append(log, putW(t, s, fmt.Sprintf("p/%d", i%17), fmt.Sprint(i)))
		if i%5 == 0 {
			log = append(log, putW(t, s, fmt.Sprintf("q/%d", i), "x"))
		}
		if i%7 == 0 {
			log = append(log, delW(t, s, fmt.Sprintf("p/%d", i%17)))
		}
	}
	ws := s.NewWatchStream()
	defer ws.Close()
	const from = 50
	id, err := ws.Watch(0, []byte("p/"), []byte("p0"), from, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A burst of live writes while the watcher is still catching up.
	for i := range 300 {
		log = append(log, putW(t, s, fmt.Sprintf("p/%d", i%13), fmt.Sprint("live", i)))
		if i%11 == 0 {
			if _, err := s.Txn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("p/txn-a", "1"), opPut("q/txn", "1"), opPut("p/txn-b", "1")}}); err != nil {
				t.Fatal(err)
			}
			rev := s.Rev()
			log = append(log, written{rev: rev, key: "p/txn-a", value: "1"}, written{rev: rev, key: "q/txn", value: "1"}, written{rev: rev, key: "p/txn-b", value: "1"})
		}
	}
	resps := receive(t, ws, id, s.Rev())
	checkStream(t, resps, since(log, from, "p/"))
}

func TestWatchSingleKeyAndOptions(t *testing.T) {
	s := newTestStore(t)
	ws := s.NewWatchStream()
	defer ws.Close()
	plain, _ := ws.Watch(0, []byte("k"), nil, 0, WatchOptions{})
	prev, _ := ws.Watch(0, []byte("k"), nil, 0, WatchOptions{PrevKV: true})
	noPut, _ := ws.Watch(0, []byte("k"), nil, 0, WatchOptions{NoPut: true})
	noDel, _ := ws.Watch(0, []byte("k"), nil, 0, WatchOptions{NoDelete: true})
	if plain == prev || prev == noPut || noPut == noDel {
		t.Fatalf("auto IDs not unique: %d %d %d %d", plain, prev, noPut, noDel)
	}
	mustPut(t, s, "other", "x")
	mustPut(t, s, "k", "1")
	mustPut(t, s, "k", "2")
	mustDelete(t, s, "k", "")
	got := map[int64][]string{}
	deadline := time.After(waitLimit)
	for n := 0; n < 9; n++ { // plain 3, prev 3, noPut 1, noDel 2
		select {
		case r := <-ws.Chan():
			for _, ev := range r.Events {
				s := eventString(ev)
				if ev.PrevKv != nil {
					s += " prev=" + string(ev.PrevKv.Value)
				}
				got[r.WatchID] = append(got[r.WatchID], s)
			}
		case <-deadline:
			t.Fatal("timed out")
		}
	}
	want := map[int64][]string{
		plain: {"3:PUT k=1", "4:PUT k=2", "5:DEL k"},
		prev:  {"3:PUT k=1", "4:PUT k=2 prev=1", "5:DEL k prev=2"},
		noPut: {"5:DEL k"},
		noDel: {"3:PUT k=1", "4:PUT k=2"},
	}
	for id, w := range want {
		if fmt.Sprint(got[id]) != fmt.Sprint(w) {
			t.Errorf("watcher %d got %v, want %v", id, got[id], w)
		}
	}
}

func TestWatchErrors(t *testing.T) {
	s := newTestStore(t)
	ws := s.NewWatchStream()
	if _, err := ws.Watch(5, []byte("a"), nil, 0, WatchOptions{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		id      int64
		key     string
		end     string
		wantErr error
	}{
		{name: "duplicate ID", id: 5, key: "b", wantErr: ErrWatcherDuplicateID},
		{name: "empty range", key: "b", end: "a", wantErr: ErrEmptyWatcherRange},
		{name: "equal ends", key: "b", end: "b", wantErr: ErrEmptyWatcherRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var end []byte
			if tt.end != "" {
				end = []byte(tt.end)
			}
			if _, err := ws.Watch(tt.id, []byte(tt.key), end, 0, WatchOptions{}); !errors.Is(err, tt.wantErr) {
				t.Errorf("got %v, want %v", err, tt.wantErr)
			}
		})
	}
	if err := ws.Cancel(99); !errors.Is(err, ErrWatcherNotExist) {
		t.Errorf("Cancel(unknown): got %v, want ErrWatcherNotExist", err)
	}
	if err := ws.Cancel(5); err != nil {
		t.Errorf("Cancel(5): %v", err)
	}
	mustPut(t, s, "a", "1")
	select {
	case r := <-ws.Chan():
		t.Errorf("cancelled watcher got %+v", r)
	default:
	}
	ws.Close()
	if _, ok := <-ws.Chan(); ok {
		t.Error("channel open after Close")
	}
	if _, err := ws.Watch(0, []byte("a"), nil, 0, WatchOptions{}); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("Watch after Close: got %v, want ErrStreamClosed", err)
	}
	ws.Close() // idempotent
}

func TestWatchFutureStartRevision(t *testing.T) {
	s := newTestStore(t)
	ws := s.NewWatchStream()
	defer ws.Close()
	id, _ := ws.Watch(0, []byte("k"), nil, 4, WatchOptions{})
	mustPut(t, s, "k", "2") // 2: skipped
	mustPut(t, s, "k", "3") // 3: skipped
	mustPut(t, s, "k", "4") // 4: wanted
	resps := receive(t, ws, id, 4)
	checkStream(t, resps, []written{{rev: 4, key: "k", value: "4"}})
}

func TestWatchCompacted(t *testing.T) {
	s := newTestStore(t)
	for i := range 10 {
		mustPut(t, s, "k", fmt.Sprint(i)) // 2..11
	}
	if _, err := s.Compact(6); err != nil {
		t.Fatal(err)
	}
	ws := s.NewWatchStream()
	defer ws.Close()
	t.Run("below the compaction point", func(t *testing.T) {
		id, err := ws.Watch(0, []byte("k"), nil, 5, WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		resps := receive(t, ws, id, 0)
		last := resps[len(resps)-1]
		if last.CompactRevision != 6 || len(last.Events) != 0 {
			t.Errorf("got %+v, want a compacted response at 6", last)
		}
		if err := ws.Cancel(id); !errors.Is(err, ErrWatcherNotExist) {
			t.Errorf("compacted watcher still exists: Cancel gave %v", err)
		}
	})
	t.Run("at the compaction point", func(t *testing.T) {
		id, err := ws.Watch(0, []byte("k"), nil, 6, WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		resps := receive(t, ws, id, 11)
		var want []written
		for rev := int64(6); rev <= 11; rev++ {
			want = append(want, written{rev: rev, key: "k", value: fmt.Sprint(rev - 2)})
		}
		checkStream(t, resps, want)
	})
	t.Run("compaction while catching up", func(t *testing.T) {
		small := New(Config{WatchBufferSize: 1})
		defer small.Close()
		for i := range 10 {
			mustPut(t, small, "k", fmt.Sprint(i))
		}
		ws := small.NewWatchStream()
		defer ws.Close()
		a, _ := ws.Watch(0, []byte("k"), nil, 2, WatchOptions{})
		b, _ := ws.Watch(0, []byte("k"), nil, 3, WatchOptions{})
		// Both need history from 2 and 3 while the one-slot channel is held
		// up; compaction past them must end them with a compacted response.
		small.mu.Lock()
		small.syncPass()
		small.mu.Unlock()
		if _, err := small.Compact(8); err != nil {
			t.Fatal(err)
		}
		// One watcher got its whole history in the one slot before the
		// compaction; the other must be told it is compacted.
		got := map[int64]WatchResponse{}
		deadline := time.After(waitLimit)
		for len(got) < 2 {
			select {
			case r := <-ws.Chan():
				got[r.WatchID] = r
			case <-deadline:
				t.Fatalf("timed out with %d responses", len(got))
			}
		}
		full, compacted := 0, 0
		for id, r := range got {
			switch {
			case r.CompactRevision == 8 && len(r.Events) == 0:
				compacted++
			case len(r.Events) > 0 && r.Revision == 11 && r.Events[0].Kv.ModRevision == map[int64]int64{a: 2, b: 3}[id]:
				full++
			default:
				t.Errorf("watcher %d got %+v", id, r)
			}
		}
		if full != 1 || compacted != 1 {
			t.Errorf("got %d full and %d compacted responses, want 1 and 1", full, compacted)
		}
	})
}

func TestWatchProgress(t *testing.T) {
	s := New(Config{WatchBufferSize: 4})
	defer s.Close()
	ws := s.NewWatchStream()
	defer ws.Close()
	id, _ := ws.Watch(0, []byte("k"), nil, 0, WatchOptions{})
	mustPut(t, s, "other", "1") // 2
	ws.RequestProgress(id)
	r := <-ws.Chan()
	if r.WatchID != id || r.Revision != 2 || len(r.Events) != 0 {
		t.Fatalf("progress on a synced watcher = %+v, want revision 2 without events", r)
	}
	ws.RequestProgressAll()
	if r := <-ws.Chan(); r.WatchID != -1 || r.Revision != 2 {
		t.Fatalf("stream progress = %+v, want ID -1 at 2", r)
	}

	// Fill the stream so that the watcher falls behind, ask for progress,
	// then check it arrives after every event at or below its revision.
	var log []written
	for i := range 40 {
		log = append(log, putW(t, s, "k", fmt.Sprint(i)))
	}
	ws.RequestProgress(id)
	ws.RequestProgressAll()
	for i := range 10 {
		log = append(log, putW(t, s, "k", fmt.Sprint("more", i)))
	}
	var resps []WatchResponse
	gotProgress, gotAll := int64(0), int64(0)
	deadline := time.After(waitLimit)
	for gotProgress == 0 || gotAll == 0 || len(resps) == 0 || resps[len(resps)-1].Revision < s.Rev() {
		select {
		case r := <-ws.Chan():
			delivered := int64(0)
			for _, e := range resps {
				if len(e.Events) > 0 {
					delivered = e.Events[len(e.Events)-1].Kv.ModRevision
				}
			}
			switch {
			case len(r.Events) == 0 && r.WatchID == id:
				gotProgress = r.Revision
				if delivered < lastWrittenAtOrBelow(log, r.Revision) {
					t.Errorf("progress at %d overtook events: only %d delivered", r.Revision, delivered)
				}
			case len(r.Events) == 0 && r.WatchID == -1:
				gotAll = r.Revision
				if delivered < lastWrittenAtOrBelow(log, r.Revision) {
					t.Errorf("stream progress at %d overtook events: only %d delivered", r.Revision, delivered)
				}
			default:
				resps = append(resps, r)
			}
		case <-deadline:
			t.Fatalf("timed out: progress %d, all %d, %d responses", gotProgress, gotAll, len(resps))
		}
	}
	checkStream(t, resps, log)
}

func lastWrittenAtOrBelow(log []written, rev int64) int64 {
	last := int64(0)
	for _, w := range log {
		if w.rev <= rev {
			last = w.rev
		}
	}
	return last
}

// A stream nobody reads must not block writes; its watchers become victims
// and catch up, without gaps or duplicates, once it is read again.
func TestWatchStalledStreamDoesNotBlockWrites(t *testing.T) {
	s := New(Config{WatchBufferSize: 2})
	defer s.Close()
	stalled := s.NewWatchStream()
	defer stalled.Close()
	healthy := s.NewWatchStream()
	defer healthy.Close()
	sid, _ := stalled.Watch(0, []byte("k/"), []byte("k0"), 0, WatchOptions{PrevKV: true})
	hid, _ := healthy.Watch(0, []byte("k/"), []byte("k0"), 0, WatchOptions{})

	const n = 2000
	var log []written
	var healthyResps []WatchResponse
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			log = append(log, putW(t, s, fmt.Sprintf("k/%d", i%50), fmt.Sprint(i)))
		}
	}()
	// Keep the healthy stream drained while the writes run.
	for finished := false; !finished; {
		select {
		case r := <-healthy.Chan():
			healthyResps = append(healthyResps, r)
		case <-done:
			finished = true
		case <-time.After(waitLimit):
			t.Fatal("writes blocked behind a stalled watch stream")
		}
	}
	s.mu.RLock()
	victims, unsynced := len(s.watch.victims), len(s.watch.unsynced)
	s.mu.RUnlock()
	if victims+unsynced == 0 {
		t.Error("the stalled stream's watcher was never moved aside")
	}
	healthyResps = append(healthyResps, receiveAfter(t, healthy, hid, healthyResps, s.Rev())...)
	checkStream(t, healthyResps, log)
	resps := receive(t, stalled, sid, s.Rev())
	checkStream(t, resps, log)
	for _, r := range resps {
		for _, ev := range r.Events {
			if ev.Kv.Version > 1 && ev.PrevKv == nil {
				t.Fatalf("event %s lost its prev_kv while catching up", eventString(ev))
			}
		}
	}
}

func receiveAfter(t *testing.T, ws *WatchStream, id int64, got []WatchResponse, until int64) []WatchResponse {
	if len(got) > 0 && got[len(got)-1].Revision >= until {
		return nil
	}
	return receive(t, ws, id, until)
}

func TestWatchManyWatchersOneStream(t *testing.T) {
	s := New(Config{WatchBufferSize: 8})
	defer s.Close()
	// Small batches and scan budgets, so catch-up takes many passes.
	s.limits = syncLimits{batchRevs: 7, scanRevs: 50, scanPerPass: 120}
	ws := s.NewWatchStream()
	defer ws.Close()
	ids := map[int64]string{}
	starts := map[int64]int64{}
	for i := range 20 {
		prefix := fmt.Sprintf("w%d/", i%5)
		id, err := ws.Watch(0, []byte(prefix), []byte(prefix[:len(prefix)-1]+"0"), int64(1+i%3), WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = prefix
		starts[id] = int64(1 + i%3)
	}
	var log []written
	for i := range 500 {
		log = append(log, putW(t, s, fmt.Sprintf("w%d/%d", i%5, i%7), fmt.Sprint(i)))
	}
	// A watcher is done when it has its last expected event: catch-up sends
	// nothing for revisions without events for it.
	lastWant := map[int64]int64{}
	for id, prefix := range ids {
		want := since(log, starts[id], prefix)
		lastWant[id] = want[len(want)-1].rev
	}
	per := map[int64][]WatchResponse{}
	done := map[int64]bool{}
	deadline := time.After(waitLimit)
	for len(done) < len(ids) {
		select {
		case r := <-ws.Chan():
			per[r.WatchID] = append(per[r.WatchID], r)
			if n := len(r.Events); n > 0 && r.Events[n-1].Kv.ModRevision >= lastWant[r.WatchID] {
				done[r.WatchID] = true
			}
		case <-deadline:
			t.Fatalf("timed out with %d of %d watchers done", len(done), len(ids))
		}
	}
	for id, prefix := range ids {
		checkStream(t, per[id], since(log, starts[id], prefix))
	}
}

func timeAfterWaitLimit() <-chan time.Time { return time.After(waitLimit) }

// Close ends the sync loop even while a stream is stalled, and closes every
// stream.
func TestCloseStopsSyncLoop(t *testing.T) {
	s := New(Config{WatchBufferSize: 1})
	ws := s.NewWatchStream()
	if _, err := ws.Watch(0, []byte("k"), nil, 0, WatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		mustPut(t, s, "k", fmt.Sprint(i))
	}
	s.mu.RLock()
	running, done := s.watch.running, s.watch.done
	s.mu.RUnlock()
	if !running {
		t.Fatal("no sync loop for a stalled stream")
	}
	s.Close()
	select {
	case <-done:
	default:
		t.Error("sync loop still running after Close")
	}
	n := 0
	for range ws.Chan() {
		n++
	}
	if n != 1 {
		t.Errorf("got %d buffered responses before the channel closed, want 1", n)
	}
	if _, err := s.NewWatchStream().Watch(0, []byte("k"), nil, 0, WatchOptions{}); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("Watch on a closed store: got %v, want ErrStreamClosed", err)
	}
	s.Close() // idempotent
}
