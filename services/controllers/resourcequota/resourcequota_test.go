// This file tests which counts the quota controller takes from informer
// caches and which it takes again from consistent lists.
package resourcequota

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// fixedList is a ListerWatcher whose list is fixed and whose watch sends
// nothing until it is closed.
type fixedList[T proto.Message] struct{ items []T }

func (f fixedList[T]) List(context.Context) ([]T, string, error) { return f.items, "1", nil }
func (f fixedList[T]) Watch(ctx context.Context, _ string) (client.Watch[T], error) {
	return &idleWatch[T]{ctx: ctx, done: make(chan struct{})}, nil
}

type idleWatch[T proto.Message] struct {
	ctx  context.Context
	once sync.Once
	done chan struct{}
}

func (w *idleWatch[T]) Next() (client.Event[T], error) {
	select {
	case <-w.ctx.Done():
	case <-w.done:
	}
	return client.Event[T]{}, errors.New("watch closed")
}

func (w *idleWatch[T]) Close() { w.once.Do(func() { close(w.done) }) }

// statusRecorder is a QuotaClient that keeps the statuses written.
type statusRecorder struct {
	mu      sync.Mutex
	written []*corev1.ResourceQuotaStatus
}

func (r *statusRecorder) UpdateStatus(_ context.Context, q *corev1.ResourceQuota) (*corev1.ResourceQuota, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.written = append(r.written, q.GetStatus())
	return q, nil
}

// configMaps lists n config maps of ns.
func configMaps(n int) Lister {
	return func(_ context.Context, ns string) ([]proto.Message, error) {
		out := make([]proto.Message, n)
		for i := range out {
			out[i] = &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: string(rune('a' + i))}}
		}
		return out, nil
	}
}

// TestCountsTakenAgainFromLiveLists: a cache that has not seen an object
// yet (created just before the quota, or charged by admission just before
// a recount) would show a resource for the first time too low, or give
// usage back; the controller takes such counts again from a consistent
// list before writing them.
func TestCountsTakenAgainFromLiveLists(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name        string
		used        map[string]string // the quota's status.used before
		cache, live int               // config maps in the cache and in a live list
		noLive      bool
		want        string // status.used.configmaps written, "" for no write
	}{
		{name: "first count from a stale cache", cache: 0, live: 1, want: "1"},
		{name: "first count without a live lister", cache: 0, live: 1, noLive: true, want: "0"},
		{name: "give-back the live list does not confirm", used: map[string]string{"configmaps": "2"}, cache: 1, live: 2, want: ""},
		{name: "give-back the live list confirms", used: map[string]string{"configmaps": "2"}, cache: 1, live: 1, want: "1"},
		{name: "growth from the cache", used: map[string]string{"configmaps": "1"}, cache: 2, live: 0, want: "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			q := &corev1.ResourceQuota{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "q"},
				Spec: &corev1.ResourceQuotaSpec{Hard: map[string]string{"configmaps": "5"}}}
			if tc.used != nil {
				q.Status = &corev1.ResourceQuotaStatus{Hard: map[string]string{"configmaps": "5"}, Used: tc.used}
			}
			qInf := client.NewInformer[*corev1.ResourceQuota](fixedList[*corev1.ResourceQuota]{items: []*corev1.ResourceQuota{q}}, client.InformerOptions[*corev1.ResourceQuota]{})
			podInf := client.NewInformer[*corev1.Pod](fixedList[*corev1.Pod]{}, client.InformerOptions[*corev1.Pod]{})
			rec := &statusRecorder{}
			cfg := Config{Quotas: rec, QuotaInformer: qInf, PodInformer: podInf,
				Listers: map[schema.GroupResource]Lister{cm: configMaps(tc.cache)}}
			if !tc.noLive {
				cfg.Live = map[schema.GroupResource]Lister{cm: configMaps(tc.live)}
			}
			c := New(cfg)
			t.Cleanup(c.queue.ShutDown) // New starts the queue; only Run would stop it
			go func() { _ = qInf.Run(ctx) }()
			go func() { _ = podInf.Run(ctx) }()
			sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
			defer scancel()
			if !client.WaitForCacheSync(sctx, qInf, podInf) {
				t.Fatal("informers did not sync")
			}
			if _, err := c.Reconcile(ctx, "ns/q"); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && len(rec.written) != 0:
				t.Errorf("status written: %v, want none", rec.written)
			case tc.want != "" && len(rec.written) != 1:
				t.Errorf("statuses written: %v, want one", rec.written)
			case tc.want != "" && rec.written[0].GetUsed()["configmaps"] != tc.want:
				t.Errorf("used configmaps: got %q, want %q", rec.written[0].GetUsed()["configmaps"], tc.want)
			}
		})
	}
}
