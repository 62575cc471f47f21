// This file holds the API service's tests of what a custom resource request
// gets by the version it is made at: each version's own status and scale
// subresources (discovery, status written or kept, generation, the scale's
// paths) and validation by that version's schema.
package apiserver

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

// pumpCRD serves v1 (stored; status and scale on spec.replicas), v1beta1
// (no subresources; spec.size at most 5) and v2 (scale on spec.size, no
// status subresource).
const pumpCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pumps.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: pumps, kind: Pump}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {replicas: {type: integer}, size: {type: integer}}}
          status: {type: object, properties: {replicas: {type: integer}, ready: {type: boolean}}}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {replicas: {type: integer}, size: {type: integer, maximum: 5}}}
          status: {type: object, properties: {replicas: {type: integer}, ready: {type: boolean}}}
  - name: v2
    served: true
    storage: false
    subresources:
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.replicas}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {replicas: {type: integer}, size: {type: integer}}}
          status: {type: object, properties: {replicas: {type: integer}, ready: {type: boolean}}}
`

func pumpsAt(version, name string) *dynamicv1.Target {
	return &dynamicv1.Target{Group: "example.com", Version: version, Resource: "pumps", Namespace: "default", Name: name}
}

func pumpJSON(version, name, rv, rest string) []byte {
	m := fmt.Sprintf(`{"name":%q}`, name)
	if rv != "" {
		m = fmt.Sprintf(`{"name":%q,"resourceVersion":%q}`, name, rv)
	}
	return []byte(fmt.Sprintf(`{"apiVersion":"example.com/%s","kind":"Pump","metadata":%s,%s}`, version, m, rest))
}

func TestCustomResourceSubresourcesPerVersion(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dyn := dynamicv1.NewResourceServiceClient(e.conn)
	establishCRD(t, e, pumpCRD, pumpsAt("v1", ""))
	for _, v := range []string{"v1beta1", "v2"} {
		waitServed(t, e, pumpsAt(v, ""), true)
	}

	// Discovery names each version's own subresources.
	resp, err := dyn.Discover(ctx, &dynamicv1.DiscoverRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range resp.GetResources() {
		if r.GetResource() == "pumps" {
			got[r.GetVersion()] = fmt.Sprintf("status=%v scale=%v", r.GetStatus(), r.GetScale())
		}
	}
	want := map[string]string{"v1": "status=true scale=true", "v1beta1": "status=false scale=false", "v2": "status=false scale=true"}
	for v, w := range want {
		if got[v] != w {
			t.Errorf("Discover %s: got %q, want %q", v, got[v], w)
		}
	}

	// Created at v1, which has the status subresource: the status is
	// dropped. Created at v1beta1, which has none: it is written.
	if _, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: pumpsAt("v1", ""),
		Object: pumpJSON("v1", "p1", "", `"spec":{"replicas":2,"size":3},"status":{"ready":true}`)}); err != nil {
		t.Fatal(err)
	}
	cr, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: pumpsAt("v1beta1", ""),
		Object: pumpJSON("v1beta1", "p2", "", `"spec":{"replicas":2,"size":3},"status":{"ready":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	if g := decodeJSON(t, cr.GetObject()); dig(g, "status", "ready") != true {
		t.Errorf("create at v1beta1: got %s, want status.ready kept", cr.GetObject())
	}
	get, err := dyn.Get(ctx, &dynamicv1.GetRequest{Target: pumpsAt("v1", "p1")})
	if err != nil {
		t.Fatal(err)
	}
	if g := decodeJSON(t, get.GetObject()); dig(g, "status") != nil {
		t.Errorf("create at v1: got %s, want no status", get.GetObject())
	}

	// Validation is by the request version's schema: v1beta1 limits size
	// to 5, v1 does not.
	_, err = dyn.Create(ctx, &dynamicv1.CreateRequest{Target: pumpsAt("v1beta1", ""),
		Object: pumpJSON("v1beta1", "big", "", `"spec":{"size":7}`)})
	se := wantReason(t, err, apierrors.ReasonInvalid)
	if len(se.Causes) != 1 || se.Causes[0].Field != "spec.size" || !strings.Contains(se.Causes[0].Message, "should be less than or equal to 5") {
		t.Errorf("create at v1beta1 with size 7: got %+v", se)
	}
	if _, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: pumpsAt("v1", ""),
		Object: pumpJSON("v1", "big", "", `"spec":{"size":7}`)}); err != nil {
		t.Errorf("create at v1 with size 7: %v", err)
	}
	// An update at v1beta1 of the object v1 accepted is refused as well.
	big, err := dyn.Get(ctx, &dynamicv1.GetRequest{Target: pumpsAt("v1beta1", "big")})
	if err != nil {
		t.Fatal(err)
	}
	bigRV := dig(decodeJSON(t, big.GetObject()), "metadata", "resourceVersion").(string)
	_, err = dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: pumpsAt("v1beta1", "big"),
		Object: pumpJSON("v1beta1", "big", bigRV, `"spec":{"size":8}`)})
	wantReason(t, err, apierrors.ReasonInvalid)

	// An update at v1 keeps the stored status and generation; at v1beta1
	// it writes the status, and the change bumps generation.
	p2 := decodeJSON(t, cr.GetObject())
	rv := dig(p2, "metadata", "resourceVersion").(string)
	up, err := dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: pumpsAt("v1", "p2"),
		Object: pumpJSON("v1", "p2", rv, `"spec":{"replicas":2,"size":3},"status":{"ready":false}`)})
	if err != nil {
		t.Fatal(err)
	}
	g := decodeJSON(t, up.GetObject())
	if dig(g, "status", "ready") != true || dig(g, "metadata", "generation") != float64(1) {
		t.Errorf("update at v1 of the status: got %s, want status kept, generation 1", up.GetObject())
	}
	rv = dig(g, "metadata", "resourceVersion").(string)
	up, err = dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: pumpsAt("v1beta1", "p2"),
		Object: pumpJSON("v1beta1", "p2", rv, `"spec":{"replicas":2,"size":3},"status":{"ready":false}`)})
	if err != nil {
		t.Fatal(err)
	}
	g = decodeJSON(t, up.GetObject())
	if dig(g, "status", "ready") != false || dig(g, "metadata", "generation") != float64(2) {
		t.Errorf("update at v1beta1 of the status: got %s, want status.ready false, generation 2", up.GetObject())
	}

	// The status subresource: served at v1, NotFound at v1beta1 and v2.
	for _, v := range []string{"v1beta1", "v2"} {
		_, err = dyn.UpdateStatus(ctx, &dynamicv1.UpdateStatusRequest{Target: pumpsAt(v, "p2"),
			Object: pumpJSON(v, "p2", "", `"status":{"ready":true}`)})
		wantReason(t, err, apierrors.ReasonNotFound)
	}
	if _, err := dyn.UpdateStatus(ctx, &dynamicv1.UpdateStatusRequest{Target: pumpsAt("v1", "p2"),
		Object: pumpJSON("v1", "p2", "", `"status":{"ready":true,"replicas":1}`)}); err != nil {
		t.Fatal(err)
	}

	// The scale subresource: v1's reads spec.replicas, v2's spec.size,
	// v1beta1 has none.
	_, err = dyn.GetScale(ctx, &dynamicv1.GetScaleRequest{Target: pumpsAt("v1beta1", "p2")})
	wantReason(t, err, apierrors.ReasonNotFound)
	for v, replicas := range map[string]int32{"v1": 2, "v2": 3} {
		sc, err := dyn.GetScale(ctx, &dynamicv1.GetScaleRequest{Target: pumpsAt(v, "p2")})
		if err != nil {
			t.Fatalf("scale at %s: %v", v, err)
		}
		if sc.GetScale().GetSpec().GetReplicas() != replicas || sc.GetScale().GetStatus().GetReplicas() != 1 {
			t.Errorf("scale at %s: got %v, want spec.replicas %d, status.replicas 1", v, sc.GetScale(), replicas)
		}
	}
	if _, err := dyn.UpdateScale(ctx, &dynamicv1.UpdateScaleRequest{Target: pumpsAt("v2", "p2"),
		Scale: &autoscalingv1.Scale{Spec: &autoscalingv1.ScaleSpec{Replicas: 4}}}); err != nil {
		t.Fatal(err)
	}
	get, err = dyn.Get(ctx, &dynamicv1.GetRequest{Target: pumpsAt("v1", "p2")})
	if err != nil {
		t.Fatal(err)
	}
	if g := decodeJSON(t, get.GetObject()); dig(g, "spec", "size") != float64(4) || dig(g, "spec", "replicas") != float64(2) {
		t.Errorf("after scaling to 4 at v2: got %s, want spec.size 4, spec.replicas still 2", get.GetObject())
	}
}
