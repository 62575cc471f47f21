// This file holds the pod garbage collector's test through the controller
// manager on a real in-process API service: run by default, its first pass
// comes at once and force-deletes an unscheduled terminating pod.
package controllers_test

import (
	"fmt"
	"testing"

	"github.com/kplane/kplane/internal/testutil"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

func TestPodGCInManager(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.Controllers = []string{controllers.PodGC}
	})
	// A finalizer keeps the pod readable after its forced deletion.
	p, err := c.pods.Create(c.ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "unscheduled", Finalizers: []string{"example.com/hold"}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "busybox"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.pods.Delete(c.ctx, "default", "unscheduled", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "unscheduled terminating pod marked Failed and force deleted", func() (bool, string) {
		got, err := c.pods.Get(c.ctx, "default", p.GetMetadata().GetName())
		return err == nil && got.GetStatus().GetPhase() == "Failed" && got.GetMetadata().GetDeletionGracePeriodSeconds() == 0,
			fmt.Sprintf("%v %v %v", got.GetMetadata(), got.GetStatus(), err)
	})
	got, err := c.pods.Get(c.ctx, "default", "unscheduled")
	if err != nil {
		t.Fatal(err)
	}
	got.Metadata.Finalizers = nil
	if _, err := c.pods.Update(c.ctx, got); err != nil {
		t.Fatal(err)
	}
}
