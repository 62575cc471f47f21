// This file holds watch streams: many watchers on one channel with etcd's
// options, progress requests, cancelling, and the synced watchers notified
// of each new revision.

package mvcc

import (
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Watches, as etcd's watchable store: every watcher is in one of three sets.
//
//   - synced: it has been sent every event up to the current revision; each
//     write hands it its events at once, without blocking.
//   - unsynced: it still needs revisions from nextRev on; the sync loop sends
//     them from the history in batches, then moves it to synced.
//   - victim: a write found its stream's channel full; the response that did
//     not fit is held and sent by the sync loop when there is room, then the
//     watcher catches up as unsynced.
//
// All watcher bookkeeping happens under Store.mu, and every send on a stream's
// channel happens under it after checking there is room, so a send never
// blocks and never happens after the stream is closed.

// WatchOptions are the per-watcher options of etcd's WatchCreateRequest.
type WatchOptions struct {
	// PrevKV asks for the previous value of the key in every event.
	PrevKV bool
	// NoPut and NoDelete filter out put and delete events.
	NoPut, NoDelete bool
	// Fragment is kept for the gRPC layer, which splits large responses;
	// responses from this package are never split.
	Fragment bool
}

// WatchResponse is one message for one watcher of a stream.
//
// With events, Revision is the revision up to which this watcher has now been
// sent everything. Without events and with CompactRevision 0, it is a progress
// notification: every event up to Revision was sent before it. With
// CompactRevision set, the watcher needed revisions below the compaction point
// and has been cancelled.
type WatchResponse struct {
	WatchID         int64
	Revision        int64
	CompactRevision int64
	Events          []*mvccpb.Event
}

type watcherState uint8

const (
	stateSynced watcherState = iota
	stateUnsynced
	stateVictim
	stateRemoved
)

type watcher struct {
	id    int64
	ws    *WatchStream
	span  keySpan
	opts  WatchOptions
	state watcherState
	// nextRev is, when unsynced, the next revision to send; when synced, the
	// lowest revision the watcher wants (events below it are skipped).
	nextRev int64
	// pending is a victim's undelivered response, starting at pendingFrom.
	pending     *WatchResponse
	pendingFrom int64
	// seen marks the revision last notified, so a watcher matching several
	// events of one revision gets them in one response.
	seen int64
}

func (w *watcher) wants(ev *mvccpb.Event) bool {
	if (ev.Type == mvccpb.PUT && w.opts.NoPut) || (ev.Type == mvccpb.DELETE && w.opts.NoDelete) {
		return false
	}
	return w.span.contains(ev.Kv.Key)
}

// eventsIn returns the record's events for w, sharing the record's slice
// when w wants all of them.
func (w *watcher) eventsIn(rec *histRecord) []*mvccpb.Event {
	src := rec.events
	if !w.opts.PrevKV {
		src = rec.plainEvents()
	}
	n := 0
	for _, ev := range src {
		if w.wants(ev) {
			n++
		}
	}
	if n == len(src) {
		return src
	}
	if n == 0 {
		return nil
	}
	out := make([]*mvccpb.Event, 0, n)
	for _, ev := range src {
		if w.wants(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// WatchStream multiplexes many watchers onto one channel, as etcd's
// WatchStream. Its methods may be called from any goroutine.
type WatchStream struct {
	s        *Store
	ch       chan WatchResponse
	watchers map[int64]*watcher // guarded by s.mu
	nextID   int64
	closed   bool
}

func (ws *WatchStream) room() bool { return len(ws.ch) < cap(ws.ch) }

// NewWatchStream returns a new, empty stream.
func (s *Store) NewWatchStream() *WatchStream {
	ws := &WatchStream{s: s, ch: make(chan WatchResponse, s.bufferSize), watchers: make(map[int64]*watcher)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch.closed {
		ws.closed = true
		close(ws.ch)
		return ws
	}
	s.watch.streams[ws] = struct{}{}
	return ws
}

// Watch adds a watcher on one key, a range [key, end) or every key from key on
// (end "\x00") and returns its ID: id itself, or for id 0 a new ID unique on
// the stream (0, 1, 2, ... as etcd assigns them, skipping IDs in use). The
// stream keeps references to key and end.
//
// startRev 0 watches from the next revision; a revision above the current one
// watches from there; an earlier revision first replays the history from it.
// A startRev below the compaction point gets one response with
// CompactRevision set, after which the watcher is gone.
func (ws *WatchStream) Watch(id int64, key, end []byte, startRev int64, opts WatchOptions) (int64, error) {
	s := ws.s
	sp := newKeySpan(key, end)
	if sp.empty() {
		return 0, ErrEmptyWatcherRange
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws.closed {
		return 0, ErrStreamClosed
	}
	if id == 0 {
		// As etcd: auto-assigned IDs count up from 0, skipping IDs in use.
		for {
			if _, used := ws.watchers[ws.nextID]; !used {
				break
			}
			ws.nextID++
		}
		id = ws.nextID
		ws.nextID++
	} else if _, used := ws.watchers[id]; used {
		return 0, ErrWatcherDuplicateID
	}
	w := &watcher{id: id, ws: ws, span: sp, opts: opts}
	ws.watchers[id] = w
	switch {
	case startRev <= 0:
		w.nextRev = s.rev + 1
		s.addSynced(w)
	case startRev > s.rev:
		w.nextRev = startRev
		s.addSynced(w)
	default:
		w.nextRev = startRev
		w.state = stateUnsynced
		s.watch.unsynced[w] = struct{}{}
		s.kickWatchers()
	}
	return id, nil
}

// Chan returns the stream's channel. It is closed by Close.
func (ws *WatchStream) Chan() <-chan WatchResponse { return ws.ch }

// RequestProgress asks for a progress notification for watcher id: a
// response without events at the revision up to which everything was sent to
// it. It is sent at once if the watcher is synced and the channel has room,
// otherwise as soon as both hold. Unknown IDs are ignored.
func (ws *WatchStream) RequestProgress(id int64) {
	s := ws.s
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := ws.watchers[id]
	if !ok || ws.closed {
		return
	}
	if w.state == stateSynced && ws.room() {
		ws.ch <- WatchResponse{WatchID: id, Revision: s.rev}
		return
	}
	s.watch.progress[w] = struct{}{}
	s.kickWatchers()
}

// RequestProgressAll asks for one progress notification for the whole stream,
// with WatchID -1, as etcd's WatchProgressRequest: it is sent once every
// watcher of the stream is synced, at the current revision.
func (ws *WatchStream) RequestProgressAll() {
	s := ws.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws.closed {
		return
	}
	if ws.allSynced() && ws.room() {
		ws.ch <- WatchResponse{WatchID: -1, Revision: s.rev}
		return
	}
	s.watch.progressAll[ws] = struct{}{}
	s.kickWatchers()
}

func (ws *WatchStream) allSynced() bool {
	for _, w := range ws.watchers {
		if w.state != stateSynced {
			return false
		}
	}
	return true
}

// Cancel removes watcher id; no response for it is sent after Cancel returns
// (responses already in the channel stay there). It returns
// ErrWatcherNotExist for an unknown ID.
func (ws *WatchStream) Cancel(id int64) error {
	s := ws.s
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := ws.watchers[id]
	if !ok {
		return ErrWatcherNotExist
	}
	s.removeWatcher(w)
	return nil
}

// Close removes every watcher of the stream and closes its channel.
func (ws *WatchStream) Close() {
	s := ws.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeStream(ws)
}

func (s *Store) closeStream(ws *WatchStream) {
	if ws.closed {
		return
	}
	for _, w := range ws.watchers {
		s.removeWatcher(w)
	}
	ws.closed = true
	close(ws.ch)
	delete(s.watch.streams, ws)
	delete(s.watch.progressAll, ws)
}

// addSynced puts w in the synced set.
func (s *Store) addSynced(w *watcher) {
	st := &s.watch
	w.state = stateSynced
	if w.span.single {
		set := st.keyWatchers[string(w.span.key)]
		if set == nil {
			set = make(map[*watcher]struct{})
			st.keyWatchers[string(w.span.key)] = set
		}
		set[w] = struct{}{}
		return
	}
	st.rangeWatchers[w] = struct{}{}
}

// removeSynced takes w out of the synced set.
func (s *Store) removeSynced(w *watcher) {
	st := &s.watch
	if w.span.single {
		if set := st.keyWatchers[string(w.span.key)]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(st.keyWatchers, string(w.span.key))
			}
		}
		return
	}
	delete(st.rangeWatchers, w)
}

// removeWatcher takes w out of every set and its stream.
func (s *Store) removeWatcher(w *watcher) {
	st := &s.watch
	switch w.state {
	case stateSynced:
		s.removeSynced(w)
	case stateUnsynced:
		delete(st.unsynced, w)
	case stateVictim:
		delete(st.victims, w)
		w.pending = nil
	}
	delete(st.progress, w)
	delete(w.ws.watchers, w.id)
	w.state = stateRemoved
}

// notify hands a new revision's events to the synced watchers; a watcher
// whose channel is full becomes a victim. The caller holds s.mu.
func (s *Store) notify(rec *histRecord) {
	st := &s.watch
	if len(st.keyWatchers) == 0 && len(st.rangeWatchers) == 0 {
		return
	}
	for _, ev := range rec.events {
		for w := range st.keyWatchers[string(ev.Kv.Key)] {
			s.notifyWatcher(w, rec)
		}
	}
	for w := range st.rangeWatchers {
		s.notifyWatcher(w, rec)
	}
}

func (s *Store) notifyWatcher(w *watcher, rec *histRecord) {
	if w.seen == rec.rev || w.state != stateSynced {
		return
	}
	w.seen = rec.rev
	if rec.rev < w.nextRev {
		return
	}
	evs := w.eventsIn(rec)
	if len(evs) == 0 {
		return
	}
	resp := WatchResponse{WatchID: w.id, Revision: rec.rev, Events: evs}
	if w.ws.room() {
		w.ws.ch <- resp
		return
	}
	// The stream is behind: hold this response and let the sync loop
	// deliver it and what follows, so that the write does not wait.
	s.removeSynced(w)
	w.state = stateVictim
	w.pending = &resp
	w.pendingFrom = rec.rev
	w.nextRev = rec.rev + 1
	s.watch.victims[w] = struct{}{}
	s.kickWatchers()
}
