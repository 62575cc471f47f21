// This file holds the resource quota controller's test on a real
// in-process API service: a new quota gets its status, admission charges
// it as pods and ConfigMaps are created and refuses what exceeds it with
// Kubernetes' message, and the controller gives usage back when a pod
// finishes or goes and when a ConfigMap goes, but does not recount on its
// own status writes.
package controllers_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

func TestResourceQuotaController(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) { cfg.Controllers = []string{controllers.ResourceQuota} })
	const ns = "quota"
	c.namespace(t, ns)
	quotas := client.Must[*corev1.ResourceQuota](c.conn)
	cms := client.Must[*corev1.ConfigMap](c.conn)
	// Something to count before the quota exists.
	if _, err := cms.Create(c.ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "before"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := quotas.Create(c.ctx, &corev1.ResourceQuota{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "q"},
		Spec: &corev1.ResourceQuotaSpec{Hard: map[string]string{"pods": "2", "configmaps": "2", "requests.cpu": "1", "count/deployments.apps": "1"}}}); err != nil {
		t.Fatal(err)
	}
	status := func(want map[string]string) func() (bool, string) {
		return func() (bool, string) {
			q, err := quotas.Get(c.ctx, ns, "q")
			if err != nil {
				return false, err.Error()
			}
			st := q.GetStatus()
			if len(st.GetHard()) != 4 || st.GetHard()["pods"] != "2" {
				return false, fmt.Sprint(st)
			}
			for k, v := range want {
				if st.GetUsed()[k] != v {
					return false, fmt.Sprint(st)
				}
			}
			return len(st.GetUsed()) == 4, fmt.Sprint(st)
		}
	}
	testutil.EventuallyWithin(t, waitLimit, "the quota's first status", status(map[string]string{"pods": "0", "configmaps": "1", "requests.cpu": "0", "count/deployments.apps": "0"}))

	// The test's stand-in kubelet leaves pods with an "unresolvable" image
	// alone: their phase is the test's to set.
	pod := func(name, cpu string) *corev1.Pod {
		return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: &corev1.PodSpec{Containers: []*corev1.Container{{
			Name: "c", Image: "example.com/unresolvable", Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": cpu}}}}}}
	}
	if _, err := c.pods.Create(c.ctx, pod("a", "400m")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pods.Create(c.ctx, pod("b", "400m")); err != nil {
		t.Fatal(err)
	}
	// Charged by admission with the pods themselves.
	testutil.EventuallyWithin(t, waitLimit, "usage of two pods", status(map[string]string{"pods": "2", "requests.cpu": "800m"}))
	_, err := c.pods.Create(c.ctx, pod("c", "100m"))
	if se := apierrors.FromError(err); se == nil || se.Reason != apierrors.ReasonForbidden ||
		se.Message != `pods "c" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2` {
		t.Fatalf("third pod: got %v, want Kubernetes' exceeded quota refusal", err)
	}

	// A finished pod no longer counts its requests (it still counts as a
	// pod object: count/pods, not pods).
	b, err := c.pods.Get(c.ctx, ns, "b")
	if err != nil {
		t.Fatal(err)
	}
	b.Status.Phase = "Succeeded"
	if _, err := c.pods.UpdateStatus(c.ctx, b); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "a finished pod's usage given back", status(map[string]string{"pods": "1", "requests.cpu": "400m"}))
	if _, err := c.pods.Create(c.ctx, pod("c", "100m")); err != nil {
		t.Fatalf("pod after the release: %v", err)
	}
	// A deleted pod's too.
	if err := c.pods.Delete(c.ctx, ns, "a", client.DeleteOptions{GracePeriodSeconds: proto.Int64(0)}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "a deleted pod's usage given back", status(map[string]string{"pods": "1", "requests.cpu": "100m"}))

	// ConfigMaps: counted, refused over the quota, given back when deleted.
	if _, err := cms.Create(c.ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "second"}}); err != nil {
		t.Fatal(err)
	}
	_, err = cms.Create(c.ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "third"}})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("third configmap: got %v, want Forbidden", err)
	}
	if err := cms.Delete(c.ctx, ns, "before", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "a deleted configmap given back", status(map[string]string{"configmaps": "1"}))
	if _, err := cms.Create(c.ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "third"}}); err != nil {
		t.Fatalf("configmap after the release: %v", err)
	}

	// A status write (admission charging a pod the controller's informer
	// has not seen yet) is not recounted at once: that would give back
	// usage still in use. A second quota, added after it, is counted.
	q, err := quotas.Get(c.ctx, ns, "q")
	if err != nil {
		t.Fatal(err)
	}
	q.Status.Used["pods"] = "2"
	if _, err := quotas.UpdateStatus(c.ctx, q); err != nil {
		t.Fatal(err)
	}
	if _, err := quotas.Create(c.ctx, &corev1.ResourceQuota{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "later"},
		Spec: &corev1.ResourceQuotaSpec{Hard: map[string]string{"pods": "10"}}}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "the second quota's status", func() (bool, string) {
		l, err := quotas.Get(c.ctx, ns, "later")
		if err != nil {
			return false, err.Error()
		}
		return l.GetStatus().GetUsed()["pods"] == "1", fmt.Sprint(l.GetStatus())
	})
	if q, err = quotas.Get(c.ctx, ns, "q"); err != nil {
		t.Fatal(err)
	}
	if u := q.GetStatus().GetUsed()["pods"]; u != "2" {
		t.Errorf("a status write was recounted at once: used pods %s, want the 2 admission wrote", u)
	}

	// A status whose hard no longer says what the spec limits (someone
	// wrote it) is put right at once, not at the next resync.
	if q, err = quotas.Get(c.ctx, ns, "q"); err != nil {
		t.Fatal(err)
	}
	q.Status.Hard["pods"] = "99"
	if _, err := quotas.UpdateStatus(c.ctx, q); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "status.hard reset from the spec", func() (bool, string) {
		q, err := quotas.Get(c.ctx, ns, "q")
		if err != nil {
			return false, err.Error()
		}
		return q.GetStatus().GetHard()["pods"] == "2", fmt.Sprint(q.GetStatus())
	})
}
