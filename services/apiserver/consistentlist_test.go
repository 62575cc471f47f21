// This file holds the tests of consistent lists served from the watch cache:
// linearizable across replicas, served from the cache for a resource without
// recent events, read from the store when the store's progress notifications
// are not trusted (etcd before the fix), and paged with the store's tokens.

package apiserver

import (
	"fmt"
	"slices"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/internal/storetest"
)

func TestProgressOrderedVersion(t *testing.T) {
	for v, want := range map[string]bool{
		"3.4.23": false, "3.4.30": false, "3.4.31": true, "3.5.8": false, "3.5.12": false,
		"3.5.13": true, "3.5.17": true, "3.6.0": true, "3.7.1": true, "4.0.0": true,
		"3.3.27": false, "2.3.8": false, "": false, "garbage": false, "3.5.13-rc.0": true,
	} {
		if got := progressOrderedVersion(v); got != want {
			t.Errorf("progressOrderedVersion(%q) = %v, want %v", v, got, want)
		}
	}
}

// requireOrderedStore skips unless the test store orders progress
// notifications (the kplane store), and checks the replica found so.
func requireOrderedStore(t *testing.T, e *env) {
	t.Helper()
	if storetest.Kind() != "kplane" {
		t.Skip("consistent lists come from the watch cache only on a store that orders progress notifications (KPLANE_TEST_STORE=kplane)")
	}
	if !e.srv.store.progressOrdered.Load() {
		t.Fatal("the kplane store's progress notifications are not trusted")
	}
}

func names(l []*corev1.ConfigMap) []string {
	out := make([]string, 0, len(l))
	for _, c := range l {
		out = append(out, c.GetMetadata().GetName())
	}
	return out
}

// TestConsistentListLinearizable: a write through one replica is in a
// consistent list through another one (whose watch cache may lag) at once,
// every time, and so is a delete; the lists come from that replica's cache.
func TestConsistentListLinearizable(t *testing.T) {
	a := newEnv(t, nil)
	requireOrderedStore(t, a)
	b := newEnvOn(t, a.eps, nil)
	ctx := admin(t)
	before := b.srv.consistentLists.fromCache.Load()
	const rounds = 40
	for i := range rounds {
		name := fmt.Sprintf("lin-%d", i)
		if _, err := a.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: &corev1.ConfigMap{Metadata: om("default", name)}}); err != nil {
			t.Fatal(err)
		}
		l, err := b.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(names(l.GetList().GetItems()), name) {
			t.Fatalf("round %d: a consistent list through the other replica misses %s, just written", i, name)
		}
		if _, err := a.cms.DeleteConfigMap(ctx, &corev1.DeleteConfigMapRequest{Namespace: "default", Name: name}); err != nil {
			t.Fatal(err)
		}
		l, err = b.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(names(l.GetList().GetItems()), name) {
			t.Fatalf("round %d: a consistent list through the other replica still has %s, just deleted", i, name)
		}
	}
	if got := b.srv.consistentLists.fromCache.Load() - before; got != 2*rounds {
		t.Errorf("%d of %d consistent lists came from the watch cache (store: %d, of which the cache lagged: %d)",
			got, 2*rounds, b.srv.consistentLists.fromStore.Load(), b.srv.consistentLists.lag.Load())
	}
}

// TestConsistentListQuietResource: a resource without events while others
// are written (the store's revision moves past its cache's last event) is
// still served from its cache, current to the store's revision, by the
// progress notification the list asks for.
func TestConsistentListQuietResource(t *testing.T) {
	e := newEnv(t, nil)
	requireOrderedStore(t, e)
	ctx := admin(t)
	if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: &corev1.ConfigMap{Metadata: om("default", "quiet")}}); err != nil {
		t.Fatal(err)
	}
	var last string
	for i := range 20 {
		ns, err := e.ns.CreateNamespace(ctx, &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: fmt.Sprintf("busy-%d", i)}}})
		if err != nil {
			t.Fatal(err)
		}
		last = ns.GetNamespace().GetMetadata().GetResourceVersion()
	}
	wrote, _ := parseRV(last)
	ch := e.srv.cachers["configmaps"]
	ch.mu.Lock()
	behind := ch.rev < wrote
	ch.mu.Unlock()
	if !behind {
		t.Log("the configmaps cache is already past the other writes (a progress notification came first)")
	}
	cache, store := e.srv.consistentLists.fromCache.Load(), e.srv.consistentLists.fromStore.Load()
	l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names(l.GetList().GetItems()), "quiet") {
		t.Fatalf("the list misses the configmap: %v", names(l.GetList().GetItems()))
	}
	if rv, _ := parseRV(l.GetList().GetMetadata().GetResourceVersion()); rv < wrote {
		t.Errorf("list resourceVersion %d is older than the last write %d", rv, wrote)
	}
	if d := e.srv.consistentLists.fromCache.Load() - cache; d != 1 {
		t.Errorf("served from the cache: %d, from the store: %d (lagged: %d), want the cache",
			d, e.srv.consistentLists.fromStore.Load()-store, e.srv.consistentLists.lag.Load())
	}
}

// TestConsistentListUntrustedStore: when the store's progress
// notifications are not trusted (etcd 3.4.23, the default test store, or
// forced here on the kplane store), consistent lists read the store, and a
// progress notification does not move the cache.
func TestConsistentListUntrustedStore(t *testing.T) {
	e := newEnv(t, nil)
	if storetest.Kind() == "etcd" && e.srv.store.progressOrdered.Load() {
		t.Fatal("etcd's progress notifications are trusted; the test etcd (3.4.23) must not be")
	}
	e.srv.store.progressOrdered.Store(false)
	ctx := admin(t)
	if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: &corev1.ConfigMap{Metadata: om("default", "x")}}); err != nil {
		t.Fatal(err)
	}
	cache, store := e.srv.consistentLists.fromCache.Load(), e.srv.consistentLists.fromStore.Load()
	l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default"})
	if err != nil || !slices.Contains(names(l.GetList().GetItems()), "x") {
		t.Fatalf("list: %v, %v", err, names(l.GetList().GetItems()))
	}
	if c, s := e.srv.consistentLists.fromCache.Load()-cache, e.srv.consistentLists.fromStore.Load()-store; c != 0 || s != 1 {
		t.Errorf("from the cache: %d, from the store: %d; want the store", c, s)
	}
	ch := e.srv.cachers["configmaps"]
	ch.mu.Lock()
	rev := ch.rev
	ch.mu.Unlock()
	ch.progressTo(rev + 1000)
	ch.mu.Lock()
	after := ch.rev
	ch.mu.Unlock()
	if after != rev {
		t.Errorf("an untrusted progress notification moved the cache from %d to %d", rev, after)
	}
}

// TestConsistentListPaged: with a limit, the first page comes from the
// cache with the token a store read gives; the next pages read the store at
// that page's revision, so a write between pages is not seen, and the
// pages together are the list.
func TestConsistentListPaged(t *testing.T) {
	e := newEnv(t, nil)
	requireOrderedStore(t, e)
	ctx := admin(t)
	if _, err := e.ns.CreateNamespace(ctx, &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "paged"}}}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 8 {
		name := fmt.Sprintf("p-%02d", i)
		want = append(want, name)
		labels := map[string]string{"odd": fmt.Sprint(i%2 == 1)}
		for _, ns := range []string{"paged", "default"} {
			c := &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
			if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: ns, ConfigMap: c}); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := e.srv.resources["configmaps"]
	for _, sel := range []string{"", "odd=true"} {
		want := want
		if sel != "" {
			want = []string{"p-01", "p-03", "p-05", "p-07"}
		}
		// The store's own first page, for its token.
		ps, err := parseSelectorFor(r, "paged", sel, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, storeMeta, err := e.srv.listStore(ctx, r, "paged", 0, "", 3, ps, false)
		if err != nil {
			t.Fatal(err)
		}
		cache := e.srv.consistentLists.fromCache.Load()
		first, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "paged", LabelSelector: sel, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if e.srv.consistentLists.fromCache.Load()-cache != 1 {
			t.Errorf("selector %q: the first page did not come from the cache", sel)
		}
		got, gotTok := first.GetList(), first.GetList().GetMetadata().GetContinue()
		ct, err := decodeContinue(gotTok)
		if err != nil {
			t.Fatalf("selector %q: the cache's token: %v", sel, err)
		}
		st, _ := decodeContinue(storeMeta.GetContinue())
		if rv, _ := parseRV(got.GetMetadata().GetResourceVersion()); ct.Key != st.Key || ct.Rev != rv {
			t.Errorf("selector %q: cache token %+v (list at %d), store token %+v", sel, ct, rv, st)
		}
		// A write between pages is not in the later ones.
		late := &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: "paged", Name: "p-99" + sel[:min(len(sel), 3)], Labels: map[string]string{"odd": "true"}}}
		if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "paged", ConfigMap: late}); err != nil {
			t.Fatal(err)
		}
		all := names(got.GetItems())
		tok := gotTok
		for tok != "" {
			next, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "paged", LabelSelector: sel, Limit: 3, Continue: tok})
			if err != nil {
				t.Fatal(err)
			}
			if next.GetList().GetMetadata().GetResourceVersion() != got.GetMetadata().GetResourceVersion() {
				t.Errorf("selector %q: a later page is at %s, the first at %s", sel, next.GetList().GetMetadata().GetResourceVersion(), got.GetMetadata().GetResourceVersion())
			}
			all = append(all, names(next.GetList().GetItems())...)
			tok = next.GetList().GetMetadata().GetContinue()
		}
		if !slices.Equal(all, want) {
			t.Errorf("selector %q: pages hold %v, want %v", sel, all, want)
		}
		if _, err := e.cms.DeleteConfigMap(ctx, &corev1.DeleteConfigMapRequest{Namespace: "paged", Name: late.GetMetadata().GetName()}); err != nil {
			t.Fatal(err)
		}
	}
}
