// This file holds the tests and benchmarks of the watch cache: relisting
// after compaction, continue tokens, shared encodings and field sets, the
// watcher queue, and indexed dispatch.

package apiserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/internal/storetest"
)

// TestCacheRelistsAfterCompaction: when the store has compacted past the
// cache's revision, the cache re-lists and resumes; it never goes back in
// time, its old watchers are closed and a resume from before the re-list is
// Gone.
func TestCacheRelistsAfterCompaction(t *testing.T) {
	eps := storetest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := resourcesByName()["configmaps"]
	st := &storage{cli: cli, prefix: "/registry/"}
	c := newCacher(r, st, discardLogger(), 100, 100, time.Hour)
	if err := c.relist(ctx); err != nil {
		t.Fatal(err)
	}
	before := c.rev
	w, err := c.watch(ctx, before, watchFilter{}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Writes the cache does not see yet, then a compaction past them.
	var last int64
	for i := range 5 {
		obj := &corev1.ConfigMap{Metadata: om("default", fmt.Sprintf("c%d", i))}
		prepareForCreate(r, obj)
		if last, err = st.create(ctx, r, "default", fmt.Sprintf("c%d", i), obj); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Compact(ctx, last); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { c.run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	if err := c.waitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	items, rev := c.snapshot(nil)
	if len(items) != 5 || rev < last {
		t.Fatalf("after re-list: %d items at %d, want 5 at >= %d", len(items), rev, last)
	}
	// The old watcher was closed (its client resumes) ...
	finished := make(chan bool, 1)
	go func() { _, ok := w.next(); finished <- !ok }()
	select {
	case f := <-finished:
		if !f {
			t.Fatal("old watcher got an event instead of being closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("old watcher not closed after the re-list")
	}
	// ... and resuming from before the re-list is Gone.
	if _, err := c.watch(ctx, before, watchFilter{}, false, nil); !apierrors.IsGone(err) {
		t.Fatalf("resume from %d: got %v, want Gone", before, err)
	}
	// New changes flow again.
	obj := &corev1.ConfigMap{Metadata: om("default", "after")}
	prepareForCreate(r, obj)
	rev2, err := st.create(ctx, r, "default", "after", obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.waitFor(ctx, rev2); err != nil {
		t.Fatal(err)
	}
	// A re-list that would go back in time is refused.
	c.mu.Lock()
	c.rev += 1000
	c.mu.Unlock()
	if err := c.relist(ctx); err == nil {
		t.Fatal("relist older than the cache: got nil, want an error")
	}
}

func TestContinueTokenExpiresWithCompaction(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	for i := range 3 {
		if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm(fmt.Sprintf("p%d", i), nil)}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if l.GetList().GetMetadata().GetContinue() == "" {
		t.Fatal("no continue token")
	}
	c, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("later", nil)})
	if err != nil {
		t.Fatal(err)
	}
	// (Not ctx: its outgoing "authorization" metadata is for the API service.)
	if _, err := e.srv.store.cli.Compact(context.Background(), rvInt(t, c.GetConfigMap().GetMetadata().GetResourceVersion())); err != nil {
		t.Fatal(err)
	}
	_, err = e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default", Limit: 1, Continue: l.GetList().GetMetadata().GetContinue()})
	if !apierrors.IsGone(err) || apierrors.ReasonOf(err) != apierrors.ReasonExpired {
		t.Fatalf("expired continue: got %v, want Expired (410)", err)
	}
	// An object over the store's limit is RequestEntityTooLarge.
	big := cm("big", nil)
	big.BinaryData = map[string][]byte{"b": make([]byte, 2<<20)}
	_, err = e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: big})
	wantReason(t, err, apierrors.ReasonRequestEntityTooLarge)
}

// TestTransformShares: what watchers with selectors see of an event is one
// shared event per outcome (so it is encoded once for all of them), with
// the type Kubernetes gives it.
func TestTransformShares(t *testing.T) {
	pod := func(app string) *corev1.Pod {
		return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "p", Labels: map[string]string{"app": app}}}
	}
	web := func(obj proto.Message, _ *objectFields) bool { return meta(obj).GetLabels()["app"] == "web" }
	webToo := func(obj proto.Message, _ *objectFields) bool { return meta(obj).GetLabels()["app"] == "web" }
	for _, tc := range []struct {
		name     string
		e        *watchEvent
		wantType string // "" for nothing
		wantSame bool   // the event itself
	}{
		{name: "create that matches", e: &watchEvent{typ: eventAdded, obj: pod("web")}, wantType: eventAdded, wantSame: true},
		{name: "create that does not match", e: &watchEvent{typ: eventAdded, obj: pod("db")}},
		{name: "update that keeps matching", e: &watchEvent{typ: eventModified, obj: pod("web"), prev: pod("web")}, wantType: eventModified, wantSame: true},
		{name: "update that starts matching", e: &watchEvent{typ: eventModified, obj: pod("web"), prev: pod("db")}, wantType: eventAdded},
		{name: "update that stops matching", e: &watchEvent{typ: eventModified, obj: pod("db"), prev: pod("web")}, wantType: eventDeleted},
		{name: "delete of a match", e: &watchEvent{typ: eventDeleted, obj: pod("web"), prev: pod("web")}, wantType: eventDeleted, wantSame: true},
		{name: "delete of another", e: &watchEvent{typ: eventDeleted, obj: pod("db"), prev: pod("db")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := transform(tc.e, web), transform(tc.e, webToo)
			if tc.wantType == "" {
				if a != nil || b != nil {
					t.Fatalf("got %v, %v; want nothing", a, b)
				}
				return
			}
			if a == nil || a.typ != tc.wantType {
				t.Fatalf("got %v, want a %s event", a, tc.wantType)
			}
			if a != b {
				t.Errorf("two watchers got two events; want one shared")
			}
			if (a == tc.e) != tc.wantSame {
				t.Errorf("got the event itself: %v, want %v", a == tc.e, tc.wantSame)
			}
		})
	}
}

func TestSelectorKeyIsSharedByEqualSelectorsOnly(t *testing.T) {
	r := resourcesByName()["pods"]
	key := func(ns, l, f string) string {
		t.Helper()
		s, err := parseSelector(r, ns, l, f)
		if err != nil {
			t.Fatal(err)
		}
		return s.key()
	}
	if a, b := key("ns", "app=web,tier in (a,b)", ""), key("ns", "tier in (b,a), app=web", ""); a != b {
		t.Errorf("equal label selectors written differently: keys %q and %q, want one", a, b)
	}
	base := key("ns", "app=web", "")
	for _, other := range []string{key("", "app=web", ""), key("ns2", "app=web", ""), key("ns", "app!=web", ""),
		key("ns", "app=web", "spec.nodeName=n1"), key("ns", "", "")} {
		if other == base {
			t.Errorf("different selectors share the key %q", base)
		}
	}
}

func TestDecodeMetaAgreesWithFullDecode(t *testing.T) {
	r := resourcesByName()["pods"]
	pod := &corev1.Pod{
		Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "p", Labels: map[string]string{"app": "web", "tier": "a"}},
		Spec:     &corev1.PodSpec{NodeName: "n1", Containers: []*corev1.Container{{Name: "c", Image: "i"}}},
	}
	b, err := proto.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	num := r.New().ProtoReflect().Descriptor().Fields().ByName("metadata").Number()
	m, ok := decodeMeta(b, num)
	if !ok || !proto.Equal(m, pod.GetMetadata()) {
		t.Fatalf("decodeMeta = %v, %v; want %v", m, ok, pod.GetMetadata())
	}
	if _, ok := decodeMeta([]byte{0xff}, num); ok {
		t.Error("decodeMeta accepted a malformed object")
	}
	for _, tc := range []struct{ ns, labels string }{{"ns", "app=web"}, {"ns", "app=db"}, {"other", "app=web"}, {"", "tier in (a,b),app"}, {"", "!app"}} {
		sel, err := parseSelector(r, tc.ns, tc.labels, "")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sel.matchesMeta(m), sel.matches(pod); got != want {
			t.Errorf("namespace %q, labels %q: metadata alone says %v, the whole object %v", tc.ns, tc.labels, got, want)
		}
	}
}

// TestFieldSelectorsShareOneFieldSet: watchers selecting pods by
// spec.nodeName (one per node agent) see an event as if each built the
// pod's field set itself, and the set is built once per object of the event.
func TestFieldSelectorsShareOneFieldSet(t *testing.T) {
	r := &resourceInfo{New: func() proto.Message { return &corev1.Pod{} }}
	node := func(n string) watchFilter {
		sel, err := parseSelector(r, "", "", "spec.nodeName="+n)
		if err != nil {
			t.Fatal(err)
		}
		return watchFilter{key: sel.key(), match: sel.matchesWith}
	}
	pod := func(n string) *corev1.Pod {
		return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: &corev1.PodSpec{NodeName: n}}
	}
	bind := &watchEvent{typ: eventModified, obj: pod("a"), prev: pod("")}
	if got := transform(bind, node("a").match); got == nil || got.typ != eventAdded {
		t.Fatalf("node a got %v, want ADDED", got)
	}
	set := bind.objFields.set
	if set == nil || set["spec.nodeName"] != "a" || bind.prevFields.set == nil {
		t.Fatalf("field sets not kept on the event: %v, %v", set, bind.prevFields.set)
	}
	if got := transform(bind, node("b").match); got != nil {
		t.Fatalf("node b got %v, want nothing", got)
	}
	set["spec.nodeName"] = "b" // the kept set is what a second selector reads
	if got := transform(bind, node("b").match); got == nil {
		t.Fatal("node b did not read the kept field set")
	}
	move := &watchEvent{typ: eventModified, obj: pod("b"), prev: pod("a")}
	if got := transform(move, node("a").match); got == nil || got.typ != eventDeleted {
		t.Fatalf("node a got %v, want DELETED", got)
	}
	if got := transform(move, node("b").match); got == nil || got.typ != eventAdded {
		t.Fatalf("node b got %v, want ADDED", got)
	}
}

// BenchmarkNodeSelectorDispatch: what matching one pod event (a bind: prev
// unscheduled, obj on a node) costs against 100 node agents' spec.nodeName
// selectors, as dispatchLocked does per distinct selector. "shared" builds
// the pod's field set once per event (objectFields); "perSelector" builds it
// for every selector, as before.
func BenchmarkNodeSelectorDispatch(b *testing.B) {
	r := &resourceInfo{New: func() proto.Message { return &corev1.Pod{} }}
	var sels []*selector
	for i := range 100 {
		sel, err := parseSelector(r, "", "", fmt.Sprintf("spec.nodeName=node-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		sels = append(sels, sel)
	}
	pod := func(n string) *corev1.Pod {
		return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "density", Name: "density-abcde", Labels: map[string]string{"app": "density"}},
			Spec: &corev1.PodSpec{NodeName: n, RestartPolicy: "Always", SchedulerName: "default-scheduler"}, Status: &corev1.PodStatus{Phase: "Pending"}}
	}
	for _, bc := range []struct {
		name  string
		match func(s *selector) func(proto.Message, *objectFields) bool
	}{
		{"shared", func(s *selector) func(proto.Message, *objectFields) bool { return s.matchesWith }},
		{"perSelector", func(s *selector) func(proto.Message, *objectFields) bool {
			return func(obj proto.Message, _ *objectFields) bool { return s.matches(obj) }
		}},
	} {
		filters := make([]func(proto.Message, *objectFields) bool, len(sels))
		for i, s := range sels {
			filters[i] = bc.match(s)
		}
		b.Run(bc.name, func(b *testing.B) {
			obj, prev := pod("node-42"), pod("")
			b.ReportAllocs()
			for b.Loop() {
				e := &watchEvent{typ: eventModified, obj: obj, prev: prev}
				n := 0
				for _, f := range filters {
					if transform(e, f) != nil {
						n++
					}
				}
				if n != 1 {
					b.Fatalf("%d selectors matched, want 1", n)
				}
			}
		})
	}
}

// A watcher's queue hands out events in order, in batches, refuses more
// than its limit, and after finish returns what is left before ending.
func TestCacheWatcherQueue(t *testing.T) {
	w := newCacheWatcher(false)
	evs := make([]*watchEvent, 5)
	for i := range evs {
		evs[i] = &watchEvent{typ: eventAdded, rev: int64(i + 1)}
	}
	for _, e := range evs[:3] {
		if !w.push(e, 3) {
			t.Fatalf("push of rev %d refused below the limit", e.rev)
		}
	}
	if w.push(evs[3], 3) {
		t.Fatal("push past the limit accepted")
	}
	batch, ok := w.next()
	if !ok || len(batch) != 3 || batch[0] != evs[0] || batch[2] != evs[2] {
		t.Fatalf("first batch: %v %v", batch, ok)
	}
	// The batch stays the caller's while more is queued.
	if !w.push(evs[3], 3) || !w.push(evs[4], 3) {
		t.Fatal("push refused after the queue was taken")
	}
	if batch[0] != evs[0] || batch[1] != evs[1] || batch[2] != evs[2] {
		t.Fatal("the returned batch changed under its caller")
	}
	w.finish()
	if w.push(evs[0], 3) {
		t.Fatal("push after finish accepted")
	}
	batch, ok = w.next()
	if !ok || len(batch) != 2 || batch[0] != evs[3] || batch[1] != evs[4] {
		t.Fatalf("second batch: %v %v", batch, ok)
	}
	if _, ok := w.next(); ok {
		t.Fatal("next after finish and drain returned a batch")
	}

	// A goroutine waiting in next is woken by a push.
	w = newCacheWatcher(false)
	got := make(chan int64, 1)
	go func() {
		b, _ := w.next()
		got <- b[0].rev
	}()
	w.push(evs[1], 3)
	select {
	case rev := <-got:
		if rev != 2 {
			t.Fatalf("woken with rev %d, want 2", rev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a push did not wake the waiting watcher")
	}
}

// TestIndexedDispatch: watchers indexed by spec.nodeName (the node agents')
// see exactly what they would if every event were matched against every
// watcher, beside unindexed ones (a field selector that is not an exact
// match, labels only, everything); and the previous object of each change
// comes from the cache's own state (the store watch carries no prevKV).
func TestIndexedDispatch(t *testing.T) {
	ctx := context.Background()
	r := resourcesByName()["pods"]
	st := &storage{prefix: "/registry/"}
	c := newCacher(r, st, discardLogger(), 100, 100, time.Hour)
	c.isReady = true
	close(c.ready)
	noInitial := false
	watch := func(labelSel, fieldSel string) *cacheWatcher {
		t.Helper()
		sel, err := parseSelector(r, "", labelSel, fieldSel)
		if err != nil {
			t.Fatal(err)
		}
		wf := watchFilter{key: sel.key(), match: sel.matchesWith, exact: sel.fields.RequiresExactMatch}
		if sel.empty() {
			wf = watchFilter{}
		}
		w, err := c.watch(ctx, 0, wf, false, &noInitial)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	watchers := map[string]*cacheWatcher{
		"a":         watch("", "spec.nodeName=a"),
		"b":         watch("", "spec.nodeName=b"),
		"b again":   watch("", "spec.nodeName=b"),
		"unbound":   watch("", "spec.nodeName="),
		"a running": watch("", "spec.nodeName=a,status.phase=Running"),
		"not a":     watch("", "spec.nodeName!=a"),
		"web":       watch("app=web", ""),
		"all":       watch("", ""),
	}
	c.mu.Lock()
	indexed, unindexed := len(c.indexed), len(c.unindexed)
	c.mu.Unlock()
	if indexed != 3 || unindexed != 3 {
		t.Fatalf("index: %d values and %d unindexed watchers, want 3 and 3", indexed, unindexed)
	}

	pod := func(name, node, phase, app string) *corev1.Pod {
		return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": app}},
			Spec: &corev1.PodSpec{NodeName: node}, Status: &corev1.PodStatus{Phase: phase}}
	}
	var rev int64
	created := map[string]int64{}
	put := func(p *corev1.Pod) {
		t.Helper()
		rev++
		key := st.key(r, "ns", p.Metadata.Name)
		val, err := st.encode(r, key, p)
		if err != nil {
			t.Fatal(err)
		}
		if created[key] == 0 {
			created[key] = rev
		}
		kv := &mvccpb.KeyValue{Key: []byte(key), Value: val, ModRevision: rev, CreateRevision: created[key]}
		if err := c.apply([]*clientv3.Event{{Type: mvccpb.PUT, Kv: kv}}); err != nil {
			t.Fatal(err)
		}
	}
	del := func(name string) {
		t.Helper()
		rev++
		key := st.key(r, "ns", name)
		delete(created, key)
		kv := &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}
		if err := c.apply([]*clientv3.Event{{Type: mvccpb.DELETE, Kv: kv}}); err != nil {
			t.Fatal(err)
		}
	}
	put(pod("p1", "", "Pending", "web"))  // 1: created, unbound
	put(pod("p1", "a", "Pending", "web")) // 2: bound to a
	put(pod("p1", "a", "Running", "web")) // 3: running on a
	put(pod("p1", "b", "Running", "web")) // 4: moved to b
	put(pod("p2", "b", "Pending", "db"))  // 5: created on b
	del("p1")                             // 6
	del("p2")                             // 7

	want := map[string][]string{
		"a":         {"ADDED 2 p1 a", "MODIFIED 3 p1 a", "DELETED 4 p1 b"},
		"b":         {"ADDED 4 p1 b", "ADDED 5 p2 b", "DELETED 6 p1 b", "DELETED 7 p2 b"},
		"b again":   {"ADDED 4 p1 b", "ADDED 5 p2 b", "DELETED 6 p1 b", "DELETED 7 p2 b"},
		"unbound":   {"ADDED 1 p1 ", "DELETED 2 p1 a"},
		"a running": {"ADDED 3 p1 a", "DELETED 4 p1 b"},
		"not a":     {"ADDED 1 p1 ", "DELETED 2 p1 a", "ADDED 4 p1 b", "ADDED 5 p2 b", "DELETED 6 p1 b", "DELETED 7 p2 b"},
		"web":       {"ADDED 1 p1 ", "MODIFIED 2 p1 a", "MODIFIED 3 p1 a", "MODIFIED 4 p1 b", "DELETED 6 p1 b"},
		"all":       {"ADDED 1 p1 ", "MODIFIED 2 p1 a", "MODIFIED 3 p1 a", "MODIFIED 4 p1 b", "ADDED 5 p2 b", "DELETED 6 p1 b", "DELETED 7 p2 b"},
	}
	for name, w := range watchers {
		w.qmu.Lock()
		var got []string
		for _, e := range w.queue {
			p := e.obj.(*corev1.Pod)
			if rvOf(p) != e.rev {
				t.Errorf("%s: event at %d carries resourceVersion %q", name, e.rev, p.GetMetadata().GetResourceVersion())
			}
			got = append(got, fmt.Sprintf("%s %d %s %s", e.typ, e.rev, p.GetMetadata().GetName(), p.GetSpec().GetNodeName()))
		}
		w.qmu.Unlock()
		if fmt.Sprint(got) != fmt.Sprint(want[name]) {
			t.Errorf("%s saw %q, want %q", name, got, want[name])
		}
	}
	c.mu.Lock()
	ev := c.events[3] // the move to b: its previous object is the state at 3
	c.mu.Unlock()
	if prev, _ := ev.prev.(*corev1.Pod); prev.GetSpec().GetNodeName() != "a" || prev.GetStatus().GetPhase() != "Running" || rvOf(prev) != 3 {
		t.Errorf("the move's previous object: %v at %q, want Running on a at 3", prev.GetSpec(), prev.GetMetadata().GetResourceVersion())
	}
	for _, w := range watchers {
		c.stop(w)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.watchers) != 0 || len(c.indexed) != 0 || len(c.unindexed) != 0 {
		t.Fatalf("after stopping every watcher: %d watchers, %d index values, %d unindexed", len(c.watchers), len(c.indexed), len(c.unindexed))
	}
}

// BenchmarkCacheApplyDensity: the pod cache applying one pod's life
// (create, bind, status) as the store sends it, with 100 node agents'
// spec.nodeName watches and 4 unfiltered ones (schedulers, controllers), as
// in the density benchmark. Each op includes encoding the three values.
func BenchmarkCacheApplyDensity(b *testing.B) {
	r := resourcesByName()["pods"]
	st := &storage{prefix: "/registry/"}
	c := newCacher(r, st, discardLogger(), 1000, 1<<30, time.Hour)
	c.isReady = true
	close(c.ready)
	noInitial := false
	var ws []*cacheWatcher
	for i := range 100 {
		sel, _ := parseSelector(r, "", "", fmt.Sprintf("spec.nodeName=node-%d", i))
		w, err := c.watch(b.Context(), 0, watchFilter{key: sel.key(), match: sel.matchesWith, exact: sel.fields.RequiresExactMatch}, false, &noInitial)
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
	}
	for range 4 {
		w, _ := c.watch(b.Context(), 0, watchFilter{}, false, &noInitial)
		ws = append(ws, w)
	}
	pod := func(name, node, phase string) *corev1.Pod {
		return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "density", Name: name, Uid: "0b7e0a7c-2a4e-4d0e-9a57-1f0f5d1c0d3a",
			Labels:          map[string]string{"app": "density", "pod-template-hash": "7d9c8f6b5"},
			OwnerReferences: []*metav1.OwnerReference{{ApiVersion: "apps/v1", Kind: "ReplicaSet", Name: "density-7d9c8f6b5", Uid: "1c8e0a7c-2a4e-4d0e-9a57-1f0f5d1c0d3a"}}},
			Spec: &corev1.PodSpec{NodeName: node, RestartPolicy: "Always", SchedulerName: "default-scheduler",
				Containers: []*corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			Status: &corev1.PodStatus{Phase: phase}}
	}
	var rev int64
	enc := func(p *corev1.Pod, create int64) *mvccpb.KeyValue {
		rev++
		key := st.key(r, "density", p.Metadata.Name)
		v, err := st.encode(r, key, p)
		if err != nil {
			b.Fatal(err)
		}
		if create == 0 {
			create = rev
		}
		return &mvccpb.KeyValue{Key: []byte(key), Value: v, ModRevision: rev, CreateRevision: create}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		name := fmt.Sprintf("density-%d", i)
		node := fmt.Sprintf("node-%d", i%100)
		i++
		kv1 := enc(pod(name, "", "Pending"), 0)
		kv2 := enc(pod(name, node, "Pending"), kv1.CreateRevision)
		kv3 := enc(pod(name, node, "Running"), kv1.CreateRevision)
		for _, e := range []*clientv3.Event{{Type: mvccpb.PUT, Kv: kv1}, {Type: mvccpb.PUT, Kv: kv2, PrevKv: kv1}, {Type: mvccpb.PUT, Kv: kv3, PrevKv: kv2}} {
			if err := c.apply([]*clientv3.Event{e}); err != nil {
				b.Fatal(err)
			}
		}
		if i%64 == 0 {
			for _, w := range ws {
				w.qmu.Lock()
				clear(w.queue)
				w.queue = w.queue[:0]
				w.qmu.Unlock()
			}
		}
	}
}

// TestCacheFirstListAt: a cache told to start at an earlier revision (a
// custom resource's, at the revision its CRD became servable) lists there
// and replays what came since, so a watch from any of those writes is
// served from its window; with that revision compacted it starts now.
func TestCacheFirstListAt(t *testing.T) {
	eps := storetest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := resourcesByName()["configmaps"]
	st := &storage{cli: cli, prefix: "/registry/"}
	create := func(name string) int64 {
		obj := &corev1.ConfigMap{Metadata: om("default", name)}
		prepareForCreate(r, obj)
		rev, err := st.create(ctx, r, "default", name, obj)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	start := create("before")
	written := create("after")
	create("later")

	c := newCacher(r, st, discardLogger(), 100, 100, time.Hour)
	c.firstListAt = start
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { c.run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	if err := c.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := c.watch(ctx, written, watchFilter{}, false, nil)
	if err != nil {
		t.Fatalf("watch from a write after the first list's revision: %v", err)
	}
	defer c.stop(w)
	// The cache is ready once it has replayed up to the last write, so the
	// watch starts with what came after its resourceVersion.
	if len(w.initial) == 0 || !strings.HasSuffix(w.initial[0].key, "/later") {
		t.Fatalf("first events %v, want the create of later", w.initial)
	}

	// Compacted past: the cache starts at the current revision instead.
	now := create("last")
	if _, err := cli.Compact(ctx, now); err != nil {
		t.Fatal(err)
	}
	c2 := newCacher(r, st, discardLogger(), 100, 100, time.Hour)
	c2.firstListAt = start
	if err := c2.relist(ctx); err != nil {
		t.Fatal(err)
	}
	if items, rev := c2.snapshot(nil); len(items) != 4 || rev < now {
		t.Fatalf("after a compacted first revision: %d items at %d, want 4 at >= %d", len(items), rev, now)
	}
}
