// This file holds the taint eviction test on a real in-process API
// service: a NoExecute taint a user puts on a node evicts the node's pods
// that do not tolerate it at once, those that tolerate it for a while once
// their tolerationSeconds ran out, and never those that tolerate it
// without a limit; an evicted pod carries Kubernetes' DisruptionTarget
// condition.
package controllers_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

func TestNoExecuteTaintEvictsPods(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.Controllers = []string{controllers.NodeLifecycle}
	})
	const ns = "default"
	nodes := client.Must[*corev1.Node](c.conn)
	if _, err := nodes.Create(c.ctx, &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "n1"}, Status: &corev1.NodeStatus{}}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, tols ...*corev1.Toleration) {
		t.Helper()
		p := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx:1.27"}}, Tolerations: tols}}
		if _, err := c.pods.Create(c.ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := c.pods.Bind(c.ctx, ns, name, "n1"); err != nil {
			t.Fatal(err)
		}
	}
	pod("intolerant")
	pod("brief", &corev1.Toleration{Key: "dedicated", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(1)})
	pod("forever", &corev1.Toleration{Key: "dedicated", Operator: "Equal", Value: "db", Effect: "NoExecute"})
	pod("other", &corev1.Toleration{Key: "dedicated", Operator: "Equal", Value: "web", Effect: "NoExecute"})

	n, err := nodes.Get(c.ctx, "", "n1")
	if err != nil {
		t.Fatal(err)
	}
	n.Spec = &corev1.NodeSpec{Taints: []*corev1.Taint{{Key: "dedicated", Value: "db", Effect: "NoExecute"}}}
	if _, err := nodes.Update(c.ctx, n); err != nil {
		t.Fatal(err)
	}
	evicted := func(name string) func() (bool, string) {
		return func() (bool, string) {
			p, err := c.pods.Get(c.ctx, ns, name)
			if err != nil {
				return false, err.Error()
			}
			for _, cond := range p.GetStatus().GetConditions() {
				if cond.GetType() == "DisruptionTarget" && cond.GetStatus() == "True" && cond.GetReason() == "DeletionByTaintManager" &&
					cond.GetMessage() == "Taint manager: deleting due to NoExecute taint" {
					return p.GetMetadata().GetDeletionTimestamp() != nil, fmt.Sprint(p.GetMetadata())
				}
			}
			return false, fmt.Sprint(p.GetStatus().GetConditions())
		}
	}
	testutil.EventuallyWithin(t, waitLimit, "the pod without a toleration evicted", evicted("intolerant"))
	testutil.EventuallyWithin(t, waitLimit, "the pod whose toleration does not match evicted", evicted("other"))
	testutil.EventuallyWithin(t, waitLimit, "the pod tolerating it for 1 s evicted", evicted("brief"))
	p, err := c.pods.Get(c.ctx, ns, "forever")
	if err != nil || p.GetMetadata().GetDeletionTimestamp() != nil {
		t.Errorf("the pod tolerating the taint without a limit: got %v, %v; want it kept", p.GetMetadata(), err)
	}
}
