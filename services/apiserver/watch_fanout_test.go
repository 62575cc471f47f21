// This file holds the tests of watchers sharing one encoding of the objects
// they start with, and the benchmark of many watchers starting on a large
// object.

package apiserver

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// TestInitialEventsShared: watchers that start while an object is current
// get the same initial ADDED event (so it is encoded once for all of them);
// once the object changes, new watchers get one for the new object.
func TestInitialEventsShared(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	created, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("big", nil)})
	if err != nil {
		t.Fatal(err)
	}
	ch := e.srv.cachers["configmaps"]
	if err := ch.waitFor(ctx, rvOf(created.GetConfigMap())); err != nil {
		t.Fatal(err)
	}
	initialOf := func() *watchEvent {
		t.Helper()
		w, err := ch.watch(context.Background(), 0, watchFilter{}, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ch.stop(w) })
		for _, ev := range w.initial {
			if meta(ev.obj).GetName() == "big" {
				return ev
			}
		}
		t.Fatal("no initial event for the configmap")
		return nil
	}
	a, b := initialOf(), initialOf()
	if a != b {
		t.Errorf("two watchers got two initial events for one object revision")
	}
	upd := created.GetConfigMap()
	upd.Data = map[string]string{"k": "v"}
	u, err := e.cms.UpdateConfigMap(ctx, &corev1.UpdateConfigMapRequest{Namespace: "default", Name: "big", ConfigMap: upd})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.waitFor(ctx, rvOf(u.GetConfigMap())); err != nil {
		t.Fatal(err)
	}
	c := initialOf()
	if c == a || c.obj.(*corev1.ConfigMap).GetData()["k"] != "v" {
		t.Errorf("after an update a new watcher got the old object's event")
	}
}

// BenchmarkWatchStartLargeObject: watchers starting together (resourceVersion
// 0) on a namespace holding one 1 MiB ConfigMap, each receiving it; reports
// the bytes the process allocated per watcher.
func BenchmarkWatchStartLargeObject(b *testing.B) {
	const watchers = 200
	e := newEnv(b, nil)
	ctx := admin(b)
	big := cm("big", nil)
	big.Data = map[string]string{"blob": strings.Repeat("x", 1<<20)}
	if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: big}); err != nil {
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make(chan error, watchers)
		for range watchers {
			wg.Go(func() {
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				st, err := e.cms.WatchConfigMaps(wctx, &corev1.WatchConfigMapsRequest{Namespace: "default", ResourceVersion: "0"})
				if err == nil {
					_, err = st.Recv()
				}
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N*watchers)/(1<<20), "MiB-alloc/watcher")
}
