package apiserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apierrors"
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
	w, err := c.watch(ctx, before, nil, false, nil)
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
	select {
	case _, ok := <-w.ch:
		if ok {
			t.Fatal("old watcher got an event instead of being closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("old watcher not closed after the re-list")
	}
	// ... and resuming from before the re-list is Gone.
	if _, err := c.watch(ctx, before, nil, false, nil); !apierrors.IsGone(err) {
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
