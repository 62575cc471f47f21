// This file holds the chaos test's watch checker: a Deployment watch through
// the API service that resumes across kills, and the store's own history of
// the same keys to compare it with.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	"github.com/kplane/kplane/raftstore/robustness"
	"github.com/kplane/kplane/services/client"
)

// deploymentWatcher watches the namespace's Deployments through the API
// service the way a Kubernetes client does: each stream asks the server to
// end it after a few seconds (timeoutSeconds), and every stream, ended or
// broken, is resumed from the last resourceVersion seen. It records what
// each stream delivered in robustness's form, so robustness.CheckWatch can
// compare it with the store's own event stream: a resourceVersion is the
// store revision of the write.
type deploymentWatcher struct {
	deploys *client.Client[*appsv1.Deployment]
	ns      string

	mu        sync.Mutex
	responses []robustness.WatchResponse
	last      int64
	resumes   int
	fatal     error
}

func (w *deploymentWatcher) run(ctx context.Context, startRV int64) {
	w.last = startRV
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for ctx.Err() == nil {
		err := w.stream(ctx, int64(2+rng.IntN(5)))
		if ctx.Err() != nil {
			return
		}
		if apierrors.IsGone(err) {
			w.mu.Lock()
			w.fatal = fmt.Errorf("watch from resourceVersion %d expired: %w", w.last, err)
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		w.resumes++
		w.mu.Unlock()
		if !errors.Is(err, client.ErrWatchClosed) {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// stream runs one watch stream from the last resourceVersion.
func (w *deploymentWatcher) stream(ctx context.Context, timeout int64) error {
	w.mu.Lock()
	from := w.last
	w.mu.Unlock()
	s, err := w.deploys.Watch(ctx, w.ns, client.ListOptions{
		ResourceVersion: strconv.FormatInt(from, 10), AllowWatchBookmarks: true, TimeoutSeconds: timeout,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err != nil {
			return err
		}
		rv, err := strconv.ParseInt(ev.Object.GetMetadata().GetResourceVersion(), 10, 64)
		if err != nil {
			return fmt.Errorf("watch event %s without a numeric resourceVersion: %w", ev.Type, err)
		}
		w.mu.Lock()
		if ev.Type == client.Bookmark {
			w.responses = append(w.responses, robustness.WatchResponse{Progress: rv})
		} else {
			w.responses = append(w.responses, robustness.WatchResponse{Events: []robustness.Event{{
				Revision: rv, Key: w.ns + "/" + ev.Object.GetMetadata().GetName(), Delete: ev.Type == client.Deleted,
			}}})
			w.last = rv
		}
		w.mu.Unlock()
	}
}

func (w *deploymentWatcher) result() (responses []robustness.WatchResponse, last int64, resumes int, fatal error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]robustness.WatchResponse(nil), w.responses...), w.last, w.resumes, w.fatal
}

// storeStream reads the store's events for the namespace's Deployments
// from revision start through until, keyed as the watcher keys them.
func storeStream(ctx context.Context, cli *clientv3.Client, ns string, start, until int64) ([]robustness.Event, error) {
	if until < start {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	prefix := "/registry/deployments/" + ns + "/"
	var out []robustness.Event
	for resp := range cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(start)) {
		if err := resp.Err(); err != nil {
			return out, fmt.Errorf("store watch from %d: %w", start, err)
		}
		for _, ev := range resp.Events {
			out = append(out, robustness.Event{
				Revision: ev.Kv.ModRevision,
				Key:      ns + "/" + strings.TrimPrefix(string(ev.Kv.Key), prefix),
				Delete:   ev.Type == clientv3.EventTypeDelete,
			})
		}
		if n := len(out); n > 0 && out[n-1].Revision >= until {
			return out, nil
		}
	}
	return out, fmt.Errorf("store watch from %d ended before revision %d (%d events): %w", start, until, len(out), ctx.Err())
}
