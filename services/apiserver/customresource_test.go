// This file holds the API service's tests of custom resources through the
// generic service: served once the CRD's names are accepted and no longer
// once it goes, stored as JSON under kube-apiserver's keys, pruned,
// defaulted and validated from the schema with Kubernetes' field paths and
// messages, the status subresource and generation, lists, watches,
// finalizers, a plural that is also a built-in's, CEL rules, and defaults
// applied to what is read back.
package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/apierrors"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

const gadgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [color]
            properties:
              color: {type: string, enum: [red, blue]}
              size: {type: integer, default: 3, maximum: 10}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status:
            type: object
            properties:
              ready: {type: boolean}
`

// establishCRD creates a CRD and accepts its names as the crd controller
// would, then waits (a bounded number of tries) until the service serves
// its resource.
func establishCRD(t *testing.T, e *env, doc string, probe *dynamicv1.Target) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	ctx := admin(t)
	crds := apiextensionsv1.NewCustomResourceDefinitionServiceClient(e.conn)
	cr, err := crds.CreateCustomResourceDefinition(ctx, &apiextensionsv1.CreateCustomResourceDefinitionRequest{CustomResourceDefinition: crdFromYAML(t, doc)})
	if err != nil {
		t.Fatal(err)
	}
	crd := cr.GetCustomResourceDefinition()
	crd.Status.AcceptedNames = crd.GetSpec().GetNames()
	crd.Status.Conditions = []*apiextensionsv1.CustomResourceDefinitionCondition{{Type: "NamesAccepted", Status: "True", Reason: "NoConflicts"}}
	up, err := crds.UpdateCustomResourceDefinitionStatus(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionStatusRequest{Name: crd.GetMetadata().GetName(), CustomResourceDefinition: crd})
	if err != nil {
		t.Fatal(err)
	}
	waitServed(t, e, probe, true)
	return up.GetCustomResourceDefinition()
}

// waitServed waits until a list of probe's resource succeeds (served) or
// answers NotFound (not served).
func waitServed(t *testing.T, e *env, probe *dynamicv1.Target, served bool) {
	t.Helper()
	dyn := dynamicv1.NewResourceServiceClient(e.conn)
	for range 400 {
		_, err := dyn.List(admin(t), &dynamicv1.ListRequest{Target: probe})
		if (err == nil) == served {
			if !served && apierrors.FromError(err).Reason != apierrors.ReasonNotFound {
				t.Fatalf("got %v, want NotFound", err)
			}
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("resource %v: served is not %v after 400 tries", probe, served)
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("response %s: %v", b, err)
	}
	return m
}

// dig returns the value at path in a JSON document.
func dig(doc map[string]any, path ...string) any {
	var v any = doc
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func gadgets(ns, name string) *dynamicv1.Target {
	return &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "gadgets", Namespace: ns, Name: name}
}

func TestCustomResourceCRUD(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dyn := dynamicv1.NewResourceServiceClient(e.conn)

	// Not served before its CRD exists.
	_, err := dyn.Get(ctx, &dynamicv1.GetRequest{Target: gadgets("default", "g1")})
	wantReason(t, err, apierrors.ReasonNotFound)
	establishCRD(t, e, gadgetCRD, gadgets("default", ""))

	// Create: unknown fields pruned (with a warning each), defaults
	// applied, preserve-unknown-fields kept, status dropped.
	var hdr metadata.MD
	cr, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgets("default", ""), Object: []byte(`{
		"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g1","labels":{"app":"x"}},
		"spec":{"color":"red","bogus":1,"extra":{"anything":{"goes":true}}},
		"status":{"ready":true},"topLevel":"x"}`)}, grpc.Header(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	g := decodeJSON(t, cr.GetObject())
	if got := dig(g, "spec", "size"); got != float64(3) {
		t.Errorf("spec.size: got %v, want the default 3", got)
	}
	if got := dig(g, "spec", "bogus"); got != nil {
		t.Errorf("spec.bogus: got %v, want it pruned", got)
	}
	if got := dig(g, "spec", "extra", "anything", "goes"); got != true {
		t.Errorf("spec.extra: got %v, want preserved", dig(g, "spec", "extra"))
	}
	if got := dig(g, "status"); got != nil {
		t.Errorf("status: got %v, want none (status subresource)", got)
	}
	if got, want := hdr.Get(dynamicv1.WarningHeader), []string{`unknown field "spec.bogus"`, `unknown field "topLevel"`}; !slices.Equal(got, want) {
		t.Errorf("warnings: got %q, want %q", got, want)
	}
	if got := dig(g, "metadata", "generation"); got != float64(1) {
		t.Errorf("generation: got %v, want 1", got)
	}
	rv := dig(g, "metadata", "resourceVersion").(string)

	// Stored as JSON under kube-apiserver's key.
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.eps})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	kv, err := cli.Get(context.Background(), "/registry/example.com/gadgets/default/g1")
	if err != nil || len(kv.Kvs) != 1 {
		t.Fatalf("stored object: got %v, %v; want one key", kv, err)
	}
	stored := decodeJSON(t, kv.Kvs[0].Value)
	if dig(stored, "kind") != "Gadget" || dig(stored, "spec", "color") != "red" || dig(stored, "metadata", "resourceVersion") != nil {
		t.Errorf("stored JSON: got %s", kv.Kvs[0].Value)
	}

	// Strict refuses unknown fields.
	_, err = dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgets("default", ""), Options: &dynamicv1.WriteOptions{FieldValidation: "Strict"},
		Object: []byte(`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g2"},"spec":{"color":"red","bogus":1}}`)})
	se := wantReason(t, err, apierrors.ReasonBadRequest)
	if want := `Gadget in version "v1" cannot be handled as a Gadget: strict decoding error: unknown field "spec.bogus"`; se.Message != want {
		t.Errorf("strict: got %q, want %q", se.Message, want)
	}

	// Update: a spec change bumps generation; status stays the server's.
	up, err := dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: gadgets("default", "g1"), Object: []byte(`{
		"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g1","labels":{"app":"x"},"resourceVersion":"` + rv + `"},
		"spec":{"color":"blue"},"status":{"ready":true}}`)})
	if err != nil {
		t.Fatal(err)
	}
	g = decodeJSON(t, up.GetObject())
	if dig(g, "metadata", "generation") != float64(2) || dig(g, "spec", "color") != "blue" || dig(g, "status") != nil {
		t.Errorf("update: got %s, want generation 2, color blue, no status", up.GetObject())
	}
	// A stale resourceVersion conflicts.
	_, err = dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: gadgets("default", "g1"), Object: []byte(`{
		"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g1","resourceVersion":"` + rv + `"},"spec":{"color":"red"}}`)})
	wantReason(t, err, apierrors.ReasonConflict)

	// Status: written through the subresource only, generation unchanged.
	st, err := dyn.UpdateStatus(ctx, &dynamicv1.UpdateStatusRequest{Target: gadgets("default", "g1"), Object: []byte(`{
		"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g1"},"spec":{"color":"red"},"status":{"ready":true}}`)})
	if err != nil {
		t.Fatal(err)
	}
	g = decodeJSON(t, st.GetObject())
	if dig(g, "status", "ready") != true || dig(g, "spec", "color") != "blue" || dig(g, "metadata", "generation") != float64(2) {
		t.Errorf("status write: got %s, want ready, spec unchanged, generation 2", st.GetObject())
	}

	// List with a label selector, as <Kind>List.
	if _, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgets("default", ""),
		Object: []byte(`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g3"},"spec":{"color":"blue"}}`)}); err != nil {
		t.Fatal(err)
	}
	l, err := dyn.List(ctx, &dynamicv1.ListRequest{Target: gadgets("default", ""), LabelSelector: "app=x"})
	if err != nil {
		t.Fatal(err)
	}
	list := decodeJSON(t, l.GetList())
	items, _ := list["items"].([]any)
	if list["kind"] != "GadgetList" || list["apiVersion"] != "example.com/v1" || len(items) != 1 || dig(items[0].(map[string]any), "metadata", "name") != "g1" {
		t.Errorf("list: got %s, want GadgetList with g1 only", l.GetList())
	}
	if dig(list, "metadata", "resourceVersion") == nil {
		t.Errorf("list: got %s, want metadata.resourceVersion", l.GetList())
	}
	// Paged.
	l, err = dyn.List(ctx, &dynamicv1.ListRequest{Target: gadgets("", ""), Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	list = decodeJSON(t, l.GetList())
	if items, _ := list["items"].([]any); len(items) != 1 || dig(list, "metadata", "continue") == nil {
		t.Errorf("paged list: got %s, want one item and a continue token", l.GetList())
	}

	// Watch from the list's resourceVersion sees a deletion held by a
	// finalizer, then the deletion itself.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := dyn.Watch(wctx, &dynamicv1.WatchRequest{Target: gadgets("default", ""), ResourceVersion: dig(list, "metadata", "resourceVersion").(string)})
	if err != nil {
		t.Fatal(err)
	}
	up, err = dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: gadgets("default", "g3"), Object: []byte(`{
		"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g3","finalizers":["example.com/hold"]},"spec":{"color":"blue"}}`)})
	if err == nil {
		t.Fatalf("update without resourceVersion: got %s, want Invalid", up.GetObject())
	}
	wantReason(t, err, apierrors.ReasonInvalid)
	get, err := dyn.Get(ctx, &dynamicv1.GetRequest{Target: gadgets("default", "g3")})
	if err != nil {
		t.Fatal(err)
	}
	g = decodeJSON(t, get.GetObject())
	g["metadata"].(map[string]any)["finalizers"] = []string{"example.com/hold"}
	b, _ := json.Marshal(g)
	if _, err := dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: gadgets("default", "g3"), Object: b}); err != nil {
		t.Fatal(err)
	}
	del, err := dyn.Delete(ctx, &dynamicv1.DeleteRequest{Target: gadgets("default", "g3")})
	if err != nil {
		t.Fatal(err)
	}
	g = decodeJSON(t, del.GetObject())
	if dig(g, "metadata", "deletionTimestamp") == nil {
		t.Errorf("delete held by a finalizer: got %s, want deletionTimestamp", del.GetObject())
	}
	delete(g["metadata"].(map[string]any), "finalizers")
	b, _ = json.Marshal(g)
	if _, err := dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: gadgets("default", "g3"), Object: b}); err != nil {
		t.Fatal(err)
	}
	var types []string
	for len(types) < 3 {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("watch: %v after %v", err, types)
		}
		obj := decodeJSON(t, ev.GetObject())
		if dig(obj, "metadata", "name") != "g3" {
			continue
		}
		types = append(types, ev.GetType())
	}
	if want := []string{"MODIFIED", "MODIFIED", "DELETED"}; !slices.Equal(types, want) {
		t.Errorf("watch events of g3: got %v, want %v", types, want)
	}
}

func TestCustomResourceValidation(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dyn := dynamicv1.NewResourceServiceClient(e.conn)
	establishCRD(t, e, gadgetCRD, gadgets("default", ""))

	tests := []struct {
		name   string
		body   string
		causes []apierrors.Cause
	}{{
		name: "wrong types and values",
		body: `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"bad"},"spec":{"color":"green","size":"big"}}`,
		causes: []apierrors.Cause{
			{Type: "FieldValueNotSupported", Field: "spec.color", Message: `Unsupported value: "green": supported values: "red", "blue"`},
			{Type: "FieldValueTypeInvalid", Field: "spec.size", Message: `Invalid value: "string": spec.size in body must be of type integer: "string"`},
		},
	}, {
		name: "required and maximum",
		body: `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"bad"},"spec":{"size":11}}`,
		causes: []apierrors.Cause{
			{Type: "FieldValueInvalid", Field: "spec.size", Message: `Invalid value: 11: spec.size in body should be less than or equal to 10`},
			{Type: "FieldValueRequired", Field: "spec.color", Message: `Required value`},
		},
	}, {
		name: "metadata name",
		body: `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"Bad_Name"},"spec":{"color":"red"}}`,
		causes: []apierrors.Cause{
			{Type: "FieldValueInvalid", Field: "metadata.name", Message: `Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		},
	}, {
		name: "kind",
		body: `{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"bad"},"spec":{"color":"red"}}`,
		causes: []apierrors.Cause{
			{Type: "FieldValueInvalid", Field: "kind", Message: `Invalid value: "Gizmo": must be Gadget`},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgets("default", ""), Object: []byte(tc.body)})
			se := wantReason(t, err, apierrors.ReasonInvalid)
			if want := `Gadget.example.com "` + se.Name + `" is invalid: `; se.Name == "" || !strings.HasPrefix(se.Message, want) {
				t.Errorf("message: got %q, want it to start with %q", se.Message, want)
			}
			if se.Kind != "Gadget" || se.Group != "example.com" {
				t.Errorf("details: got kind %q group %q, want Gadget, example.com", se.Kind, se.Group)
			}
			// The schema validator's order is not Kubernetes' contract:
			// compare by field.
			byField := func(a, b apierrors.Cause) int { return strings.Compare(a.Field, b.Field) }
			slices.SortFunc(se.Causes, byField)
			slices.SortFunc(tc.causes, byField)
			if !slices.Equal(se.Causes, tc.causes) {
				t.Errorf("causes:\ngot  %+v\nwant %+v", se.Causes, tc.causes)
			}
		})
	}
}

const builtinNameCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pods.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {plural: pods, kind: Pod}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// A custom resource whose plural is a built-in's is its own resource, kept
// under its group's keys; the built-in is untouched. Once its CRD goes it
// is not served.
func TestCustomResourceBuiltinPluralAndCRDDeletion(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dyn := dynamicv1.NewResourceServiceClient(e.conn)
	target := &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "pods"}
	crd := establishCRD(t, e, builtinNameCRD, target)

	cr, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: target,
		Object: []byte(`{"apiVersion":"example.com/v1","kind":"Pod","metadata":{"name":"p1","namespace":"ignored"},"anything":{"x":1},"status":{"y":2}}`)})
	if err != nil {
		t.Fatal(err)
	}
	g := decodeJSON(t, cr.GetObject())
	if dig(g, "metadata", "namespace") != nil || dig(g, "anything", "x") != float64(1) || dig(g, "status", "y") != float64(2) {
		t.Errorf("cluster-scoped, preserved: got %s", cr.GetObject())
	}
	mustCreatePod(t, e, testPod("default", "p1"))
	pods, err := e.pods.ListPods(ctx, &corev1.ListPodsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(pods.GetList().GetItems()); n != 1 {
		t.Errorf("core pods: got %d, want 1", n)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.eps})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if kv, err := cli.Get(context.Background(), "/registry/example.com/pods/p1"); err != nil || len(kv.Kvs) != 1 {
		t.Errorf("stored custom pod: got %v, %v, want one key", kv, err)
	}

	// Deleting the CRD: its finalizer holds it (the crd controller would
	// delete the custom resources, then remove it); once it is gone, the
	// resource is not served.
	crds := apiextensionsv1.NewCustomResourceDefinitionServiceClient(e.conn)
	del, err := crds.DeleteCustomResourceDefinition(ctx, &apiextensionsv1.DeleteCustomResourceDefinitionRequest{Name: crd.GetMetadata().GetName()})
	if err != nil {
		t.Fatal(err)
	}
	// While terminating, creates are refused.
	for range 400 {
		_, err = dyn.Create(ctx, &dynamicv1.CreateRequest{Target: target, Object: []byte(`{"apiVersion":"example.com/v1","kind":"Pod","metadata":{"name":"p2"}}`)})
		if err != nil {
			break
		}
		if _, err := dyn.Delete(ctx, &dynamicv1.DeleteRequest{Target: &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "pods", Name: "p2"}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if se := wantReason(t, err, apierrors.ReasonMethodNotAllowed); se.Message != "create not allowed while custom resource definition is terminating" {
		t.Errorf("create while terminating: got %q", se.Message)
	}
	c := del.GetCustomResourceDefinition()
	c.Metadata.Finalizers = nil
	if _, err := crds.UpdateCustomResourceDefinition(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionRequest{Name: c.GetMetadata().GetName(), CustomResourceDefinition: c}); err != nil {
		t.Fatal(err)
	}
	waitServed(t, e, target, false)
	_, err = dyn.Get(ctx, &dynamicv1.GetRequest{Target: &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "pods", Name: "p1"}})
	wantReason(t, err, apierrors.ReasonNotFound)
}

const ruledCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: rules.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: rules, kind: Rule}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - {rule: "self.replicas <= 10", message: at most ten replicas}
            - {rule: "self.color == oldSelf.color", message: color is immutable}
            properties:
              replicas: {type: integer}
              color: {type: string, enum: [red, blue]}
`

// x-kubernetes-validations: CEL rules, transition rules (oldSelf) on
// update only, and the rules skipped when the schema already failed.
func TestCustomResourceCELRules(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dyn := dynamicv1.NewResourceServiceClient(e.conn)
	target := &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "rules", Namespace: "default"}
	establishCRD(t, e, ruledCRD, target)
	create := func(body string) error {
		_, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: target, Object: []byte(body)})
		return err
	}

	err := create(`{"apiVersion":"example.com/v1","kind":"Rule","metadata":{"name":"r1"},"spec":{"replicas":11,"color":"red"}}`)
	se := wantReason(t, err, apierrors.ReasonInvalid)
	if want := []apierrors.Cause{{Type: "FieldValueInvalid", Field: "spec", Message: `Invalid value: "object": at most ten replicas`}}; !slices.Equal(se.Causes, want) {
		t.Errorf("rule: got %+v, want %+v", se.Causes, want)
	}
	err = create(`{"apiVersion":"example.com/v1","kind":"Rule","metadata":{"name":"r1"},"spec":{"replicas":11,"color":"green"}}`)
	se = wantReason(t, err, apierrors.ReasonInvalid)
	if n := len(se.Causes); n != 2 || se.Causes[1].Message != `Invalid value: "null": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation` {
		t.Errorf("rules skipped after a schema error: got %+v", se.Causes)
	}

	if err := create(`{"apiVersion":"example.com/v1","kind":"Rule","metadata":{"name":"r1"},"spec":{"replicas":1,"color":"red"}}`); err != nil {
		t.Fatalf("valid object: %v", err)
	}
	get, err := dyn.Get(ctx, &dynamicv1.GetRequest{Target: &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "rules", Namespace: "default", Name: "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	doc := decodeJSON(t, get.GetObject())
	doc["spec"].(map[string]any)["color"] = "blue"
	b, _ := json.Marshal(doc)
	_, err = dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "rules", Namespace: "default", Name: "r1"}, Object: b})
	se = wantReason(t, err, apierrors.ReasonInvalid)
	if want := []apierrors.Cause{{Type: "FieldValueInvalid", Field: "spec", Message: `Invalid value: "object": color is immutable`}}; !slices.Equal(se.Causes, want) {
		t.Errorf("transition rule: got %+v, want %+v", se.Causes, want)
	}
}

// A default the CRD gains later shows on objects written before it, as
// kube-apiserver defaults what it reads from the store.
func TestCustomResourceDefaultOnRead(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dyn := dynamicv1.NewResourceServiceClient(e.conn)
	crd := establishCRD(t, e, gadgetCRD, gadgets("default", ""))
	if _, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgets("default", ""),
		Object: []byte(`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g1"},"spec":{"color":"red"}}`)}); err != nil {
		t.Fatal(err)
	}
	crds := apiextensionsv1.NewCustomResourceDefinitionServiceClient(e.conn)
	withShape := crdFromYAML(t, strings.Replace(gadgetCRD, "              size: {type: integer, default: 3, maximum: 10}\n",
		"              size: {type: integer, default: 3, maximum: 10}\n              shape: {type: string, default: round}\n", 1))
	withShape.Metadata = crd.GetMetadata()
	withShape.Status = crd.GetStatus()
	if _, err := crds.UpdateCustomResourceDefinition(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionRequest{Name: "gadgets.example.com", CustomResourceDefinition: withShape}); err != nil {
		t.Fatal(err)
	}
	var got any
	for range 400 {
		g, err := dyn.Get(ctx, &dynamicv1.GetRequest{Target: gadgets("default", "g1")})
		if err != nil {
			t.Fatal(err)
		}
		if got = dig(decodeJSON(t, g.GetObject()), "spec", "shape"); got == "round" {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Errorf("spec.shape after the CRD gained its default: got %v, want round", got)
}

// The CRD's selectableFields select in lists (and watches); other fields
// are refused, as on Kubernetes.
func TestCustomResourceSelectableFields(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dyn := dynamicv1.NewResourceServiceClient(e.conn)
	doc := strings.Replace(gadgetCRD, "    subresources: {status: {}}\n", "    subresources: {status: {}}\n    selectableFields: [{jsonPath: .spec.color}]\n", 1)
	establishCRD(t, e, doc, gadgets("default", ""))
	for _, g := range []struct{ name, color string }{{"g1", "red"}, {"g2", "blue"}, {"g3", "red"}} {
		if _, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgets("default", ""),
			Object: []byte(`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"` + g.name + `"},"spec":{"color":"` + g.color + `"}}`)}); err != nil {
			t.Fatal(err)
		}
	}
	names := func(sel, rv string) []string {
		t.Helper()
		l, err := dyn.List(ctx, &dynamicv1.ListRequest{Target: gadgets("default", ""), FieldSelector: sel, ResourceVersion: rv})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range decodeJSON(t, l.GetList())["items"].([]any) {
			out = append(out, dig(it.(map[string]any), "metadata", "name").(string))
		}
		return out
	}
	// resourceVersion "0" may be served from the watch cache, which (as in
	// Kubernetes) may trail the writes just made: wait until it has them.
	for i := 0; len(names("", "0")) < 3; i++ {
		if i == 400 {
			t.Fatal("the watch cache does not have the 3 gadgets after 400 tries")
		}
		time.Sleep(25 * time.Millisecond)
	}
	for _, rv := range []string{"", "0"} { // the store, the watch cache
		if got, want := names("spec.color=red", rv), []string{"g1", "g3"}; !slices.Equal(got, want) {
			t.Errorf("spec.color=red (resourceVersion %q): got %v, want %v", rv, got, want)
		}
		if got, want := names("spec.color!=red,metadata.name!=g9", rv), []string{"g2"}; !slices.Equal(got, want) {
			t.Errorf("spec.color!=red (resourceVersion %q): got %v, want %v", rv, got, want)
		}
	}
	_, err := dyn.List(ctx, &dynamicv1.ListRequest{Target: gadgets("default", ""), FieldSelector: "spec.size=3"})
	if se := wantReason(t, err, apierrors.ReasonBadRequest); se.Message != "field label not supported: spec.size" {
		t.Errorf("unselectable field: got %q", se.Message)
	}
}

// TestCustomResourceOnLaggingReplica: a custom resource that one replica
// serves is served by another at once, even if that one's registry has
// not caught up with the CRD yet: it finds the CRD servable in the store
// and waits for its registry instead of answering 404 (clients that saw
// the resource in one replica's discovery create through the next).
func TestCustomResourceOnLaggingReplica(t *testing.T) {
	a := newEnv(t, nil)
	b := newEnvOn(t, a.eps, nil)
	ctx := admin(t)
	crds := apiextensionsv1.NewCustomResourceDefinitionServiceClient(a.conn)
	cr, err := crds.CreateCustomResourceDefinition(ctx, &apiextensionsv1.CreateCustomResourceDefinitionRequest{CustomResourceDefinition: crdFromYAML(t, gadgetCRD)})
	if err != nil {
		t.Fatal(err)
	}
	crd := cr.GetCustomResourceDefinition()
	crd.Status.AcceptedNames = crd.GetSpec().GetNames()
	crd.Status.Conditions = []*apiextensionsv1.CustomResourceDefinitionCondition{{Type: "NamesAccepted", Status: "True", Reason: "NoConflicts"}}
	if _, err := crds.UpdateCustomResourceDefinitionStatus(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionStatusRequest{Name: crd.GetMetadata().GetName(), CustomResourceDefinition: crd}); err != nil {
		t.Fatal(err)
	}
	// At once, through the other replica.
	_, err = dynamicv1.NewResourceServiceClient(b.conn).Create(ctx, &dynamicv1.CreateRequest{Target: gadgets("default", ""),
		Object: []byte(`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g0"},"spec":{"color":"red"}}`)})
	if err != nil {
		t.Fatalf("create through the other replica right after the CRD was accepted: %v", err)
	}
	// A second CRD, its object written and deleted through one replica
	// and watched from its resourceVersion through the other at once.
	wcr, err := crds.CreateCustomResourceDefinition(ctx, &apiextensionsv1.CreateCustomResourceDefinitionRequest{
		CustomResourceDefinition: crdFromYAML(t, strings.NewReplacer("gadgets", "widgets", "Gadget", "Widget").Replace(gadgetCRD))})
	if err != nil {
		t.Fatal(err)
	}
	wcrd := wcr.GetCustomResourceDefinition()
	wcrd.Status.AcceptedNames = wcrd.GetSpec().GetNames()
	wcrd.Status.Conditions = []*apiextensionsv1.CustomResourceDefinitionCondition{{Type: "NamesAccepted", Status: "True", Reason: "NoConflicts"}}
	if _, err := crds.UpdateCustomResourceDefinitionStatus(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionStatusRequest{Name: wcrd.GetMetadata().GetName(), CustomResourceDefinition: wcrd}); err != nil {
		t.Fatal(err)
	}
	widgets := func(name string) *dynamicv1.Target {
		return &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "widgets", Namespace: "default", Name: name}
	}
	created, err := dynamicv1.NewResourceServiceClient(a.conn).Create(ctx, &dynamicv1.CreateRequest{Target: widgets(""),
		Object: []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1"},"spec":{"color":"red"}}`)})
	if err != nil {
		t.Fatal(err)
	}
	// Deleted through one replica and watched from its resourceVersion
	// through the other (what Kubernetes' CRD test fixture does): the
	// watch cache of a custom resource starts where its CRD became
	// servable, so the delete is in its window, not 410 Gone.
	rv := fmt.Sprint(dig(decodeJSON(t, created.GetObject()), "metadata", "resourceVersion"))
	if _, err := dynamicv1.NewResourceServiceClient(a.conn).Delete(ctx, &dynamicv1.DeleteRequest{Target: widgets("w1")}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := dynamicv1.NewResourceServiceClient(b.conn).Watch(wctx, &dynamicv1.WatchRequest{Target: widgets(""), ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := st.Recv()
	if err != nil {
		t.Fatalf("watch from the create's resourceVersion: %v", err)
	}
	if ev.GetType() != "DELETED" {
		t.Errorf("first event %s %s, want the DELETED of w1", ev.GetType(), ev.GetObject())
	}
	// A resource no CRD serves is still 404, at once.
	_, err = dynamicv1.NewResourceServiceClient(b.conn).List(ctx, &dynamicv1.ListRequest{Target: &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "nothings"}})
	if apierrors.FromError(err).Reason != apierrors.ReasonNotFound {
		t.Errorf("unknown resource: got %v, want NotFound", err)
	}
}
