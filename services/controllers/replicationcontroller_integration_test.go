// This file holds the integration tests of the ReplicationController
// controller against a real in-process API service: scale up and down
// through the scale subresource, status, adoption of a matching orphan,
// release of a relabelled pod, deletion cascading to the pods, and a
// namespace's deletion emptying its RCs.
package controllers_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

func newRC(ns, name string, replicas int32) *corev1.ReplicationController {
	return &corev1.ReplicationController{
		Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: &corev1.ReplicationControllerSpec{
			Replicas: proto.Int32(replicas),
			Template: &corev1.PodTemplateSpec{
				Metadata: &metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:     &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1"}}},
			},
		},
	}
}

// rcSettled reports whether the RC's status shows n ready, available pods
// for its current generation and exactly n live pods carry its label.
func (c *cluster) rcSettled(t *testing.T, rcs *client.Client[*corev1.ReplicationController], ns, name string, n int32) (bool, string) {
	rc, err := rcs.Get(c.ctx, ns, name)
	if err != nil {
		return false, err.Error()
	}
	st := rc.GetStatus()
	pods := c.podsOf(t, ns, name)
	state := fmt.Sprintf("generation %d, status %v, %d pods", rc.GetMetadata().GetGeneration(), st, len(pods))
	ok := st.GetObservedGeneration() == rc.GetMetadata().GetGeneration() && st.GetReplicas() == n && st.GetFullyLabeledReplicas() == n &&
		st.GetReadyReplicas() == n && st.GetAvailableReplicas() == n && len(pods) == int(n)
	return ok, state
}

func controlledBy(p *corev1.Pod, uid string) bool {
	for _, r := range p.GetMetadata().GetOwnerReferences() {
		if r.GetController() && r.GetUid() == uid {
			return r.GetKind() == "ReplicationController" && r.GetApiVersion() == "v1" && r.GetBlockOwnerDeletion()
		}
	}
	return false
}

func TestReplicationControllerLifecycle(t *testing.T) {
	c := startCluster(t)
	const ns = "rcs"
	c.namespace(t, ns)
	rcs := client.Must[*corev1.ReplicationController](c.conn)
	rc, err := rcs.Create(c.ctx, newRC(ns, "web", 2))
	if err != nil {
		t.Fatal(err)
	}
	uid := rc.GetMetadata().GetUid()
	if sel := rc.GetSpec().GetSelector(); len(sel) != 1 || sel["app"] != "web" || rc.GetMetadata().GetLabels()["app"] != "web" {
		t.Fatalf("selector %v, labels %v: want both defaulted to the template's app=web", sel, rc.GetMetadata().GetLabels())
	}
	testutil.EventuallyWithin(t, waitLimit, "2 pods ready", func() (bool, string) { return c.rcSettled(t, rcs, ns, "web", 2) })
	for _, p := range c.podsOf(t, ns, "web") {
		if !controlledBy(p, uid) {
			t.Errorf("pod %s: owners %v, want the RC (v1 ReplicationController) as controller", p.GetMetadata().GetName(), p.GetMetadata().GetOwnerReferences())
		}
	}

	scale := func(t *testing.T, n int32) {
		t.Helper()
		s, err := rcs.GetScale(c.ctx, ns, "web")
		if err != nil {
			t.Fatal(err)
		}
		if s.GetStatus().GetSelector() != "app=web" {
			t.Errorf("scale status.selector %q, want app=web", s.GetStatus().GetSelector())
		}
		s.Spec = &autoscalingv1.ScaleSpec{Replicas: n}
		if _, err := rcs.UpdateScale(c.ctx, ns, "web", s); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWithin(t, waitLimit, fmt.Sprintf("%d pods ready", n), func() (bool, string) { return c.rcSettled(t, rcs, ns, "web", n) })
	}
	t.Run("scale up to 5 and down to 1 through the scale subresource", func(t *testing.T) {
		scale(t, 5)
		scale(t, 1)
	})

	t.Run("adopts a matching orphan and deletes the surplus", func(t *testing.T) {
		orphan := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "orphan", Labels: map[string]string{"app": "web"}},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1"}}}}
		if _, err := c.pods.Create(c.ctx, orphan); err != nil {
			t.Fatal(err)
		}
		// Adopted (ownerReference to the RC) and, one pod too many, one of
		// the two deleted: the orphan, not yet ready, goes first unless the
		// kubelet made it ready already; either way one pod remains, the RC's.
		testutil.EventuallyWithin(t, waitLimit, "orphan adopted and 1 pod left", func() (bool, string) {
			ok, state := c.rcSettled(t, rcs, ns, "web", 1)
			if p, err := c.pods.Get(c.ctx, ns, "orphan"); err == nil && p.GetMetadata().GetDeletionTimestamp() == nil && !controlledBy(p, uid) {
				return false, "orphan not adopted: " + state
			}
			return ok, state
		})
		for _, p := range c.podsOf(t, ns, "web") {
			if !controlledBy(p, uid) {
				t.Errorf("pod %s not controlled by the RC: %v", p.GetMetadata().GetName(), p.GetMetadata().GetOwnerReferences())
			}
		}
	})

	t.Run("releases a relabelled pod and replaces it", func(t *testing.T) {
		pods := c.podsOf(t, ns, "web")
		if len(pods) != 1 {
			t.Fatalf("got %d pods, want 1", len(pods))
		}
		moved := proto.Clone(pods[0]).(*corev1.Pod)
		moved.Metadata.Labels = map[string]string{"app": "elsewhere"}
		if _, err := c.pods.Update(c.ctx, moved); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWithin(t, waitLimit, "relabelled pod released and replaced", func() (bool, string) {
			p, err := c.pods.Get(c.ctx, ns, moved.GetMetadata().GetName())
			if err != nil {
				return false, err.Error()
			}
			if n := len(p.GetMetadata().GetOwnerReferences()); n != 0 {
				return false, fmt.Sprintf("relabelled pod still has %d ownerReferences", n)
			}
			return c.rcSettled(t, rcs, ns, "web", 1)
		})
	})

	t.Run("delete cascades to the pods", func(t *testing.T) {
		if err := rcs.Delete(c.ctx, ns, "web", client.DeleteOptions{PropagationPolicy: "Background"}); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWithin(t, waitLimit, "RC and its pods gone", func() (bool, string) {
			_, err := rcs.Get(c.ctx, ns, "web")
			n := len(c.podsOf(t, ns, "web"))
			return apierrors.IsNotFound(err) && n == 0, fmt.Sprintf("rc: %v, %d pods", err, n)
		})
		// The released pod is nobody's: it stays.
		if n := len(c.podsOf(t, ns, "elsewhere")); n != 1 {
			t.Errorf("got %d released pods, want 1", n)
		}
	})

	t.Run("namespace deletion removes RCs and their pods", func(t *testing.T) {
		const doomed = "rcs-doomed"
		c.namespace(t, doomed)
		if _, err := rcs.Create(c.ctx, newRC(doomed, "db", 2)); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWithin(t, waitLimit, "2 pods ready", func() (bool, string) { return c.rcSettled(t, rcs, doomed, "db", 2) })
		if err := c.nss.Delete(c.ctx, "", doomed, client.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWithin(t, waitLimit, "namespace emptied and gone", func() (bool, string) {
			l, _, _ := rcs.List(c.ctx, doomed, client.ListOptions{})
			p, _, _ := c.pods.List(c.ctx, doomed, client.ListOptions{})
			_, err := c.nss.Get(c.ctx, "", doomed)
			return len(l)+len(p) == 0 && apierrors.IsNotFound(err), fmt.Sprintf("%d rcs, %d pods, namespace: %v", len(l), len(p), err)
		})
	})
}
