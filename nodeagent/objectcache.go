// This file holds the TTL cache of the "Cache" change-detection strategy
// (objectwatch.go holds the default, "Watch"): each ConfigMap or Secret is
// fetched at most once per TTL for every pod of the node, as the kubelet's
// TTL-cache strategy does, so refreshing the volumes of many pods that
// share one ConfigMap (every pod's kube-root-ca.crt) costs one get per TTL
// rather than one per pod.

package nodeagent

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// maxCachedObjects bounds the cache; past it, expired entries are dropped.
const maxCachedObjects = 4096

// ttlObjects caches the answers of an envObjects for ttl. Errors (a
// missing object included) are not cached: a volume waiting for its
// ConfigMap sees it at the next try.
type ttlObjects struct {
	src envObjects
	ttl time.Duration

	mu      sync.Mutex
	entries map[string]cachedObject
}

type cachedObject struct {
	obj proto.Message
	at  time.Time
}

var _ envObjects = (*ttlObjects)(nil)

func newTTLObjects(src envObjects, ttl time.Duration) *ttlObjects {
	return &ttlObjects{src: src, ttl: ttl, entries: map[string]cachedObject{}}
}

// get returns the cached object of key, or fetches it.
func (c *ttlObjects) get(ctx context.Context, key string, fetch func(context.Context) (proto.Message, error)) (proto.Message, error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.ttl {
		return e.obj, nil
	}
	obj, err := fetch(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxCachedObjects {
		for k, e := range c.entries {
			if now.Sub(e.at) >= c.ttl {
				delete(c.entries, k)
			}
		}
	}
	c.entries[key] = cachedObject{obj: obj, at: now}
	return obj, nil
}

// ConfigMap implements envObjects; callers must not change the result.
func (c *ttlObjects) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	obj, err := c.get(ctx, "configmaps/"+namespace+"/"+name, func(ctx context.Context) (proto.Message, error) {
		return c.src.ConfigMap(ctx, namespace, name)
	})
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.ConfigMap), nil
}

// Secret implements envObjects; callers must not change the result.
func (c *ttlObjects) Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	obj, err := c.get(ctx, "secrets/"+namespace+"/"+name, func(ctx context.Context) (proto.Message, error) {
		return c.src.Secret(ctx, namespace, name)
	})
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Secret), nil
}
