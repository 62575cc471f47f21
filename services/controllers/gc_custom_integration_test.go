// This file holds the garbage collector's test with custom resources: a
// custom owner's pod and config map collected once the owner goes, a custom dependent of
// a custom owner deleted in the foreground, and one orphaned, each as
// Kubernetes' garbage collector does for every resource it discovers.
package controllers_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

func TestGarbageCollectorCustomResources(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.Controllers = []string{controllers.CRD, controllers.GarbageCollector}
		cfg.GCCustomResync = 100 * time.Millisecond
	})
	crds := client.Must[*apiextensionsv1.CustomResourceDefinition](c.conn)
	if _, err := crds.Create(c.ctx, testCRD("widgets.example.com", "widgets", "Widget")); err != nil {
		t.Fatal(err)
	}
	const ns = "crgc"
	c.namespace(t, ns)
	dyn := dynamicv1.NewResourceServiceClient(c.conn)
	target := func(name string) *dynamicv1.Target {
		return &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "widgets", Namespace: ns, Name: name}
	}
	uidOf := func(b []byte) string {
		var o struct {
			Metadata struct {
				UID string `json:"uid"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatal(err)
		}
		return o.Metadata.UID
	}
	create := func(name, ownerName, ownerUID string) string {
		t.Helper()
		refs := ""
		if ownerUID != "" {
			refs = fmt.Sprintf(`,"ownerReferences":[{"apiVersion":"example.com/v1","kind":"Widget","name":%q,"uid":%q,"blockOwnerDeletion":true}]`, ownerName, ownerUID)
		}
		obj := fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":%q%s}}`, name, refs)
		var out []byte
		testutil.EventuallyWithin(t, waitLimit, "widget "+name+" created", func() (bool, string) {
			resp, err := dyn.Create(c.ctx, &dynamicv1.CreateRequest{Target: &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "widgets", Namespace: ns}, Object: []byte(obj)})
			out = resp.GetObject()
			return err == nil, fmt.Sprint(err)
		})
		return uidOf(out)
	}
	gone := func(name string) func() (bool, string) {
		return func() (bool, string) {
			_, err := dyn.Get(c.ctx, &dynamicv1.GetRequest{Target: target(name)})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		}
	}
	del := func(name, policy string) {
		t.Helper()
		if _, err := dyn.Delete(c.ctx, &dynamicv1.DeleteRequest{Target: target(name), PropagationPolicy: policy}); err != nil {
			t.Fatal(err)
		}
	}

	// A pod owned by a custom object goes with it.
	owner := create("owner", "", "")
	pod := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "owned",
		OwnerReferences: []*metav1.OwnerReference{{ApiVersion: "example.com/v1", Kind: "Widget", Name: "owner", Uid: owner}}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "example.com/unresolvable"}}}}
	if _, err := c.pods.Create(c.ctx, pod); err != nil {
		t.Fatal(err)
	}
	// So is a ConfigMap (a kind the collector caches as metadata only).
	cms := client.Must[*corev1.ConfigMap](c.conn)
	if _, err := cms.Create(c.ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "owned",
		OwnerReferences: []*metav1.OwnerReference{{ApiVersion: "example.com/v1", Kind: "Widget", Name: "owner", Uid: owner}}}}); err != nil {
		t.Fatal(err)
	}
	del("owner", "Background")
	testutil.EventuallyWithin(t, waitLimit, "the custom owner's pod collected", func() (bool, string) {
		_, err := c.pods.Get(c.ctx, ns, "owned")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	testutil.EventuallyWithin(t, waitLimit, "the custom owner's config map collected", func() (bool, string) {
		_, err := cms.Get(c.ctx, ns, "owned")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	// Foreground: the custom dependent goes first, then the owner.
	parent := create("parent", "", "")
	create("child", "parent", parent)
	del("parent", "Foreground")
	testutil.EventuallyWithin(t, waitLimit, "the child deleted in the foreground", gone("child"))
	testutil.EventuallyWithin(t, waitLimit, "the parent deleted after its child", gone("parent"))

	// Orphan: the dependent stays, without its reference.
	parent = create("parent2", "", "")
	create("child2", "parent2", parent)
	del("parent2", "Orphan")
	testutil.EventuallyWithin(t, waitLimit, "the orphaning owner gone", gone("parent2"))
	resp, err := dyn.Get(c.ctx, &dynamicv1.GetRequest{Target: target("child2")})
	if err != nil {
		t.Fatalf("the orphan: %v", err)
	}
	var child struct {
		Metadata struct {
			OwnerReferences []any `json:"ownerReferences"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(resp.GetObject(), &child); err != nil {
		t.Fatal(err)
	}
	if len(child.Metadata.OwnerReferences) != 0 {
		t.Errorf("the orphan's owner references: got %v, want none", child.Metadata.OwnerReferences)
	}
}
