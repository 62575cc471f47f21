// This file holds the event Recorder: core/v1 Events about objects written
// asynchronously and best-effort, with client-go's counting of repeats and
// aggregation of similar events.

package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
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
	// QueueSize bounds the events waiting to be written (default 10000);
	// beyond it new events are dropped (and counted), so recording never
	// blocks.
	QueueSize int
	// Writers is how many events are written concurrently (default 16).
	// Events about one object always go to the same writer, in order.
	Writers int
	Logger  *slog.Logger
}

// RecorderStats counts what a Recorder did with the events given to it.
type RecorderStats struct {
	Recorded int64 // given to Eventf or FieldEventf
	Written  int64 // now in the store, as an event of their own or as a count
	Dropped  int64 // not written: the queue was full, or Run stopped first
	Failed   int64 // the write failed
	Pending  int64 // queued or being written
}

// Recorder records core/v1 Events about objects, as client-go's
// EventRecorder does: asynchronously and best-effort (an event that cannot
// be written is logged and dropped), and the same event (object, type,
// reason, message) repeated within ten minutes updates the first one's count
// and lastTimestamp instead of creating another object. As client-go's
// EventAggregator does, once an object has had more than ten events with the
// same type and reason but different messages within ten minutes, the
// further ones are combined into one event whose message reads
// "(combined from similar events): <latest message>". Queued events that
// would update the same event are written as one update.
type Recorder struct {
	cfg    RecorderConfig
	log    *slog.Logger
	queues []chan *corev1.Event

	recorded, written, dropped, failed, pending atomic.Int64

	// mu guards seen and similar: LRU caches bounded as client-go bounds
	// its event correlator's (4096 entries), so that neither grows with the
	// number of objects nor costs more than O(1) per event.
	mu      sync.Mutex
	seen    *simplelru.LRU[string, *corev1.Event] // aggregation key → last written
	similar *simplelru.LRU[string, *similarEvents]
}

// similarEvents is what the recorder remembers about an object's events of
// one type and reason: the distinct messages seen since first.
type similarEvents struct {
	first    time.Time
	messages map[string]struct{}
}

const (
	// aggregateWindow is how long a repeated event updates the earlier one.
	aggregateWindow = 10 * time.Minute
	// maxSimilar is how many different messages an object's events of one
	// type and reason may carry before they are combined (client-go's
	// defaultAggregateMaxEvents).
	maxSimilar = 10
	// combinedPrefix starts the message of a combined event, as in client-go.
	combinedPrefix = "(combined from similar events): "
	// maxBatch bounds the events a writer takes off its queue at once.
	maxBatch = 256
	// maxRemembered bounds the aggregation caches (client-go's
	// maxLruCacheEntries).
	maxRemembered = 4096
)

// NewRecorder returns a Recorder; Run writes its events.
func NewRecorder(cfg RecorderConfig) *Recorder {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 10000
	}
	if cfg.Writers <= 0 {
		cfg.Writers = 16
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	seen, _ := simplelru.NewLRU[string, *corev1.Event](maxRemembered, nil)
	similar, _ := simplelru.NewLRU[string, *similarEvents](maxRemembered, nil)
	r := &Recorder{cfg: cfg, log: log.With("component", "events"), seen: seen, similar: similar}
	per := max(cfg.QueueSize/cfg.Writers, 1)
	for range cfg.Writers {
		r.queues = append(r.queues, make(chan *corev1.Event, per))
	}
	return r
}

// Eventf records an event about obj (any kplane object). It never blocks:
// Run writes it, in the background.
func (r *Recorder) Eventf(obj proto.Message, eventType, reason, messageFmt string, args ...any) {
	r.FieldEventf(obj, "", eventType, reason, messageFmt, args...)
}

// FieldEventf is Eventf about a part of obj named by fieldPath, e.g.
// spec.containers{web} ("" is the whole object). Events about one object
// are written in the order they were recorded (one writer per object).
func (r *Recorder) FieldEventf(obj proto.Message, fieldPath, eventType, reason, messageFmt string, args ...any) {
	ev := r.newEvent(obj, fieldPath, eventType, reason, fmt.Sprintf(messageFmt, args...))
	r.recorded.Add(1)
	r.pending.Add(1)
	select {
	case r.queues[r.shard(ev)] <- ev:
	default:
		r.pending.Add(-1)
		if r.dropped.Add(1)%1000 == 1 {
			r.log.Warn("event queue full; dropping events", "object", Key(obj), "reason", reason, "droppedSoFar", r.dropped.Load())
		}
	}
}

// Stats returns the recorder's counters.
func (r *Recorder) Stats() RecorderStats {
	return RecorderStats{Recorded: r.recorded.Load(), Written: r.written.Load(), Dropped: r.dropped.Load(),
		Failed: r.failed.Load(), Pending: r.pending.Load()}
}

// Flush waits until every event recorded so far has been written (or
// dropped), or ctx ends. Run must be running for queued events to drain.
func (r *Recorder) Flush(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for r.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("flushing events (%d pending): %w", r.pending.Load(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Forget drops what the recorder remembers for aggregating the events of
// the object with this uid, once that object is gone.
func (r *Recorder) Forget(uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.seen.Keys() {
		if ev, ok := r.seen.Peek(k); ok && ev.GetInvolvedObject().GetUid() == uid {
			r.seen.Remove(k)
		}
	}
	if uid == "" {
		return
	}
	for _, k := range r.similar.Keys() {
		if strings.Contains(k, "\x00"+uid+"\x00") {
			r.similar.Remove(k)
		}
	}
}

// shard picks the writer for ev: always the same one for one object.
func (r *Recorder) shard(ev *corev1.Event) int {
	o := ev.GetInvolvedObject()
	h := fnv.New32a()
	_, _ = io.WriteString(h, o.GetUid())
	_, _ = io.WriteString(h, o.GetNamespace())
	_, _ = io.WriteString(h, o.GetName())
	return int(h.Sum32() % uint32(len(r.queues)))
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
		Metadata:            &metav1.ObjectMeta{Namespace: ns, Name: ref.Name + "." + randomSuffix()},
		InvolvedObject:      ref,
		Reason:              reason,
		Message:             message,
		Type:                eventType,
		Source:              &corev1.EventSource{Component: r.cfg.Component, Host: r.cfg.Host},
		ReportingController: r.cfg.Component,
		ReportingInstance:   r.cfg.Host,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
}

// Run writes queued events until ctx ends, with cfg.Writers writers.
// Events still queued when ctx ends are dropped (counted in Stats); call
// Flush first to wait for them.
func (r *Recorder) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, q := range r.queues {
		wg.Go(func() { r.runWriter(ctx, q) })
	}
	wg.Wait()
	left := int64(0)
	for _, q := range r.queues {
		for {
			select {
			case <-q:
				left++
				continue
			default:
			}
			break
		}
	}
	if left > 0 {
		r.pending.Add(-left)
		r.dropped.Add(left)
		r.log.Info("stopping with events unwritten", "dropped", left)
	}
}

// runWriter writes the events of one queue: whatever has accumulated is
// taken at once, and events that would update the same stored event are
// written as one update (count += n).
func (r *Recorder) runWriter(ctx context.Context, q chan *corev1.Event) {
	batch := make([]*corev1.Event, 0, maxBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-q:
			batch = append(batch[:0], ev)
		}
	more:
		for len(batch) < maxBatch {
			select {
			case ev := <-q:
				batch = append(batch, ev)
			default:
				break more
			}
		}
		type group struct {
			ev *corev1.Event // the latest
			n  int32
		}
		var order []string
		groups := map[string]*group{}
		for _, ev := range batch {
			ev = r.aggregate(ev)
			key := aggregationKey(ev)
			if g := groups[key]; g != nil {
				g.ev, g.n = ev, g.n+1
				continue
			}
			groups[key] = &group{ev: ev, n: 1}
			order = append(order, key)
		}
		for _, key := range order {
			g := groups[key]
			if ctx.Err() != nil {
				r.dropped.Add(int64(g.n))
			} else {
				r.write(ctx, g.ev, g.n)
			}
			r.pending.Add(-int64(g.n))
		}
	}
}

// aggregate returns ev, or, when its object has had more than maxSimilar
// events of this type and reason with different messages within the
// window, the combined event that stands for them (client-go's
// EventAggregator).
func (r *Recorder) aggregate(ev *corev1.Event) *corev1.Event {
	o := ev.GetInvolvedObject()
	key := fmt.Sprint(o.GetKind(), "\x00", o.GetNamespace(), "\x00", o.GetName(), "\x00", o.GetUid(), "\x00", o.GetFieldPath(), "\x00", ev.GetType(), "\x00", ev.GetReason())
	now := ev.GetLastTimestamp().AsTime()
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.similar.Get(key)
	if !ok || now.Sub(s.first) > aggregateWindow {
		s = &similarEvents{first: now, messages: map[string]struct{}{}}
		r.similar.Add(key, s)
	}
	if _, ok := s.messages[ev.GetMessage()]; ok || len(s.messages) < maxSimilar {
		s.messages[ev.GetMessage()] = struct{}{}
		return ev
	}
	ev.Message = combinedPrefix + ev.GetMessage()
	return ev
}

func aggregationKey(ev *corev1.Event) string {
	o := ev.GetInvolvedObject()
	msg := ev.GetMessage()
	if strings.HasPrefix(msg, combinedPrefix) {
		msg = combinedPrefix // one combined event per object, type and reason
	}
	return fmt.Sprint(o.GetKind(), "\x00", o.GetNamespace(), "\x00", o.GetName(), "\x00", o.GetUid(), "\x00", o.GetFieldPath(), "\x00", ev.GetType(), "\x00", ev.GetReason(), "\x00", msg)
}

// write creates ev with count n, or adds n to the count of the same event
// written recently.
func (r *Recorder) write(ctx context.Context, ev *corev1.Event, n int32) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	key := aggregationKey(ev)
	r.mu.Lock()
	prev, _ := r.seen.Get(key)
	r.mu.Unlock()
	if prev != nil && ev.GetLastTimestamp().AsTime().Sub(prev.GetLastTimestamp().AsTime()) < aggregateWindow {
		next := proto.Clone(prev).(*corev1.Event)
		next.Count += n
		next.LastTimestamp = ev.LastTimestamp
		next.Message = ev.Message
		if updated, err := r.cfg.Sink.Update(ctx, next); err == nil {
			r.remember(key, updated)
			r.written.Add(int64(n))
			return
		}
		// Stale or deleted: fall through and create a fresh event.
	}
	ev.Count = n
	created, err := r.cfg.Sink.Create(ctx, ev)
	if err != nil {
		r.failed.Add(int64(n))
		if ctx.Err() == nil || context.Cause(ctx) != context.Canceled {
			r.log.Warn("writing an event failed; dropping it", "err", err, "reason", ev.GetReason(), "object", ev.GetInvolvedObject().GetName())
		}
		return
	}
	r.remember(key, created)
	r.written.Add(int64(n))
}

func (r *Recorder) remember(key string, ev *corev1.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen.Add(key, ev)
}

func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
