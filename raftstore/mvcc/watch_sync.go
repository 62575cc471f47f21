// This file holds the sync loop that catches unsynced watchers up from the
// history in bounded batches, letting writes take their turn between passes.

package mvcc

import (
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The sync loop: one goroutine, started when there is work (unsynced or
// victim watchers, progress requests that could not be answered at once) and
// ending when there is none, or when the store is closed.

const (
	// syncInterval is how long the loop waits between passes while a stream
	// has no room.
	syncInterval = 10 * time.Millisecond
	// maxBatchRevs bounds the revisions with events in one catch-up response.
	maxBatchRevs = 1000
	// maxScanRevs bounds the history records scanned for one watcher, and
	// maxScanPerPass for all watchers, in one pass, which holds the store's
	// lock; the next pass follows at once, after writes had their turn.
	maxScanRevs    = 20000
	maxScanPerPass = 100000
)

// syncLimits are the bounds above; tests lower them.
type syncLimits struct {
	batchRevs, scanRevs, scanPerPass int
}

var defaultSyncLimits = syncLimits{batchRevs: maxBatchRevs, scanRevs: maxScanRevs, scanPerPass: maxScanPerPass}

type watchState struct {
	streams       map[*WatchStream]struct{}
	keyWatchers   map[string]map[*watcher]struct{} // synced, on one key
	rangeWatchers map[*watcher]struct{}            // synced, on a range
	unsynced      map[*watcher]struct{}
	victims       map[*watcher]struct{}
	progress      map[*watcher]struct{}     // RequestProgress not yet answered
	progressAll   map[*WatchStream]struct{} // RequestProgressAll not yet answered

	running bool
	closed  bool
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{} // closed when the running loop exits
}

func (st *watchState) init() {
	st.streams = make(map[*WatchStream]struct{})
	st.keyWatchers = make(map[string]map[*watcher]struct{})
	st.rangeWatchers = make(map[*watcher]struct{})
	st.unsynced = make(map[*watcher]struct{})
	st.victims = make(map[*watcher]struct{})
	st.progress = make(map[*watcher]struct{})
	st.progressAll = make(map[*WatchStream]struct{})
	st.kick = make(chan struct{}, 1)
	st.stop = make(chan struct{})
}

func (st *watchState) idle() bool {
	return len(st.unsynced) == 0 && len(st.victims) == 0 && len(st.progress) == 0 && len(st.progressAll) == 0
}

// kickWatchers makes sure the sync loop runs if there is work. The caller
// holds s.mu.
func (s *Store) kickWatchers() {
	st := &s.watch
	if st.closed || st.idle() {
		return
	}
	if !st.running {
		st.running = true
		st.done = make(chan struct{})
		go s.syncLoop(st.done)
	}
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

func (s *Store) syncLoop(done chan struct{}) {
	defer close(done)
	timer := time.NewTimer(syncInterval)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if !s.watch.closed {
			s.syncPass()
		}
		if s.watch.closed || s.watch.idle() {
			s.watch.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		timer.Reset(syncInterval)
		select {
		case <-s.watch.kick:
		case <-timer.C:
		case <-s.watch.stop:
		}
	}
}

// syncPass delivers what it can without blocking. The caller holds s.mu.
func (s *Store) syncPass() {
	st := &s.watch
	for w := range st.victims {
		if !w.ws.room() {
			continue
		}
		w.ws.ch <- *w.pending
		w.pending = nil
		delete(st.victims, w)
		w.state = stateUnsynced
		st.unsynced[w] = struct{}{}
	}
	budget := s.limits.scanPerPass
	for w := range st.unsynced {
		if budget <= 0 {
			select {
			case st.kick <- struct{}{}:
			default:
			}
			break
		}
		budget -= s.syncWatcher(w)
	}
	for w := range st.progress {
		if w.state == stateSynced && w.ws.room() {
			w.ws.ch <- WatchResponse{WatchID: w.id, Revision: s.rev}
			delete(st.progress, w)
		}
	}
	for ws := range st.progressAll {
		if ws.allSynced() && ws.room() {
			ws.ch <- WatchResponse{WatchID: -1, Revision: s.rev}
			delete(st.progressAll, ws)
		}
	}
}

// syncWatcher sends an unsynced watcher its next batch from the history and
// moves it to synced once it has everything. It returns how many history
// records it scanned.
func (s *Store) syncWatcher(w *watcher) int {
	st := &s.watch
	if !w.ws.room() {
		return 0
	}
	if w.nextRev < s.compactRev {
		w.ws.ch <- WatchResponse{WatchID: w.id, Revision: s.rev, CompactRevision: s.compactRev}
		s.removeWatcher(w)
		return 0
	}
	if w.nextRev > s.rev {
		delete(st.unsynced, w)
		s.addSynced(w)
		return 0
	}
	var evs []*mvccpb.Event
	last := w.nextRev - 1
	batched, scanned := 0, 0
	i, n := s.hist.index(w.nextRev), s.hist.len()
	for ; i < n && batched < s.limits.batchRevs && scanned < s.limits.scanRevs; i++ {
		rec := s.hist.at(i)
		scanned++
		last = rec.rev
		if more := w.eventsIn(rec); len(more) > 0 {
			evs = append(evs, more...)
			batched++
		}
	}
	if i == n {
		last = s.rev
	}
	if len(evs) > 0 {
		w.ws.ch <- WatchResponse{WatchID: w.id, Revision: last, Events: evs}
	}
	w.nextRev = last + 1
	if w.nextRev > s.rev {
		delete(st.unsynced, w)
		s.addSynced(w)
	}
	return scanned
}

// restoreWatchers runs after Restore replaced the history: every watcher is
// caught up again from the revision after the last one it was sent, against
// the new history. oldRev is the revision before the restore, up to which
// synced watchers had been sent everything. The caller holds s.mu.
func (s *Store) restoreWatchers(oldRev int64) {
	st := &s.watch
	for ws := range st.streams {
		for _, w := range ws.watchers {
			switch w.state {
			case stateSynced:
				s.removeSynced(w)
				w.nextRev = max(w.nextRev, oldRev+1)
			case stateVictim:
				delete(st.victims, w)
				w.nextRev = w.pendingFrom
				w.pending = nil
			}
			w.seen = 0
			w.state = stateUnsynced
			st.unsynced[w] = struct{}{}
		}
	}
	s.kickWatchers()
}

// Close stops the store's sync loop and closes every watch stream. Reads and
// writes still work afterwards, but new streams are closed at once.
func (s *Store) Close() {
	s.mu.Lock()
	st := &s.watch
	if st.closed {
		s.mu.Unlock()
		return
	}
	st.closed = true
	close(st.stop)
	for ws := range st.streams {
		s.closeStream(ws)
	}
	done, running := st.done, st.running
	s.mu.Unlock()
	if running {
		<-done
	}
}
