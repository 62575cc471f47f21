// This file holds events.k8s.io/v1 Event, served as a view of the stored
// core/v1 Event: the same objects under the same keys and one watch cache,
// converted field by field at the edge (note is message, regarding is
// involvedObject, deprecatedSource is source, and so on), as kube-apiserver
// serves both group versions from /registry/events.

package apiserver

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	eventsv1 "github.com/kplane/kplane/proto/kplane/events/v1"
)

// eventsGroup is the events.k8s.io group.
const eventsGroup = "events.k8s.io"

// eventsView is events.k8s.io/v1 events over core, the stored resource:
// requests through it are authorized, audited, admitted and validated as
// events.k8s.io's, and its objects are core/v1 Events inside the service.
func eventsView(core *resourceInfo) *resourceInfo {
	return &resourceInfo{
		Group: eventsGroup, Version: "v1", Kind: "Event", Resource: "events",
		Namespaced: true, AllowUnconditionalUpdate: true,
		New: core.New, stored: core, fieldLabel: eventsFieldLabel,
	}
}

// eventsFieldLabel is Kubernetes' field label conversion of events.k8s.io/v1
// Event: the labels a field selector may name, as the core/v1 labels the
// stored objects expose.
func eventsFieldLabel(label string) (string, bool) {
	switch label {
	case "reason", "type", "metadata.namespace", "metadata.name":
		return label, true
	case "reportingController":
		return "reportingComponent", true
	case "regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
		"regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath":
		return "involvedObject" + label[len("regarding"):], true
	}
	return "", false
}

// eventToCore is an events.k8s.io/v1 Event as the stored core/v1 Event.
func eventToCore(e *eventsv1.Event) *corev1.Event {
	if e == nil {
		return nil
	}
	c := &corev1.Event{
		ApiVersion: "v1", Kind: "Event",
		Metadata:            e.GetMetadata(),
		EventTime:           e.GetEventTime(),
		ReportingController: e.GetReportingController(),
		ReportingInstance:   e.GetReportingInstance(),
		Action:              e.GetAction(),
		Reason:              e.GetReason(),
		InvolvedObject:      e.GetRegarding(),
		Related:             e.GetRelated(),
		Message:             e.GetNote(),
		Type:                e.GetType(),
		Source:              e.GetDeprecatedSource(),
		FirstTimestamp:      e.GetDeprecatedFirstTimestamp(),
		LastTimestamp:       e.GetDeprecatedLastTimestamp(),
		Count:               e.GetDeprecatedCount(),
	}
	if s := e.GetSeries(); s != nil {
		c.Series = &corev1.EventSeries{Count: s.GetCount(), LastObservedTime: s.GetLastObservedTime()}
	}
	return proto.Clone(c).(*corev1.Event)
}

// eventFromCore is a stored core/v1 Event as an events.k8s.io/v1 Event.
func eventFromCore(c *corev1.Event) *eventsv1.Event {
	if c == nil {
		return nil
	}
	e := &eventsv1.Event{
		ApiVersion: eventsGroup + "/v1", Kind: "Event",
		Metadata:                 c.GetMetadata(),
		EventTime:                c.GetEventTime(),
		ReportingController:      c.GetReportingController(),
		ReportingInstance:        c.GetReportingInstance(),
		Action:                   c.GetAction(),
		Reason:                   c.GetReason(),
		Regarding:                c.GetInvolvedObject(),
		Related:                  c.GetRelated(),
		Note:                     c.GetMessage(),
		Type:                     c.GetType(),
		DeprecatedSource:         c.GetSource(),
		DeprecatedFirstTimestamp: c.GetFirstTimestamp(),
		DeprecatedLastTimestamp:  c.GetLastTimestamp(),
		DeprecatedCount:          c.GetCount(),
	}
	if s := c.GetSeries(); s != nil {
		e.Series = &eventsv1.EventSeries{Count: s.GetCount(), LastObservedTime: s.GetLastObservedTime()}
	}
	// A copy: the core object may be the watch cache's, shared and never
	// modified.
	return proto.Clone(e).(*eventsv1.Event)
}

// eventFrom converts what a generic handler returned (a core/v1 Event, or
// nil).
func eventFrom(obj proto.Message) *eventsv1.Event {
	c, _ := obj.(*corev1.Event)
	return eventFromCore(c)
}

// eventsv1EventView serves events.k8s.io/v1 events through the generic
// handlers of the view r (eventsView).
type eventsv1EventView struct {
	eventsv1.UnimplementedEventServiceServer
	s *Server
	r *resourceInfo
}

var _ eventsv1.EventServiceServer = (*eventsv1EventView)(nil)

func (x *eventsv1EventView) GetEvent(ctx context.Context, req *eventsv1.GetEventRequest) (*eventsv1.GetEventResponse, error) {
	obj, err := x.s.get(ctx, x.r, req.GetNamespace(), req.GetName(), req.GetResourceVersion())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &eventsv1.GetEventResponse{Event: eventFrom(obj)}, nil
}

func (x *eventsv1EventView) ListEvents(ctx context.Context, req *eventsv1.ListEventsRequest) (*eventsv1.ListEventsResponse, error) {
	items, lm, err := x.s.list(ctx, x.r, req.GetNamespace(), listOptions{
		LabelSelector: req.GetLabelSelector(), FieldSelector: req.GetFieldSelector(),
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		Limit: req.GetLimit(), Continue: req.GetContinue(),
	})
	if err != nil {
		return nil, toGRPC(err)
	}
	list := &eventsv1.EventList{ApiVersion: x.r.APIVersion(), Kind: "EventList", Metadata: lm, Items: make([]*eventsv1.Event, len(items))}
	for i, it := range items {
		list.Items[i] = eventFrom(it)
	}
	return &eventsv1.ListEventsResponse{List: list}, nil
}

// WatchEvents watches the core events' cache, converting each event for
// this watcher: the cache's shared encoding is core/v1's, so a view's
// events are encoded per watcher.
func (x *eventsv1EventView) WatchEvents(req *eventsv1.WatchEventsRequest, stream eventsv1.EventService_WatchEventsServer) error {
	opts := listOptions{
		LabelSelector: req.GetLabelSelector(), FieldSelector: req.GetFieldSelector(),
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		AllowWatchBookmarks: req.GetAllowWatchBookmarks(), SendInitialEvents: req.SendInitialEvents,
	}
	if req.TimeoutSeconds != nil {
		opts.TimeoutSeconds = req.GetTimeoutSeconds()
	}
	err := x.s.runWatch(stream.Context(), x.r, req.GetNamespace(), opts, watchSink{
		encode: func(e *watchEvent) (any, trace.SpanContext, error) {
			obj := e.obj
			if e.typ == eventBookmark {
				obj = e.bookmark(x.r)
			}
			return &eventsv1.WatchEventsResponse{Type: e.typ, Object: eventFrom(obj)}, trace.SpanContext{}, nil
		},
		send: stream.SendMsg,
	})
	return toGRPC(err)
}

func (x *eventsv1EventView) CreateEvent(ctx context.Context, req *eventsv1.CreateEventRequest) (*eventsv1.CreateEventResponse, error) {
	obj, err := x.s.create(ctx, x.r, req.GetNamespace(), nilIfEmpty(eventToCore(req.GetEvent())), writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &eventsv1.CreateEventResponse{Event: eventFrom(obj)}, nil
}

func (x *eventsv1EventView) UpdateEvent(ctx context.Context, req *eventsv1.UpdateEventRequest) (*eventsv1.UpdateEventResponse, error) {
	obj, err := x.s.update(ctx, x.r, req.GetNamespace(), req.GetName(), nilIfEmpty(eventToCore(req.GetEvent())), writeOptions{DryRun: req.GetDryRun(), FieldManager: req.GetFieldManager()})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &eventsv1.UpdateEventResponse{Event: eventFrom(obj)}, nil
}

func (x *eventsv1EventView) DeleteEvent(ctx context.Context, req *eventsv1.DeleteEventRequest) (*eventsv1.DeleteEventResponse, error) {
	obj, err := x.s.delete(ctx, x.r, req.GetNamespace(), req.GetName(), deleteOptions{
		GracePeriodSeconds: req.GracePeriodSeconds, PropagationPolicy: req.GetPropagationPolicy(),
		Preconditions: req.GetPreconditions(), DryRun: req.GetDryRun(),
	})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &eventsv1.DeleteEventResponse{Event: eventFrom(obj)}, nil
}
