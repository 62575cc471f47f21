package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// Event types, as Kubernetes names them.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// EventSink is what a Recorder writes to; *Client[*corev1.Event] implements it.
type EventSink interface {
	Create(ctx context.Context, obj *corev1.Event) (*corev1.Event, error)
	Update(ctx context.Context, obj *corev1.Event) (*corev1.Event, error)
}

var _ EventSink = (*Client[*corev1.Event])(nil)

// RecorderConfig configures a Recorder.
type RecorderConfig struct {
	Sink      EventSink
	Component string // source.component and reportingComponent, e.g. default-scheduler
	Host      string // source.host (the node name for node agents)
	// QueueSize bounds the events waiting to be written (default 1000);
	// beyond it new events are dropped, so recording never blocks.
	QueueSize int
	Logger    *slog.Logger
}

// Recorder records core/v1 Events about objects, as client-go's
// EventRecorder does: asynchronously and best-effort (an event that cannot
// be written is logged and dropped), and the same event (object, type,
// reason, message) repeated within ten minutes updates the first one's count
// and lastTimestamp instead of creating another object.
type Recorder struct {
	cfg   RecorderConfig
	log   *slog.Logger
	queue chan *corev1.Event
	mu    sync.Mutex
	seen  map[string]*corev1.Event // aggregation key → last written
}

// aggregateWindow is how long a repeated event updates the earlier one.
const aggregateWindow = 10 * time.Minute

// NewRecorder returns a Recorder; Run writes its events.
func NewRecorder(cfg RecorderConfig) *Recorder {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 1000
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{cfg: cfg, log: log.With("component", "events"), queue: make(chan *corev1.Event, cfg.QueueSize), seen: map[string]*corev1.Event{}}
}

// Eventf records an event about obj (any kplane object). It never blocks:
// Run writes it, in the background.
func (r *Recorder) Eventf(obj proto.Message, eventType, reason, messageFmt string, args ...any) {
	ev := r.newEvent(obj, "", eventType, reason, fmt.Sprintf(messageFmt, args...))
	select {
	case r.queue <- ev:
	default:
		r.log.Warn("event queue full; dropping event", "object", Key(obj), "reason", reason)
	}
}

// Record writes an event about obj now, in the caller's goroutine, for a
// caller that acts on one object at a time and wants its events written in
// order (the node agent's pod sync). fieldPath names a part of the object,
// e.g. spec.containers{web}; "" means the whole object. Like Eventf it is
// best effort: a failure is logged, not returned.
func (r *Recorder) Record(ctx context.Context, obj proto.Message, fieldPath, eventType, reason, messageFmt string, args ...any) {
	r.write(ctx, r.newEvent(obj, fieldPath, eventType, reason, fmt.Sprintf(messageFmt, args...)))
}

// Forget drops what the recorder remembers for aggregating the events of
// the object with this uid, once that object is gone.
func (r *Recorder) Forget(uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, ev := range r.seen {
		if ev.GetInvolvedObject().GetUid() == uid {
			delete(r.seen, k)
		}
	}
}

func (r *Recorder) newEvent(obj proto.Message, fieldPath, eventType, reason, message string) *corev1.Event {
	ref := &corev1.ObjectReference{Namespace: Namespace(obj), Name: Name(obj), Uid: UID(obj), ResourceVersion: ResourceVersion(obj), FieldPath: fieldPath}
	if av, kind, ok := kubejson.TypeMeta(obj.ProtoReflect().Descriptor()); ok {
		ref.ApiVersion, ref.Kind = av, kind
	}
	ns := ref.Namespace
	if ns == "" {
		ns = "default" // events about cluster-scoped objects live in default, as in Kubernetes
	}
	now := timestamppb.Now()
	return &corev1.Event{
		Metadata:           &metav1.ObjectMeta{Namespace: ns, Name: ref.Name + "." + randomSuffix()},
		InvolvedObject:     ref,
		Reason:             reason,
		Message:            message,
		Type:               eventType,
		Source:             &corev1.EventSource{Component: r.cfg.Component, Host: r.cfg.Host},
		ReportingComponent: r.cfg.Component,
		ReportingInstance:  r.cfg.Host,
		FirstTimestamp:     now,
		LastTimestamp:      now,
		Count:              1,
	}
}

// Run writes queued events until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-r.queue:
			r.write(ctx, ev)
		}
	}
}

func aggregationKey(ev *corev1.Event) string {
	o := ev.GetInvolvedObject()
	return fmt.Sprint(o.GetKind(), "\x00", o.GetNamespace(), "\x00", o.GetName(), "\x00", o.GetUid(), "\x00", o.GetFieldPath(), "\x00", ev.GetType(), "\x00", ev.GetReason(), "\x00", ev.GetMessage())
}

// write creates ev, or bumps the count of the same event written recently.
func (r *Recorder) write(ctx context.Context, ev *corev1.Event) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	key := aggregationKey(ev)
	r.mu.Lock()
	prev := r.seen[key]
	r.mu.Unlock()
	if prev != nil && ev.GetLastTimestamp().AsTime().Sub(prev.GetLastTimestamp().AsTime()) < aggregateWindow {
		next := proto.Clone(prev).(*corev1.Event)
		next.Count++
		next.LastTimestamp = ev.LastTimestamp
		if updated, err := r.cfg.Sink.Update(ctx, next); err == nil {
			r.remember(key, updated)
			return
		}
		// Stale or deleted: fall through and create a fresh event.
	}
	created, err := r.cfg.Sink.Create(ctx, ev)
	if err != nil {
		r.log.Warn("writing an event failed; dropping it", "err", err, "reason", ev.GetReason(), "object", ev.GetInvolvedObject().GetName())
		return
	}
	r.remember(key, created)
}

func (r *Recorder) remember(key string, ev *corev1.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Keep the table bounded: forget everything older than the window
	// when it grows large.
	if len(r.seen) > 4096 {
		for k, e := range r.seen {
			if time.Since(e.GetLastTimestamp().AsTime()) > aggregateWindow {
				delete(r.seen, k)
			}
		}
	}
	r.seen[key] = ev
}

func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
