// This file holds the per-member watcher and the watch-guarantee checker.

package robustness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// ErrProgressOvertook is returned by CheckWatch when a progress
// notification at R arrived before an event at or below R (etcd #15220,
// fixed in etcd 3.4.25 and 3.5.8).
var ErrProgressOvertook = errors.New("watch: progress notification overtook an event")

// WatchResponse is what a watcher saw in one response.
type WatchResponse struct {
	Events []Event
	// Progress is set on a progress notification (no events): its header
	// revision, which promises every event up to it was delivered.
	Progress int64
}

// Watcher watches every key on one member from a start revision, resumes
// after every disconnect from the last revision it saw + 1, and asks for a
// progress notification now and then. It records every response.
type Watcher struct {
	Member string

	mu        sync.Mutex
	responses []WatchResponse
	resumes   int
}

// WatchMember runs a watcher on member i from revision start until ctx ends.
// It returns when ctx is done; the recorded responses are in the Watcher.
func (c *Cluster) WatchMember(ctx context.Context, i int, start int64, w *Watcher) {
	w.Member = c.Members()[i].Name
	next := start
	for ctx.Err() == nil {
		last, err := c.watchOnce(ctx, i, next, w)
		if last >= next {
			next = last + 1
		}
		if err != nil && ctx.Err() == nil {
			w.mu.Lock()
			w.resumes++
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// watchOnce runs one watch stream and returns the last revision it
// delivered (or start-1).
func (c *Cluster) watchOnce(ctx context.Context, i int, start int64, w *Watcher) (int64, error) {
	last := start - 1
	conn, err := c.Conn(i)
	if err != nil {
		return last, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pb.NewWatchClient(conn).Watch(sctx)
	if err != nil {
		return last, err
	}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte{0}, RangeEnd: allKeys, StartRevision: start,
	}}}); err != nil {
		return last, err
	}
	// Progress requests go out from their own goroutine; gRPC allows one
	// sender and one receiver at a time.
	go func() {
		t := time.NewTicker(300 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				if stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}) != nil {
					return
				}
			}
		}
	}()
	for {
		resp, err := stream.Recv()
		if err != nil {
			return last, err
		}
		switch {
		case resp.Created:
			continue
		case resp.Canceled || resp.CompactRevision != 0:
			return last, fmt.Errorf("watch on %s canceled at %d (compact revision %d): %s", w.Member, start, resp.CompactRevision, resp.CancelReason)
		case len(resp.Events) == 0:
			w.add(WatchResponse{Progress: resp.Header.Revision})
		default:
			evs := toEvents(resp.Events)
			w.add(WatchResponse{Events: evs})
			last = evs[len(evs)-1].Revision
		}
	}
}

func (w *Watcher) add(r WatchResponse) {
	w.mu.Lock()
	w.responses = append(w.responses, r)
	w.mu.Unlock()
}

// Responses returns what the watcher recorded.
func (w *Watcher) Responses() []WatchResponse {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]WatchResponse(nil), w.responses...)
}

// LastRevision is the revision of the last event delivered (0 if none).
func (w *Watcher) LastRevision() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.responses) - 1; i >= 0; i-- {
		if evs := w.responses[i].Events; len(evs) > 0 {
			return evs[len(evs)-1].Revision
		}
	}
	return 0
}

// Resumes is how many times the watcher reconnected.
func (w *Watcher) Resumes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.resumes
}

// CheckWatch validates one watcher's responses against the final event
// stream (every event from revision 1, agreed by all members), for a watch
// that started at revision start:
//   - ordered: revisions never go back, and events follow the stream's order;
//   - unique: no event is delivered twice;
//   - reliable: no gaps — the events are exactly the stream's events from
//     start up to the last one delivered;
//   - atomic: all events of one revision come in one response;
//   - bookmarkable: after a progress notification at R, no event at or
//     below R arrives (a notification is never ahead of the events).
func CheckWatch(responses []WatchResponse, stream []Event, start int64) error {
	var want []Event
	for _, ev := range stream {
		if ev.Revision >= start {
			want = append(want, ev)
		}
	}
	var (
		got      []Event
		progress int64
		lastRev  int64
	)
	for ri, r := range responses {
		if r.Progress != 0 {
			// A notification behind the last delivered event promises
			// less than what was delivered (etcd 3.4 sends such stale
			// ones); it breaks nothing.
			progress = max(progress, r.Progress)
			continue
		}
		for _, ev := range r.Events {
			if ev.Revision <= progress {
				return fmt.Errorf("%w: response %d: event at revision %d after a progress notification at %d", ErrProgressOvertook, ri, ev.Revision, progress)
			}
			if ev.Revision < lastRev {
				return fmt.Errorf("watch: response %d: revision went back from %d to %d", ri, lastRev, ev.Revision)
			}
			got = append(got, ev)
		}
		// Atomic: the next response must not carry this response's last
		// revision again.
		lastRev = r.Events[len(r.Events)-1].Revision
		if ri+1 < len(responses) {
			for _, next := range responses[ri+1:] {
				if len(next.Events) > 0 {
					if next.Events[0].Revision == lastRev {
						return fmt.Errorf("watch: revision %d split across responses", lastRev)
					}
					break
				}
			}
		}
	}
	if len(got) > len(want) {
		return fmt.Errorf("watch: %d events delivered, but the store has only %d from revision %d (duplicates?)", len(got), len(want), start)
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("watch: event %d: got %+v, want %+v (gap, duplicate or reorder)", i, got[i], want[i])
		}
	}
	return nil
}
