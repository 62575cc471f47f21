// This file holds the API service's tests of a CRD's several served
// versions: with conversion strategy None, every served version is the
// stored object with its apiVersion rewritten (writes, reads, lists,
// watches), discovery lists them by Kubernetes' version priority, a version
// not served is NotFound; each version selects on its own selectableFields
// (webhook conversion: crconversion_test.go).
package apiserver

import (
	"context"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kplane/kplane/proto/apierrors"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

// multiVersionCRD is gadgetCRD with v1 stored, v2 and v1beta1 served too,
// v3 not served.
var multiVersionCRD = strings.Replace(gadgetCRD, "  versions:\n  - name: v1\n", `  versions:
  - name: v1beta1
    served: true
    storage: false
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
  - name: v3
    served: false
    storage: false
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
  - name: v2
    served: true
    storage: false
    selectableFields: [{jsonPath: .spec.color}]
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              color: {type: string}
              size: {type: integer, default: 5}
  - name: v1
`, 1)

func gadgetsAt(version, ns, name string) *dynamicv1.Target {
	t := gadgets(ns, name)
	t.Version = version
	return t
}

// servedVersions is what Discover says gadgets are served at, in order,
// and which one is stored.
func servedVersions(t *testing.T, dyn dynamicv1.ResourceServiceClient) (versions []string, storage string) {
	t.Helper()
	resp, err := dyn.Discover(admin(t), &dynamicv1.DiscoverRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.GetResources() {
		if r.GetResource() == "gadgets" {
			versions = append(versions, r.GetVersion())
			if r.GetStorage() {
				storage = r.GetVersion()
			}
		}
	}
	return versions, storage
}

func TestCustomResourceServedVersions(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dyn := dynamicv1.NewResourceServiceClient(e.conn)
	establishCRD(t, e, multiVersionCRD, gadgets("default", ""))
	waitServed(t, e, gadgetsAt("v2", "default", ""), true)

	if got, storage := servedVersions(t, dyn); !slices.Equal(got, []string{"v2", "v1", "v1beta1"}) || storage != "v1" {
		t.Errorf("Discover: versions %v (storage %q), want [v2 v1 v1beta1] by priority, v1 stored", got, storage)
	}

	// Written at v2: pruned and defaulted by v2's schema, stored as v1.
	cr, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgetsAt("v2", "default", ""), Object: []byte(
		`{"apiVersion":"example.com/v2","kind":"Gadget","metadata":{"name":"g1"},"spec":{"color":"red","bogus":1}}`)})
	if err != nil {
		t.Fatal(err)
	}
	g := decodeJSON(t, cr.GetObject())
	if dig(g, "apiVersion") != "example.com/v2" || dig(g, "spec", "size") != float64(5) || dig(g, "spec", "bogus") != nil {
		t.Errorf("create at v2: got %s, want apiVersion example.com/v2, v2's default size 5, bogus pruned", cr.GetObject())
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.eps})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	kv, err := cli.Get(context.Background(), "/registry/example.com/gadgets/default/g1")
	if err != nil || len(kv.Kvs) != 1 {
		t.Fatalf("stored object: got %v, %v; want one key", kv, err)
	}
	if got := dig(decodeJSON(t, kv.Kvs[0].Value), "apiVersion"); got != "example.com/v1" {
		t.Errorf("stored apiVersion: got %v, want the storage version's example.com/v1", got)
	}

	// Read at each served version: the same object.
	for _, v := range []string{"v1", "v2", "v1beta1"} {
		get, err := dyn.Get(ctx, &dynamicv1.GetRequest{Target: gadgetsAt(v, "default", "g1")})
		if err != nil {
			t.Fatalf("get at %s: %v", v, err)
		}
		g := decodeJSON(t, get.GetObject())
		if dig(g, "apiVersion") != "example.com/"+v || dig(g, "spec", "color") != "red" {
			t.Errorf("get at %s: got %s", v, get.GetObject())
		}
		l, err := dyn.List(ctx, &dynamicv1.ListRequest{Target: gadgetsAt(v, "default", "")})
		if err != nil {
			t.Fatalf("list at %s: %v", v, err)
		}
		list := decodeJSON(t, l.GetList())
		items, _ := list["items"].([]any)
		if dig(list, "apiVersion") != "example.com/"+v || len(items) != 1 || dig(items[0].(map[string]any), "apiVersion") != "example.com/"+v {
			t.Errorf("list at %s: got %s", v, l.GetList())
		}
	}

	// selectableFields are the version's: v2 selects on spec.color, v1
	// (which has none) does not.
	l, err := dyn.List(ctx, &dynamicv1.ListRequest{Target: gadgetsAt("v2", "default", ""), FieldSelector: "spec.color=red"})
	if err != nil {
		t.Fatal(err)
	}
	if items, _ := decodeJSON(t, l.GetList())["items"].([]any); len(items) != 1 {
		t.Errorf("list at v2 with spec.color=red: got %s, want g1", l.GetList())
	}
	_, err = dyn.List(ctx, &dynamicv1.ListRequest{Target: gadgetsAt("v1", "default", ""), FieldSelector: "spec.color=red"})
	if se := wantReason(t, err, apierrors.ReasonBadRequest); se.Message != "field label not supported: spec.color" {
		t.Errorf("list at v1 with spec.color=red: got %q", se.Message)
	}

	// The body's apiVersion must be the URL's.
	_, err = dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgetsAt("v2", "default", ""), Object: []byte(
		`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g2"},"spec":{"color":"red"}}`)})
	if se := wantReason(t, err, apierrors.ReasonBadRequest); !strings.Contains(se.Message, "does not match the expected API version (example.com/v2)") {
		t.Errorf("mismatched apiVersion: got %q", se.Message)
	}
	// A version not served is not found.
	_, err = dyn.List(ctx, &dynamicv1.ListRequest{Target: gadgetsAt("v3", "default", "")})
	wantReason(t, err, apierrors.ReasonNotFound)

	// A watch at v1beta1 sees a write made at v1 as v1beta1.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := dyn.Watch(wctx, &dynamicv1.WatchRequest{Target: gadgetsAt("v1beta1", "default", ""), ResourceVersion: dig(g, "metadata", "resourceVersion").(string)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgets("default", ""), Object: []byte(
		`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g3"},"spec":{"color":"blue"}}`)}); err != nil {
		t.Fatal(err)
	}
	ev, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if o := decodeJSON(t, ev.GetObject()); ev.GetType() != "ADDED" || dig(o, "apiVersion") != "example.com/v1beta1" || dig(o, "metadata", "name") != "g3" {
		t.Errorf("watch at v1beta1: got %s %s", ev.GetType(), ev.GetObject())
	}
}
