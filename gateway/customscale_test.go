// This file holds the test of server-side apply of a custom object's scale
// subresource: the applied Scale is merged into the live one, as for a
// built-in kind's scale, and the object's replicas follow.
package gateway_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
)

const sprocketCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"sprockets.example.com"},
"spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"sprockets","kind":"Sprocket"},
"versions":[{"name":"v1","served":true,"storage":true,
 "subresources":{"status":{},"scale":{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas"}},
 "schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{"replicas":{"type":"integer"}}},"status":{"type":"object","properties":{"replicas":{"type":"integer"}}}}}}}]}}`

func TestCustomScaleServerSideApply(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	gw, err := gateway.New(gateway.Config{Conn: env.Dial(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: apiservertest.AdminToken})
	if err != nil {
		t.Fatal(err)
	}
	rc := cs.Discovery().RESTClient()
	ctx := context.Background()
	if err := rc.Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").SetHeader("Content-Type", "application/json").
		Body([]byte(sprocketCRD)).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	(&kube{t: t, conn: env.Dial(t, apiservertest.AdminToken)}).acceptNames("sprockets.example.com", "example.com", "sprockets")
	const obj = "/apis/example.com/v1/namespaces/default/sprockets"
	if err := rc.Post().AbsPath(obj).SetHeader("Content-Type", "application/json").
		Body([]byte(`{"apiVersion":"example.com/v1","kind":"Sprocket","metadata":{"name":"s1"},"spec":{"replicas":1}}`)).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}

	scale := []byte(`{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"s1","namespace":"default"},"spec":{"replicas":4}}`)
	// An apply needs a field manager, as on Kubernetes.
	err = rc.Patch(types.ApplyPatchType).AbsPath(obj, "s1", "scale").Body(scale).Do(ctx).Error()
	if err == nil || !strings.Contains(err.Error(), "fieldManager: Required value") {
		t.Errorf("apply of the scale without a field manager: got %v", err)
	}
	b, err := rc.Patch(types.ApplyPatchType).AbsPath(obj, "s1", "scale").Param("fieldManager", "autoscaler").Body(scale).DoRaw(ctx)
	if err != nil {
		t.Fatalf("apply of the scale: %v: %s", err, b)
	}
	var sc struct {
		Kind string
		Spec struct{ Replicas int }
	}
	if err := json.Unmarshal(b, &sc); err != nil || sc.Kind != "Scale" || sc.Spec.Replicas != 4 {
		t.Errorf("apply of the scale answered %s, want a Scale of 4 replicas", b)
	}
	b, err = rc.Get().AbsPath(obj, "s1").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Spec     struct{ Replicas int }
		Metadata struct{ Generation int }
	}
	if err := json.Unmarshal(b, &got); err != nil || got.Spec.Replicas != 4 || got.Metadata.Generation != 2 {
		t.Errorf("the sprocket after the applied scale: %s, want 4 replicas at generation 2", b)
	}
}
