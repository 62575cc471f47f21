// This file holds the Watch service: many watchers on one gRPC stream, each a
// watcher of one mvcc.WatchStream, with create/cancel/progress requests and
// periodic progress notifications for watchers that asked for them.

package etcdserver

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kplane/kplane/raftstore/mvcc"
)

// progressNotifyInterval is how often a watcher created with progress_notify
// gets a progress response (etcd's default is 10 minutes).
const progressNotifyInterval = 10 * time.Minute

type watchServer struct{ s *Server }

var _ pb.WatchServer = (*watchServer)(nil)

func (w *watchServer) Watch(stream pb.Watch_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	ws := w.s.store.NewWatchStream()
	defer ws.Close()

	sess := &watchSession{s: w.s, stream: stream, ws: ws, progress: map[int64]bool{}, fragment: map[int64]bool{}}
	errc := make(chan error, 2)
	go func() { errc <- sess.sendLoop(ctx) }()
	go func() { errc <- sess.recvLoop(ctx) }()
	err := <-errc
	cancel()
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

type watchSession struct {
	s      *Server
	stream pb.Watch_WatchServer
	ws     *mvcc.WatchStream

	// sendMu serialises Send: the receive loop answers create/cancel while
	// the send loop forwards events, and a watcher's "created" answer must
	// go out before any of its events.
	sendMu   sync.Mutex
	mu       sync.Mutex
	progress map[int64]bool // watchers created with progress_notify
	fragment map[int64]bool // watchers that accept fragmented responses
}

func (ss *watchSession) send(resp *pb.WatchResponse) error {
	ss.sendMu.Lock()
	defer ss.sendMu.Unlock()
	return ss.stream.Send(resp)
}

func (ss *watchSession) recvLoop(ctx context.Context) error {
	for {
		req, err := ss.stream.Recv()
		if err != nil {
			return err
		}
		switch u := req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			if err := ss.create(u.CreateRequest); err != nil {
				return err
			}
		case *pb.WatchRequest_CancelRequest:
			id := u.CancelRequest.WatchId
			if err := ss.ws.Cancel(id); err == nil {
				ss.mu.Lock()
				delete(ss.progress, id)
				delete(ss.fragment, id)
				ss.mu.Unlock()
				if err := ss.send(&pb.WatchResponse{Header: ss.s.header(0), WatchId: id, Canceled: true}); err != nil {
					return err
				}
			}
		case *pb.WatchRequest_ProgressRequest:
			ss.ws.RequestProgressAll()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (ss *watchSession) create(cr *pb.WatchCreateRequest) error {
	if cr == nil {
		return nil
	}
	opts := mvcc.WatchOptions{PrevKV: cr.PrevKv, Fragment: cr.Fragment}
	for _, f := range cr.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			opts.NoPut = true
		case pb.WatchCreateRequest_NODELETE:
			opts.NoDelete = true
		}
	}
	end := cr.RangeEnd
	if len(end) == 1 && end[0] == 0 {
		// "\x00" means every key from Key on, as in Range.
		end = []byte{0}
	}
	// Hold the send lock across Watch and the "created" answer, so that the
	// send loop cannot forward this watcher's first events before it.
	ss.sendMu.Lock()
	defer ss.sendMu.Unlock()
	id, err := ss.ws.Watch(cr.WatchId, cr.Key, end, cr.StartRevision, opts)
	if err != nil {
		return ss.stream.Send(&pb.WatchResponse{
			Header:       ss.s.header(0),
			WatchId:      cr.WatchId,
			Created:      true,
			Canceled:     true,
			CancelReason: err.Error(),
		})
	}
	ss.mu.Lock()
	if cr.ProgressNotify {
		ss.progress[id] = true
	}
	if cr.Fragment {
		ss.fragment[id] = true
	}
	ss.mu.Unlock()
	return ss.stream.Send(&pb.WatchResponse{Header: ss.s.header(0), WatchId: id, Created: true})
}

func (ss *watchSession) sendLoop(ctx context.Context) error {
	ticker := time.NewTicker(progressNotifyInterval)
	defer ticker.Stop()
	ch := ss.ws.Chan()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
			ss.mu.Lock()
			ids := make([]int64, 0, len(ss.progress))
			for id := range ss.progress {
				ids = append(ids, id)
			}
			ss.mu.Unlock()
			for _, id := range ids {
				ss.ws.RequestProgress(id)
			}
		case wr, ok := <-ch:
			if !ok {
				return io.EOF
			}
			// The header carries the response's own revision, even 0: a
			// progress notification (no events) says every event up to it
			// went out before it (mvcc's RequestProgress and
			// RequestProgressAll enqueue it only once the watchers are
			// synced, behind their events in this same channel), so it must
			// not be the revision at send time, which may be newer.
			hdr := ss.s.header(wr.Revision)
			hdr.Revision = wr.Revision
			resp := &pb.WatchResponse{
				Header:          hdr,
				WatchId:         wr.WatchID,
				CompactRevision: wr.CompactRevision,
				Events:          wr.Events,
			}
			if wr.CompactRevision != 0 {
				resp.Canceled = true
				resp.CancelReason = "mvcc: required revision has been compacted"
				ss.mu.Lock()
				delete(ss.progress, wr.WatchID)
				ss.mu.Unlock()
			}
			ss.mu.Lock()
			frag := ss.fragment[wr.WatchID]
			ss.mu.Unlock()
			if frag && resp.Size() > ss.s.cfg.MaxRequestBytes {
				if err := ss.sendFragments(resp); err != nil {
					return err
				}
				continue
			}
			if err := ss.send(resp); err != nil {
				return err
			}
		}
	}
}

// sendFragments splits a response too large for one message into several,
// each with as many events as fit under the request size limit (at least
// one); all but the last are marked Fragment, and the client joins them.
func (ss *watchSession) sendFragments(resp *pb.WatchResponse) error {
	limit := ss.s.cfg.MaxRequestBytes
	events := resp.Events
	for len(events) > 0 {
		part := *resp
		part.Events = nil
		size := part.Size()
		n := 0
		for n < len(events) && (n == 0 || size+events[n].Size() <= limit) {
			size += events[n].Size()
			n++
		}
		part.Events = events[:n]
		events = events[n:]
		part.Fragment = len(events) > 0
		if err := ss.send(&part); err != nil {
			return err
		}
	}
	return nil
}
