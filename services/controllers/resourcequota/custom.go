// This file holds what the resource quota controller does about custom
// resources a quota counts (count/<plural>.<group>): it counts a
// namespace's objects through the API service's ResourceService, and
// follows each such resource with a watch so that a deleted object's
// count is given back at once, as Kubernetes' quota monitors do for every
// resource, not only at the next resync.
package resourcequota

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kplane/kplane/proto/apierrors"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

// CustomResources lists and watches the custom resources served
// (dynamicv1.ResourceServiceClient).
type CustomResources interface {
	Discover(ctx context.Context, in *dynamicv1.DiscoverRequest, opts ...grpc.CallOption) (*dynamicv1.DiscoverResponse, error)
	List(ctx context.Context, in *dynamicv1.ListRequest, opts ...grpc.CallOption) (*dynamicv1.ListResponse, error)
	Watch(ctx context.Context, in *dynamicv1.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[dynamicv1.WatchResponse], error)
}

// maxFollowBackoff caps the wait before a custom resource's watch is
// opened again.
const maxFollowBackoff = 30 * time.Second

// customCounter counts custom resources and follows those counted.
type customCounter struct {
	c       CustomResources
	log     *slog.Logger
	deleted func(ns string)

	mu       sync.Mutex
	base     context.Context // the controller's Run context; nil before Run
	followed map[schema.GroupResource]bool
	wg       sync.WaitGroup
}

// start lets follow open watches that last as long as ctx.
func (cc *customCounter) start(ctx context.Context) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.base = ctx
}

// wait returns once every watch has ended (after Run's context ends).
func (cc *customCounter) wait() { cc.wg.Wait() }

// served is the version gr is served at, if gr is a namespaced custom
// resource served now.
func (cc *customCounter) served(ctx context.Context, gr schema.GroupResource) (string, bool, error) {
	resp, err := cc.c.Discover(ctx, &dynamicv1.DiscoverRequest{})
	if err != nil {
		return "", false, fmt.Errorf("listing the custom resources: %w", err)
	}
	for _, sr := range resp.GetResources() {
		if sr.GetGroup() == gr.Group && sr.GetResource() == gr.Resource && sr.GetNamespaced() {
			return sr.GetVersion(), true, nil
		}
	}
	return "", false, nil
}

// list returns ns's objects of gr (as many placeholders: a count is all
// a quota takes of them), or none if gr is not a custom resource served
// now; and starts following gr.
func (cc *customCounter) list(ctx context.Context, gr schema.GroupResource, ns string) ([]runtime.Object, error) {
	version, ok, err := cc.served(ctx, gr)
	if err != nil || !ok {
		return nil, err
	}
	cc.follow(gr)
	resp, err := cc.c.List(ctx, &dynamicv1.ListRequest{Target: &dynamicv1.Target{
		Group: gr.Group, Version: version, Resource: gr.Resource, Namespace: ns}})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", gr, err)
	}
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(resp.GetList(), &l); err != nil {
		return nil, fmt.Errorf("list %s: %w", gr, err)
	}
	out := make([]runtime.Object, len(l.Items))
	for i := range l.Items {
		u := &unstructured.Unstructured{}
		u.SetNamespace(ns)
		out[i] = u
	}
	return out, nil
}

// follow watches gr (once) for deletions, each of which has the
// namespace's quotas recounted.
func (cc *customCounter) follow(gr schema.GroupResource) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.base == nil || cc.base.Err() != nil || cc.followed[gr] {
		return
	}
	if cc.followed == nil {
		cc.followed = map[schema.GroupResource]bool{}
	}
	cc.followed[gr] = true
	ctx := cc.base
	cc.wg.Add(1)
	go func() {
		defer cc.wg.Done()
		backoff := time.Second
		for ctx.Err() == nil {
			started := time.Now()
			err := cc.watch(ctx, gr)
			if ctx.Err() != nil {
				return
			}
			if time.Since(started) > maxFollowBackoff {
				backoff = time.Second
			}
			cc.log.DebugContext(ctx, "a counted custom resource's watch ended; opening it again", "resource", gr.String(), "err", err, "in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, maxFollowBackoff)
		}
	}()
}

// watch follows gr until the stream ends, telling deleted about every
// namespace an object was deleted from.
func (cc *customCounter) watch(ctx context.Context, gr schema.GroupResource) error {
	version, ok, err := cc.served(ctx, gr)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s is not served", gr)
	}
	st, err := cc.c.Watch(ctx, &dynamicv1.WatchRequest{Target: &dynamicv1.Target{Group: gr.Group, Version: version, Resource: gr.Resource}})
	if err != nil {
		return err
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			return err
		}
		if ev.GetType() != "DELETED" {
			continue
		}
		var o struct {
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if json.Unmarshal(ev.GetObject(), &o) == nil && o.Metadata.Namespace != "" {
			cc.deleted(o.Metadata.Namespace)
		}
	}
}
