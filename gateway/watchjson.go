// This file holds the gateway's watches: an HTTP watch that asks for plain
// Kubernetes JSON (no Table) is served from the API service's JSON watch
// stream (kplane.watchstream.v1), whose pieces the gateway writes out as
// they come. The API service renders each event once for all its watchers,
// and the gateway holds at most a piece per watcher: thousands of watchers
// of a large object no longer cost the gateway a decoded copy each.

package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/apierrors"
	watchstreamv1 "github.com/kplane/kplane/proto/kplane/watchstream/v1"
)

// streamsJSON reports whether the GET r on t is a watch the JSON stream
// serves: ?watch=true on a collection or an object, or the legacy /watch/
// paths, without a Table.
func streamsJSON(r *http.Request, t *target, info *requestInfo) bool {
	if t == nil || r.Method != http.MethodGet || info.table || (t.sub != "" && t.name != "") {
		return false
	}
	return t.watch || isTrue(r.URL.Query().Get("watch"))
}

// serveWatchJSON serves one watch from the API service's JSON stream.
// Errors before the watch is established are answered as Kubernetes does
// (an HTTP status with a Status body, except an expired resourceVersion,
// which is an ERROR event); later ones end the stream with an ERROR event.
func (g *Gateway) serveWatchJSON(w http.ResponseWriter, r *http.Request, t *target, info *requestInfo) {
	q := r.URL.Query()
	fs := q.Get("fieldSelector")
	if t.name != "" {
		if strings.TrimSpace(fs) != "" {
			fs += ","
		}
		fs += "metadata.name=" + t.name
	}
	req := &watchstreamv1.StreamWatchRequest{
		Group: t.res.Group, Version: t.res.Version, Resource: t.res.Resource, Namespace: t.namespace,
		LabelSelector: q.Get("labelSelector"), FieldSelector: fs,
		ResourceVersion: q.Get("resourceVersion"), ResourceVersionMatch: q.Get("resourceVersionMatch"),
		AllowWatchBookmarks: isTrue(q.Get("allowWatchBookmarks")),
	}
	if v := q.Get("timeoutSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeError(w, badRequest("invalid timeoutSeconds: "+strconv.Quote(v)))
			return
		}
		req.TimeoutSeconds = &n
	}
	if v := q.Get("sendInitialEvents"); v != "" {
		b := isTrue(v)
		req.SendInitialEvents = &b
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	md := info.md.Copy()
	if auth := r.Header.Get("Authorization"); auth != "" {
		// Forwarding mode: the API service authenticates the client's own
		// bearer token (impersonation mode removed the header).
		md = metadata.Join(md, metadata.Pairs("authorization", auth))
	}
	stream, err := g.watches.StreamWatch(metadata.NewOutgoingContext(ctx, md), req)
	if err == nil {
		// The established header comes once the watch is; a stream that
		// ends without it failed, and Recv says why.
		var md metadata.MD
		if md, err = stream.Header(); err == nil && len(md.Get(watchstreamv1.EstablishedHeader)) == 0 {
			if _, err = stream.Recv(); err == nil || errors.Is(err, io.EOF) {
				err = apierrors.NewInternalError(errors.New("the watch ended before it started"))
			}
		}
	}
	h := w.Header()
	if err != nil {
		se := apierrors.FromError(err)
		if se.Reason != apierrors.ReasonExpired && se.Reason != apierrors.ReasonGone {
			writeError(w, err)
			return
		}
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		writeErrorEvent(w, err)
		return
	}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	for {
		msg, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && r.Context().Err() == nil {
				writeErrorEvent(w, err)
			}
			return
		}
		data := msg.GetData()
		if _, err := w.Write(data); err != nil {
			return
		}
		if len(data) > 0 && data[len(data)-1] == '\n' {
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

// writeErrorEvent writes err as a watch stream's ERROR event.
func writeErrorEvent(w http.ResponseWriter, err error) {
	b, merr := (&watchEvent{Type: "ERROR"}).line(statusObject(err))
	if merr != nil {
		return
	}
	_, _ = w.Write(append(b, '\n'))
	_ = http.NewResponseController(w).Flush()
}
