// This file holds the tests of the rendered-object cache.

package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

func bigConfigMap(uid, rv string, size int) *corev1.ConfigMap {
	return &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: "big", Namespace: "default", Uid: uid, ResourceVersion: rv},
		Data: map[string]string{"blob": strings.Repeat("x", size)}}
}

func TestRenderCache(t *testing.T) {
	c := newRenderCache(3 * (renderCacheMinSize + 1024))
	render := func(cm *corev1.ConfigMap) []byte {
		t.Helper()
		b, err := c.render(cm)
		if err != nil {
			t.Fatal(err)
		}
		want, err := kubejson.Marshal(cm)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("rendered %.80s..., want %.80s...", b, want)
		}
		return b
	}
	a1 := render(bigConfigMap("u1", "10", renderCacheMinSize))
	a2 := render(bigConfigMap("u1", "10", renderCacheMinSize))
	if &a1[0] != &a2[0] {
		t.Errorf("one version of one object rendered twice")
	}
	if b := render(bigConfigMap("u1", "11", renderCacheMinSize)); &b[0] == &a1[0] {
		t.Errorf("a new resourceVersion got the old rendering")
	}
	if len(c.items) != 2 {
		t.Errorf("%d entries, want 2", len(c.items))
	}
	// Small objects, and objects without a uid or resourceVersion, are not kept.
	render(bigConfigMap("u2", "12", 100))
	render(bigConfigMap("", "13", renderCacheMinSize))
	render(bigConfigMap("u3", "", renderCacheMinSize))
	if len(c.items) != 2 {
		t.Errorf("%d entries after small and unnamed objects, want 2", len(c.items))
	}
	// The cache stays within its bytes, dropping the least recently used.
	render(bigConfigMap("u1", "10", renderCacheMinSize)) // u1@10 used again
	render(bigConfigMap("u4", "14", renderCacheMinSize))
	render(bigConfigMap("u5", "15", renderCacheMinSize))
	if c.size > c.max {
		t.Errorf("size %d over the limit %d", c.size, c.max)
	}
	if _, ok := c.items[renderKey{msg: "kplane.core.v1.ConfigMap", uid: "u1", rv: "11"}]; ok {
		t.Errorf("the least recently used entry was kept")
	}
	if _, ok := c.items[renderKey{msg: "kplane.core.v1.ConfigMap", uid: "u1", rv: "10"}]; !ok {
		t.Errorf("a recently used entry was dropped")
	}
}

// TestWatchEventLine: the event line built without encoding/json is what
// encoding/json writes.
func TestWatchEventLine(t *testing.T) {
	km := &kubeMarshaler{}
	obj := []byte(`{"kind":"Pod","metadata":{"name":"a\u003cb"}}`)
	got, err := km.Marshal(&watchEvent{Type: "ADDED", Object: json.RawMessage(obj)})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(watchEvent{Type: "ADDED", Object: json.RawMessage(obj)})
	if !bytes.Equal(got, want) {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
