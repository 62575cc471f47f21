// This file tests the generic ResourceService on built-in kinds: a
// ConfigMap written, read, listed, watched and deleted as JSON, unknown
// fields warned about or refused, a wrong apiVersion or kind refused, a
// Deployment's scale, and RBAC applied as on the typed service.
package apiserver

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/apierrors"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

func TestResourceServiceBuiltinKinds(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dyn := dynamicv1.NewResourceServiceClient(e.conn)
	cms := func(name string) *dynamicv1.Target {
		return &dynamicv1.Target{Version: "v1", Resource: "configmaps", Namespace: "default", Name: name}
	}
	var hdr metadata.MD
	created, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: cms(""),
		Object: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1","labels":{"app":"x"}},"data":{"k":"v"},"bogus":1}`)},
		grpc.Header(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if o := decodeJSON(t, created.GetObject()); dig(o, "kind") != "ConfigMap" || dig(o, "data", "k") != "v" || dig(o, "metadata", "uid") == nil {
		t.Errorf("create: got %s", created.GetObject())
	}
	if w := hdr.Get(dynamicv1.WarningHeader); len(w) != 1 || !strings.Contains(w[0], `unknown field \"bogus\"`) && !strings.Contains(w[0], `unknown field "bogus"`) {
		t.Errorf("warnings: got %q, want one about bogus", w)
	}
	_, err = dyn.Create(ctx, &dynamicv1.CreateRequest{Target: cms(""), Options: &dynamicv1.WriteOptions{FieldValidation: "Strict"},
		Object: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c2"},"bogus":1}`)})
	wantReason(t, err, apierrors.ReasonBadRequest)
	_, err = dyn.Create(ctx, &dynamicv1.CreateRequest{Target: cms(""), Object: []byte(`{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"c3"}}`)})
	wantReason(t, err, apierrors.ReasonBadRequest)
	_, err = dyn.Create(ctx, &dynamicv1.CreateRequest{Target: cms(""), Object: []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"c4"}}`)})
	wantReason(t, err, apierrors.ReasonInvalid)

	got, err := dyn.Get(ctx, &dynamicv1.GetRequest{Target: cms("c1")})
	if err != nil {
		t.Fatal(err)
	}
	o := decodeJSON(t, got.GetObject())
	o["data"] = map[string]any{"k": "w"}
	upd, err := dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: cms("c1"), Object: mustJSON(t, o)})
	if err != nil {
		t.Fatal(err)
	}
	if dig(decodeJSON(t, upd.GetObject()), "data", "k") != "w" {
		t.Errorf("update: got %s", upd.GetObject())
	}
	list, err := dyn.List(ctx, &dynamicv1.ListRequest{Target: cms(""), LabelSelector: "app=x"})
	if err != nil {
		t.Fatal(err)
	}
	if l := decodeJSON(t, list.GetList()); dig(l, "kind") != "ConfigMapList" || len(l["items"].([]any)) != 1 {
		t.Errorf("list: got %s", list.GetList())
	}
	w, err := dyn.Watch(ctx, &dynamicv1.WatchRequest{Target: cms(""), ResourceVersion: "0", LabelSelector: "app=x"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := w.Recv(); err != nil || ev.GetType() != "ADDED" || dig(decodeJSON(t, ev.GetObject()), "metadata", "name") != "c1" {
		t.Errorf("watch: got %v %v", ev, err)
	}

	// RBAC on the built-in resource, as on its typed service.
	_, err = dyn.Get(as(t, "nobody"), &dynamicv1.GetRequest{Target: cms("c1")})
	wantReason(t, err, apierrors.ReasonForbidden)

	// A Deployment's scale.
	deps := &dynamicv1.Target{Group: "apps", Version: "v1", Resource: "deployments", Namespace: "default"}
	if _, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: deps, Object: []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},
		"spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"nginx"}]}}}}`)}); err != nil {
		t.Fatal(err)
	}
	deps.Name = "web"
	sc, err := dyn.GetScale(ctx, &dynamicv1.GetScaleRequest{Target: deps})
	if err != nil || sc.GetScale().GetSpec().GetReplicas() != 2 {
		t.Errorf("scale: got %v, %v", sc, err)
	}
	// A version the kind is not served at is NotFound.
	_, err = dyn.Get(ctx, &dynamicv1.GetRequest{Target: &dynamicv1.Target{Group: "apps", Version: "v1beta1", Resource: "deployments", Namespace: "default", Name: "web"}})
	wantReason(t, err, apierrors.ReasonNotFound)

	if _, err := dyn.Delete(ctx, &dynamicv1.DeleteRequest{Target: cms("c1")}); err != nil {
		t.Fatal(err)
	}
	_, err = dyn.Get(ctx, &dynamicv1.GetRequest{Target: cms("c1")})
	wantReason(t, err, apierrors.ReasonNotFound)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
