// This file holds the end-to-end test of the dynamic client and a dynamic
// informer against a real API service: ConfigMaps (a built-in kind) as
// Unstructured objects, created, listed page by page, updated, watched by
// an informer that keeps whole objects and one that keeps metadata only,
// and deleted.
package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kplane/kplane/proto/apierrors"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

func TestDynamicClient(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	d := client.NewDynamic(env.Dial(t, apiservertest.AdminToken))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	for i := range 3 {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("d%d", i), "labels": map[string]any{"set": "dyn"}}, "data": map[string]any{"i": fmt.Sprint(i)}}}
		if _, err := d.Create(ctx, cms, "default", u); err != nil {
			t.Fatal(err)
		}
	}
	l, err := d.List(ctx, cms, "default", client.ListOptions{LabelSelector: "set=dyn", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 3 || l.GetResourceVersion() == "" {
		t.Errorf("list of 3 in pages of 2: got %d items, resourceVersion %q", len(l.Items), l.GetResourceVersion())
	}

	full := client.NewInformer[*dynamicv1.Object](client.DynamicListWatch(d, cms, "default", false), client.InformerOptions[*dynamicv1.Object]{})
	meta := client.NewInformer[*dynamicv1.Object](client.DynamicListWatch(d, cms, "default", true), client.InformerOptions[*dynamicv1.Object]{})
	go func() { _ = full.Run(ctx) }()
	go func() { _ = meta.Run(ctx) }()
	if !client.WaitForCacheSync(ctx, full, meta) {
		t.Fatal("informers did not sync")
	}
	u, err := d.Get(ctx, cms, "default", "d1")
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, "changed", "data", "i"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Update(ctx, cms, u); err != nil {
		t.Fatal(err)
	}
	// A stale write conflicts.
	if _, err := d.Update(ctx, cms, u); !apierrors.IsConflict(err) {
		t.Errorf("update with a stale resourceVersion: got %v, want Conflict", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		o, ok := full.Store().Get("default/d1")
		if ok && len(o.GetContent()) > 0 {
			got := &unstructured.Unstructured{}
			if err := got.UnmarshalJSON(o.GetContent()); err != nil {
				t.Fatal(err)
			}
			if v, _, _ := unstructured.NestedString(got.Object, "data", "i"); v == "changed" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the informer never saw the update: %v", o)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m, ok := meta.Store().Get("default/d1"); !ok || len(m.GetContent()) != 0 || m.GetMetadata().GetLabels()["set"] != "dyn" {
		t.Errorf("metadata-only informer: got %v", m)
	}
	if err := d.Delete(ctx, cms, "default", "d0", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := meta.Store().Get("default/d0"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the informer never saw the delete")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := d.Get(ctx, cms, "default", "d0"); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: got %v, want NotFound", err)
	}
}
