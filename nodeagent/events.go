package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// recorder writes events as the kubelet does (source component "kubelet",
// host the node). A repeat of an event (same object, field path, type,
// reason and message) updates the first one's count and lastTimestamp
// instead of creating another.
type recorder struct {
	events *client.Client[*corev1.Event]
	node   string
	log    *slog.Logger

	mu   sync.Mutex
	seen map[string]*corev1.Event // by dedup key
}

func newRecorder(c *client.Client[*corev1.Event], node string, log *slog.Logger) *recorder {
	return &recorder{events: c, node: node, log: log, seen: map[string]*corev1.Event{}}
}

// eventf records an event about pod (fieldPath names a container, "" the
// pod). Failures are logged, not returned: events are best effort.
func (r *recorder) eventf(ctx context.Context, pod *corev1.Pod, fieldPath, typ, reason, format string, args ...any) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	msg := fmt.Sprintf(format, args...)
	m := pod.GetMetadata()
	key := m.GetUid() + "\x00" + fieldPath + "\x00" + typ + "\x00" + reason + "\x00" + msg
	now := timestamppb.New(time.Now().Truncate(time.Second))

	// The lock is not held across API calls: a pod's events come from the
	// one worker syncing it, so one key is never written concurrently.
	r.mu.Lock()
	old, ok := r.seen[key]
	r.mu.Unlock()
	if ok {
		ev := proto.Clone(old).(*corev1.Event)
		ev.Count++
		ev.LastTimestamp = now
		got, err := r.events.Update(ctx, ev)
		if err == nil {
			r.remember(key, got)
			return
		}
		r.log.Debug("updating an event failed; creating a new one", "reason", reason, "err", err)
	}
	ev := &corev1.Event{
		Metadata: &metav1.ObjectMeta{
			Namespace: m.GetNamespace(),
			Name:      fmt.Sprintf("%s.%x", m.GetName(), time.Now().UnixNano()),
		},
		InvolvedObject: &corev1.ObjectReference{
			Kind: "Pod", ApiVersion: "v1", Namespace: m.GetNamespace(), Name: m.GetName(),
			Uid: m.GetUid(), ResourceVersion: m.GetResourceVersion(), FieldPath: fieldPath,
		},
		Reason:             reason,
		Message:            msg,
		Type:               typ,
		Source:             &corev1.EventSource{Component: "kubelet", Host: r.node},
		FirstTimestamp:     now,
		LastTimestamp:      now,
		Count:              1,
		ReportingComponent: "kubelet",
		ReportingInstance:  r.node,
	}
	got, err := r.events.Create(ctx, ev)
	if err != nil {
		r.log.Warn("recording an event failed", "pod", m.GetNamespace()+"/"+m.GetName(), "reason", reason, "err", err)
		return
	}
	r.remember(key, got)
}

func (r *recorder) remember(key string, ev *corev1.Event) {
	r.mu.Lock()
	r.seen[key] = ev
	r.mu.Unlock()
}

// forget drops the dedup entries of a pod that is gone.
func (r *recorder) forget(uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.seen {
		if len(k) > len(uid) && k[:len(uid)] == uid && k[len(uid)] == 0 {
			delete(r.seen, k)
		}
	}
}
