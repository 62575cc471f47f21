package mvcc

import "go.etcd.io/etcd/api/v3/mvccpb"

// WatchOptions are the per-watcher options of etcd's WatchCreateRequest.
type WatchOptions struct {
	PrevKV   bool
	NoPut    bool
	NoDelete bool
	Fragment bool
}

// WatchResponse is one message for one watcher of a stream.
type WatchResponse struct {
	WatchID         int64
	Revision        int64
	CompactRevision int64
	Events          []*mvccpb.Event
}

// WatchStream multiplexes many watchers onto one channel.
type WatchStream struct {
	ch chan WatchResponse
}

// NewWatchStream returns a new stream.
func (s *Store) NewWatchStream() *WatchStream {
	return &WatchStream{ch: make(chan WatchResponse, 128)}
}

// Watch adds a watcher.
func (ws *WatchStream) Watch(id int64, key, end []byte, startRev int64, opts WatchOptions) (int64, error) {
	return 0, errNotImplemented
}

// Chan returns the stream's channel.
func (ws *WatchStream) Chan() <-chan WatchResponse { return ws.ch }

// RequestProgress asks for a progress response for one watcher.
func (ws *WatchStream) RequestProgress(id int64) {}

// RequestProgressAll asks for one progress response with WatchID -1.
func (ws *WatchStream) RequestProgressAll() {}

// Cancel removes a watcher.
func (ws *WatchStream) Cancel(id int64) error { return errNotImplemented }

// Close cancels every watcher and closes the channel.
func (ws *WatchStream) Close() {}
