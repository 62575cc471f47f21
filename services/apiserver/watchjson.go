// This file holds the watch of any resource as Kubernetes' JSON watch
// stream (kplane.watchstream.v1), which the gateway serves its HTTP
// watchers from: each event is rendered to its JSON line once, however many
// watchers it goes to, and sent in pieces of at most watchChunk bytes, so
// that the gateway never holds a whole large object per watcher.

package apiserver

import (
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv2 "github.com/kplane/kplane/proto/kplane/autoscaling/v2"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	watchstreamv1 "github.com/kplane/kplane/proto/kplane/watchstream/v1"
)

// watchChunk bounds one StreamWatchResponse.
const watchChunk = 32 << 10

type watchStreamService struct {
	watchstreamv1.UnimplementedWatchStreamServiceServer
	s *Server
}

// StreamWatch serves one watch as Kubernetes JSON.
func (x *watchStreamService) StreamWatch(req *watchstreamv1.StreamWatchRequest, stream watchstreamv1.WatchStreamService_StreamWatchServer) error {
	r := x.s.resources[req.GetResource()]
	if r == nil || r.Group != req.GetGroup() || r.Version != req.GetVersion() {
		// A view: another group's resource, or another version of the
		// group's own (autoscaling/v1 horizontalpodautoscalers).
		if v := x.s.views[req.GetGroup()+"/"+req.GetResource()]; v != nil {
			r = v
		}
	}
	if r == nil || r.Group != req.GetGroup() {
		r = x.s.crs.lookup(req.GetGroup(), req.GetResource())
	}
	if r == nil || r.Group != req.GetGroup() || r.Version != req.GetVersion() {
		return toGRPC(apierrors.NewNotFound(req.GetGroup(), req.GetResource(), ""))
	}
	opts := listOptions{
		LabelSelector: req.GetLabelSelector(), FieldSelector: req.GetFieldSelector(),
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		AllowWatchBookmarks: req.GetAllowWatchBookmarks(), SendInitialEvents: req.SendInitialEvents,
		TimeoutSeconds: req.GetTimeoutSeconds(),
	}
	err := x.s.runWatch(stream.Context(), r, req.GetNamespace(), opts, watchSink{
		encode: func(e *watchEvent) (any, trace.SpanContext, error) {
			if r.stored != nil {
				return viewJSONLine(r, e)
			}
			return e.jsonLine(r)
		},
		send: func(v any) error {
			for _, chunk := range v.([]*preEncoded) {
				if err := stream.SendMsg(chunk); err != nil {
					return err
				}
			}
			return nil
		},
	})
	return toGRPC(err)
}

// jsonLine returns the event as one line of Kubernetes' watch stream, in
// StreamWatch messages of at most watchChunk bytes each, rendered and
// encoded once however many watchers send them; and the trace context its
// object records.
func (e *watchEvent) jsonLine(r *resourceInfo) ([]*preEncoded, trace.SpanContext, error) {
	e.jsonOnce.Do(func() {
		obj := e.obj
		if e.typ == eventBookmark {
			obj = e.bookmark(r)
		} else {
			e.jsonSC = telemetry.ObjectSpanContext(meta(obj).GetAnnotations())
		}
		line, err := renderWatchLine(e.typ, obj)
		if err != nil {
			e.jsonErr = err
			return
		}
		for off := 0; off < len(line); off += watchChunk {
			b, err := proto.Marshal(&watchstreamv1.StreamWatchResponse{Data: line[off:min(off+watchChunk, len(line))]})
			if err != nil {
				e.jsonErr = err
				return
			}
			e.jsonChunks = append(e.jsonChunks, newPreEncoded(b))
		}
	})
	return e.jsonChunks, e.jsonSC, e.jsonErr
}

// viewJSONLine is jsonLine for a watcher of a view (eventsview.go): the
// event's object converted to the view's group version and rendered for
// this watcher alone (the shared rendering is the stored resource's).
func viewJSONLine(r *resourceInfo, e *watchEvent) ([]*preEncoded, trace.SpanContext, error) {
	obj := e.obj
	if e.typ == eventBookmark {
		obj = e.bookmark(r)
	}
	if c, ok := obj.(*corev1.Event); ok && r.Group == eventsGroup {
		obj = eventFromCore(c)
	}
	if _, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler); ok && r.Version == "v1" {
		h, err := hpaToV1(obj)
		if err != nil {
			return nil, trace.SpanContext{}, err
		}
		obj = h
	}
	line, err := renderWatchLine(e.typ, obj)
	if err != nil {
		return nil, trace.SpanContext{}, err
	}
	var chunks []*preEncoded
	for off := 0; off < len(line); off += watchChunk {
		b, err := proto.Marshal(&watchstreamv1.StreamWatchResponse{Data: line[off:min(off+watchChunk, len(line))]})
		if err != nil {
			return nil, trace.SpanContext{}, err
		}
		chunks = append(chunks, newPreEncoded(b))
	}
	return chunks, trace.SpanContext{}, nil
}

// renderWatchLine renders {"type":typ,"object":obj} and a newline.
func renderWatchLine(typ string, obj proto.Message) ([]byte, error) {
	b, err := customJSON(obj)
	if err != nil {
		return nil, fmt.Errorf("render a watch event: %w", err)
	}
	line := make([]byte, 0, len(b)+len(typ)+24)
	line = append(line, `{"type":"`...)
	line = append(line, typ...)
	line = append(line, `","object":`...)
	line = append(line, b...)
	return append(line, "}\n"...), nil
}
