package etcdserver

// This file holds the Watch service: many watchers on one gRPC stream, each a
// watcher of one mvcc.WatchStream, with create/cancel/progress requests and
// periodic progress notifications for watchers that asked for them.

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

	sess := &watchSession{s: w.s, stream: stream, ws: ws, progress: map[int64]bool{}}
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
	if cr.ProgressNotify {
		ss.mu.Lock()
		ss.progress[id] = true
		ss.mu.Unlock()
	}
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
			resp := &pb.WatchResponse{
				Header:          ss.s.header(wr.Revision),
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
			if err := ss.send(resp); err != nil {
				return err
			}
		}
	}
}
