// This file holds the cache of rendered watch objects: an event that reaches
// many watchers through the gateway arrives on each watcher's stream as its
// own decoded copy, and rendering a large object to Kubernetes JSON once per
// watcher multiplied its size by the watchers (2,000 watchers on a 1 MiB
// ConfigMap: gigabytes). Objects are keyed by type, uid and resourceVersion,
// which name one version of one object, so every watcher writes the same
// bytes.

package gateway

import (
	clist "container/list"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// Objects smaller than renderCacheMinSize are rendered each time (cheap,
// and rarely sent to many watchers at once); the cache holds at most
// renderCacheMaxBytes of rendered objects, the least recently used going
// first.
const (
	renderCacheMinSize  = 16 << 10
	renderCacheMaxBytes = 64 << 20
)

type renderKey struct {
	msg     protoreflect.FullName
	uid, rv string
}

type renderEntry struct {
	key renderKey
	b   []byte
}

// renderCache is safe for concurrent use.
type renderCache struct {
	mu    sync.Mutex
	max   int
	size  int
	order *clist.List // of *renderEntry, most recently used first
	items map[renderKey]*clist.Element
}

func newRenderCache(maxBytes int) *renderCache {
	return &renderCache{max: maxBytes, order: clist.New(), items: map[renderKey]*clist.Element{}}
}

// render returns obj as Kubernetes JSON, from the cache when this version of
// this object was rendered recently. The bytes are shared: callers must not
// change them.
func (c *renderCache) render(obj proto.Message) ([]byte, error) {
	m, ok := obj.(interface{ GetMetadata() *metav1.ObjectMeta })
	if !ok || m.GetMetadata().GetUid() == "" || m.GetMetadata().GetResourceVersion() == "" || proto.Size(obj) < renderCacheMinSize {
		return kubejson.Marshal(obj)
	}
	k := renderKey{msg: obj.ProtoReflect().Descriptor().FullName(), uid: m.GetMetadata().GetUid(), rv: m.GetMetadata().GetResourceVersion()}
	c.mu.Lock()
	if el, ok := c.items[k]; ok {
		c.order.MoveToFront(el)
		b := el.Value.(*renderEntry).b
		c.mu.Unlock()
		return b, nil
	}
	c.mu.Unlock()
	// Watchers that miss together each render it once; the first to finish
	// is kept.
	b, err := kubejson.Marshal(obj)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		return el.Value.(*renderEntry).b, nil
	}
	if len(b) > c.max {
		return b, nil
	}
	c.items[k] = c.order.PushFront(&renderEntry{key: k, b: b})
	c.size += len(b)
	for c.size > c.max {
		last := c.order.Back()
		e := last.Value.(*renderEntry)
		c.order.Remove(last)
		delete(c.items, e.key)
		c.size -= len(e.b)
	}
	return b, nil
}
