// This file holds the resource quota controller's test with a custom
// resource: a quota on count/widgets.example.com is charged by admission,
// keeps its count when recounted (the controller lists the custom objects),
// and gets a deleted object's count back at once (it watches them).
package controllers_test

import (
	"fmt"
	"testing"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

func TestResourceQuotaCustomResources(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.Controllers = []string{controllers.CRD, controllers.ResourceQuota}
	})
	crds := client.Must[*apiextensionsv1.CustomResourceDefinition](c.conn)
	if _, err := crds.Create(c.ctx, testCRD("widgets.example.com", "widgets", "Widget")); err != nil {
		t.Fatal(err)
	}
	const ns = "crquota"
	c.namespace(t, ns)
	dyn := dynamicv1.NewResourceServiceClient(c.conn)
	target := &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "widgets", Namespace: ns}
	widget := func(name string) []byte {
		return []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"` + name + `"}}`)
	}
	testutil.EventuallyWithin(t, waitLimit, "the first widget", func() (bool, string) {
		_, err := dyn.Create(c.ctx, &dynamicv1.CreateRequest{Target: target, Object: widget("w0")})
		return err == nil, fmt.Sprint(err)
	})
	quotas := client.Must[*corev1.ResourceQuota](c.conn)
	if _, err := quotas.Create(c.ctx, &corev1.ResourceQuota{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "q"},
		Spec: &corev1.ResourceQuotaSpec{Hard: map[string]string{"count/widgets.example.com": "2"}}}); err != nil {
		t.Fatal(err)
	}
	used := func(want string) func() (bool, string) {
		return func() (bool, string) {
			q, err := quotas.Get(c.ctx, ns, "q")
			if err != nil {
				return false, err.Error()
			}
			return q.GetStatus().GetUsed()["count/widgets.example.com"] == want, fmt.Sprint(q.GetStatus())
		}
	}
	// Counted by the controller from the objects there before the quota.
	testutil.EventuallyWithin(t, waitLimit, "the existing widget counted", used("1"))
	if _, err := dyn.Create(c.ctx, &dynamicv1.CreateRequest{Target: target, Object: widget("w1")}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "the second widget charged", used("2"))
	_, err := dyn.Create(c.ctx, &dynamicv1.CreateRequest{Target: target, Object: widget("w2")})
	if se := apierrors.FromError(err); se == nil || se.Reason != apierrors.ReasonForbidden {
		t.Fatalf("third widget: got %v, want the quota's Forbidden", err)
	}
	// A recount (the quota's spec changed) keeps the custom objects' count.
	q, err := quotas.Get(c.ctx, ns, "q")
	if err != nil {
		t.Fatal(err)
	}
	q.Spec.Hard["count/widgets.example.com"] = "3"
	if _, err := quotas.Update(c.ctx, q); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "the recount at the new hard", func() (bool, string) {
		q, err := quotas.Get(c.ctx, ns, "q")
		if err != nil {
			return false, err.Error()
		}
		st := q.GetStatus()
		return st.GetHard()["count/widgets.example.com"] == "3" && st.GetUsed()["count/widgets.example.com"] == "2", fmt.Sprint(st)
	})
	// A deleted widget's count comes back without waiting for the resync.
	del := &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "widgets", Namespace: ns, Name: "w0"}
	if _, err := dyn.Delete(c.ctx, &dynamicv1.DeleteRequest{Target: del}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "the deleted widget given back", used("1"))
}
