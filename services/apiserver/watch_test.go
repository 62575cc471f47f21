// This file holds the tests of watches: order and resume without gaps,
// initial objects, a start below the window, bookmarks, selector
// transitions, stalled and idle watchers.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

type seen struct {
	typ  string
	name string
	rv   int64
}

func rvInt(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", s, err)
	}
	return v
}

// recvN reads n events (bounded by the context's deadline).
func recvN(t *testing.T, st corev1.ConfigMapService_WatchConfigMapsClient, n int, skipBookmarks bool) []seen {
	t.Helper()
	var out []seen
	for len(out) < n {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(out), n, err)
		}
		if skipBookmarks && ev.GetType() == eventBookmark {
			continue
		}
		out = append(out, seen{ev.GetType(), ev.GetObject().GetMetadata().GetName(), rvInt(t, ev.GetObject().GetMetadata().GetResourceVersion())})
	}
	return out
}

func cm(name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels}}
}

// writes performs a create, update, delete cycle on n config maps and
// returns the events a full watch must see, in order.
func writes(t *testing.T, e *env, prefix string, n int) []seen {
	t.Helper()
	ctx := admin(t)
	var want []seen
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		c, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm(name, nil)})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, seen{eventAdded, name, rvInt(t, c.GetConfigMap().GetMetadata().GetResourceVersion())})
		obj := c.GetConfigMap()
		obj.Data = map[string]string{"k": "v"}
		u, err := e.cms.UpdateConfigMap(ctx, &corev1.UpdateConfigMapRequest{Namespace: "default", Name: name, ConfigMap: obj})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, seen{eventModified, name, rvInt(t, u.GetConfigMap().GetMetadata().GetResourceVersion())})
		if i%2 == 0 {
			if _, err := e.cms.DeleteConfigMap(ctx, &corev1.DeleteConfigMapRequest{Namespace: "default", Name: name}); err != nil {
				t.Fatal(err)
			}
			want = append(want, seen{eventDeleted, name, 0})
		}
	}
	return want
}

func sameEvents(t *testing.T, got, want []seen) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	var last int64
	for i := range got {
		if got[i].typ != want[i].typ || got[i].name != want[i].name || (want[i].rv != 0 && got[i].rv != want[i].rv) {
			t.Fatalf("event %d: got %v, want %v", i, got[i], want[i])
		}
		if got[i].rv <= last {
			t.Fatalf("event %d: resourceVersion %d not after %d", i, got[i].rv, last)
		}
		last = got[i].rv
	}
}

func TestWatchOrderAndResumeWithoutGapsOrDuplicates(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	from := l.GetList().GetMetadata().GetResourceVersion()
	wctx, cancel := context.WithCancel(ctx)
	st, err := e.cms.WatchConfigMaps(wctx, &corev1.WatchConfigMapsRequest{Namespace: "default", ResourceVersion: from})
	if err != nil {
		t.Fatal(err)
	}
	want := writes(t, e, "w", 10)
	first := recvN(t, st, 7, true)
	cancel()
	// Resume from the last event received: the rest, exactly once.
	st2, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", ResourceVersion: fmt.Sprint(first[len(first)-1].rv)})
	if err != nil {
		t.Fatal(err)
	}
	rest := recvN(t, st2, len(want)-len(first), true)
	sameEvents(t, append(first, rest...), want)
}

func TestWatchFromZeroSendsExistingObjectsFirst(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	for _, n := range []string{"a", "b", "c"} {
		if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm(n, nil)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, rv := range []string{"", "0"} {
		t.Run("rv="+rv, func(t *testing.T) {
			st, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", ResourceVersion: rv})
			if err != nil {
				t.Fatal(err)
			}
			got := recvN(t, st, 3, true)
			names := map[string]bool{}
			for _, s := range got {
				if s.typ != eventAdded {
					t.Errorf("got %v, want ADDED", s)
				}
				names[s.name] = true
			}
			if len(names) != 3 {
				t.Errorf("got %v, want a, b and c", got)
			}
		})
	}
}

func TestWatchBelowWindowIsGone(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.WatchWindow = 4 })
	ctx := admin(t)
	l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	old := l.GetList().GetMetadata().GetResourceVersion()
	want := writes(t, e, "g", 6)
	// Make sure the cache has seen the writes before resuming.
	if err := e.srv.cachers["configmaps"].waitFor(ctx, want[len(want)-2].rv); err != nil {
		t.Fatal(err)
	}
	st, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{ResourceVersion: old})
	if err == nil {
		_, err = st.Recv()
	}
	se := wantReason(t, err, apierrors.ReasonExpired)
	if !strings.HasPrefix(se.Message, "too old resource version: "+old) {
		t.Errorf("message: got %q", se.Message)
	}
	if !apierrors.IsGone(err) {
		t.Errorf("IsGone: got false for %v", err)
	}
}

func TestWatchBookmarks(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	st, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", AllowWatchBookmarks: true, SendInitialEvents: nil, ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("bm", nil)})
	if err != nil {
		t.Fatal(err)
	}
	created := rvInt(t, c.GetConfigMap().GetMetadata().GetResourceVersion())
	var sawEvent bool
	for i := 0; i < 100; i++ {
		ev, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		rv := rvInt(t, ev.GetObject().GetMetadata().GetResourceVersion())
		switch ev.GetType() {
		case eventAdded:
			sawEvent = true
		case eventBookmark:
			if ev.GetObject().GetMetadata().GetName() != "" {
				t.Errorf("bookmark carries an object: %v", ev.GetObject())
			}
			if sawEvent {
				if rv < created {
					t.Fatalf("bookmark at %d before the event at %d it follows", rv, created)
				}
				return
			}
		}
	}
	t.Fatal("no bookmark after the event within 100 messages")
}

func TestWatchSelectorTransitions(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	st, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", LabelSelector: "app=a", ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("t", map[string]string{"app": "b"})})
	if err != nil {
		t.Fatal(err)
	}
	obj := c.GetConfigMap()
	var want []seen
	for _, app := range []string{"a", "a", "b", "a"} {
		obj.Metadata.Labels = map[string]string{"app": app}
		obj.Data = map[string]string{"n": fmt.Sprint(len(want))}
		u, err := e.cms.UpdateConfigMap(ctx, &corev1.UpdateConfigMapRequest{Namespace: "default", Name: "t", ConfigMap: obj})
		if err != nil {
			t.Fatal(err)
		}
		obj = u.GetConfigMap()
		want = append(want, seen{name: "t", rv: rvInt(t, obj.GetMetadata().GetResourceVersion())})
	}
	want[0].typ, want[1].typ, want[2].typ, want[3].typ = eventAdded, eventModified, eventDeleted, eventAdded
	if _, err := e.cms.DeleteConfigMap(ctx, &corev1.DeleteConfigMapRequest{Namespace: "default", Name: "t"}); err != nil {
		t.Fatal(err)
	}
	want = append(want, seen{typ: eventDeleted, name: "t"})
	sameEvents(t, recvN(t, st, len(want), true), want)
}

func TestFieldSelectorWatchAndList(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	st, err := e.pods.WatchPods(ctx, &corev1.WatchPodsRequest{FieldSelector: "spec.nodeName=n1", ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, e, testPod("default", "p"))
	if _, err := e.pods.BindPod(ctx, &corev1.BindPodRequest{Namespace: "default", Name: "p", Binding: &corev1.Binding{Target: &corev1.ObjectReference{Name: "n1"}}}); err != nil {
		t.Fatal(err)
	}
	ev, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetType() != eventAdded || ev.GetObject().GetSpec().GetNodeName() != "n1" {
		t.Errorf("got %s %v, want ADDED bound to n1", ev.GetType(), ev.GetObject().GetSpec())
	}
	l, err := e.pods.ListPods(ctx, &corev1.ListPodsRequest{FieldSelector: "spec.nodeName=n1,status.phase=Pending"})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.GetList().GetItems()) != 1 {
		t.Errorf("list by field: got %d items, want 1", len(l.GetList().GetItems()))
	}
	_, err = e.pods.ListPods(ctx, &corev1.ListPodsRequest{FieldSelector: "spec.bogus=x"})
	wantReason(t, err, apierrors.ReasonBadRequest)
}

// TestStalledWatcherDoesNotDelayOthers: one client stops reading a watch
// that carries big objects; 1,000 other watchers must still get every event
// and the stalled one is cut off, then resumes without a gap.
func TestStalledWatcherDoesNotDelayOthers(t *testing.T) {
	const watchers, small, big = 1000, 150, 8
	e := newEnv(t, func(c *Config) { c.WatchBuffer = 50 })
	// A longer deadline than other tests: 1,000 streams on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer admin")
	l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	from := l.GetList().GetMetadata().GetResourceVersion()

	// The stalled client: its own connection with a fixed, small flow
	// control window, so the server's sends block once it stops reading.
	sconn, err := grpc.NewClient(e.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close()
	stalled, err := corev1.NewConfigMapServiceClient(sconn).WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", ResourceVersion: from})
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		n, resumes int
		err        error
	}
	results := make(chan result, watchers)
	var started sync.WaitGroup
	for range watchers {
		started.Add(1)
		go func() {
			r := result{}
			rv := from
			first := true
			for r.n < small && r.err == nil {
				st, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", LabelSelector: "size=small", ResourceVersion: rv})
				if err != nil {
					r.err = err
					break
				}
				if first {
					started.Done()
					first = false
				} else {
					r.resumes++
				}
				for r.n < small {
					ev, err := st.Recv()
					if errors.Is(err, io.EOF) {
						break // cut off: resume
					}
					if err != nil {
						r.err = err
						break
					}
					rv = ev.GetObject().GetMetadata().GetResourceVersion()
					if ev.GetType() == eventAdded {
						r.n++
					}
				}
			}
			if first {
				started.Done()
			}
			results <- r
		}()
	}
	started.Wait()

	payload := strings.Repeat("x", 512<<10)
	for i := range big {
		c := cm(fmt.Sprintf("big-%d", i), map[string]string{"size": "big"})
		c.Data = map[string]string{"blob": payload}
		if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: c}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range small {
		if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm(fmt.Sprintf("small-%d", i), map[string]string{"size": "small"})}); err != nil {
			t.Fatal(err)
		}
	}
	resumes := 0
	for range watchers {
		r := <-results
		if r.err != nil || r.n != small {
			t.Fatalf("a watcher got %d of %d events: %v", r.n, small, r.err)
		}
		resumes += r.resumes
	}
	t.Logf("%d watchers got all %d events (%d resumes after cut-offs)", watchers, small, resumes)

	// The stalled watcher was cut off: reading now yields what was
	// buffered, then the end of the stream, short of everything.
	var got []seen
	for {
		ev, err := stalled.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stalled watcher: %v", err)
		}
		got = append(got, seen{ev.GetType(), ev.GetObject().GetMetadata().GetName(), rvInt(t, ev.GetObject().GetMetadata().GetResourceVersion())})
	}
	if len(got) >= big+small {
		t.Fatalf("stalled watcher got all %d events: it was not cut off", len(got))
	}
	// It resumes from its last event and gets the rest, with no gap.
	resumeFrom := from
	if len(got) > 0 {
		resumeFrom = fmt.Sprint(got[len(got)-1].rv)
	}
	st, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", ResourceVersion: resumeFrom})
	if err != nil {
		t.Fatal(err)
	}
	rest := recvN(t, st, big+small-len(got), true)
	all := append(got, rest...)
	for i, s := range all {
		wantName := fmt.Sprintf("big-%d", i)
		if i >= big {
			wantName = fmt.Sprintf("small-%d", i-big)
		}
		if s.name != wantName || s.typ != eventAdded {
			t.Fatalf("event %d: got %v, want ADDED %s", i, s, wantName)
		}
	}
	t.Logf("stalled watcher cut off after %d events, resumed for %d more", len(got), len(rest))
}

// watcherCount is how many watchers the config map cache has registered.
func watcherCount(e *env) int {
	c := e.srv.cachers["configmaps"]
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.watchers)
}

// An idle watch ends when its call does: at timeoutSeconds with a clean end
// of stream, and when the client cancels, with its watcher unregistered.
func TestIdleWatchEndsWithItsCall(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer admin")

	st, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", TimeoutSeconds: proto.Int64(1)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("a watch past its timeoutSeconds: got %v, want a clean end of stream", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the watch ended %v after its 1s timeout", d)
	}

	wctx, wcancel := context.WithCancel(ctx)
	st, err = e.cms.WatchConfigMaps(wctx, &corev1.WatchConfigMapsRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Header(); err != nil { // the watch is registered once headers are sent
		t.Fatal(err)
	}
	if n := watcherCount(e); n != 1 {
		t.Fatalf("%d watchers registered, want 1", n)
	}
	wcancel()
	for watcherCount(e) != 0 {
		if ctx.Err() != nil {
			t.Fatal("the cancelled watch is still registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
