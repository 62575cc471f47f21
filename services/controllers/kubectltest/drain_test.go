// This file holds the drain test with the real kubectl (1.27 and 1.33)
// through the gateway, on a cluster of simulated nodes (built-in runtime)
// with the scheduler and the controllers: `kubectl drain` evicts through
// pods/eviction, is held back by a PodDisruptionBudget (kubectl retries
// until its --timeout, printing Kubernetes' message), goes through once the
// budget is relaxed, and the ReplicaSet recreates the pods on the other
// node; `kubectl create pdb`, `get pdb` (Kubernetes' columns), `describe
// pdb` and `explain pdb.spec` work.
package kubectltest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/internal/testutil"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

func TestKubectlDrainWithDisruptionBudget(t *testing.T) {
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			kubectltest.Binary(t, bin)
			env := apiservertest.Start(t, apiservertest.Options{TLS: true})
			admin := startControlPlane(t, env, true, controllers.Deployment, controllers.ReplicaSet, controllers.GarbageCollector, controllers.Disruption)
			ctx := context.Background()
			k := kubectltest.StartBinary(t, env.Dial(t, ""), apiservertest.AdminToken, bin)
			withStdin := kubectlRunner(k, 3*time.Minute)
			kubectl := func(args ...string) (string, error) { return withStdin("", args...) }
			run := func(args ...string) string {
				t.Helper()
				out, err := kubectl(args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			pods := client.Must[*corev1.Pod](admin)
			onNode := func(node string) ([]*corev1.Pod, string) {
				l, _, err := pods.List(ctx, "default", client.ListOptions{LabelSelector: "app=web"})
				if err != nil {
					return nil, err.Error()
				}
				var out []*corev1.Pod
				var state []string
				for _, p := range l {
					ready := false
					for _, c := range p.GetStatus().GetConditions() {
						ready = ready || (c.GetType() == "Ready" && c.GetStatus() == "True")
					}
					state = append(state, fmt.Sprintf("%s@%s ready=%v deleting=%v", p.GetMetadata().GetName(), p.GetSpec().GetNodeName(), ready, p.GetMetadata().GetDeletionTimestamp() != nil))
					if p.GetSpec().GetNodeName() == node && ready && p.GetMetadata().GetDeletionTimestamp() == nil {
						out = append(out, p)
					}
				}
				return out, strings.Join(state, ", ")
			}

			// Two replicas, both on n1 (the only node yet).
			startSimNode(t, env, "n1", "kplane.test/web:1")
			lbl := map[string]string{"app": "web"}
			_, err := client.Must[*appsv1.Deployment](admin).Create(ctx, &appsv1.Deployment{
				Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "web"},
				Spec: &appsv1.DeploymentSpec{Replicas: proto.Int32(2), Selector: &metav1.LabelSelector{MatchLabels: lbl},
					Template: &corev1.PodTemplateSpec{Metadata: &metav1.ObjectMeta{Labels: lbl},
						Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "web", Image: "kplane.test/web:1"}},
							TerminationGracePeriodSeconds: proto.Int64(1)}}}})
			if err != nil {
				t.Fatal(err)
			}
			testutil.EventuallyWithin(t, 2*time.Minute, "two ready pods on n1", func() (bool, string) { l, s := onNode("n1"); return len(l) == 2, s })
			startSimNode(t, env, "n2", "kplane.test/web:1")

			run("create", "pdb", "web", "--selector", "app=web", "--min-available", "2")
			testutil.EventuallyWithin(t, 2*time.Minute, "the budget's status", func() (bool, string) {
				out, _ := kubectl("get", "pdb", "web", "-o", "jsonpath={.status.currentHealthy}/{.status.desiredHealthy}/{.status.expectedPods}")
				return out == "2/2/2", out
			})
			got := run("get", "pdb")
			if want := "NAME   MIN AVAILABLE   MAX UNAVAILABLE   ALLOWED DISRUPTIONS   AGE\nweb    2               N/A               0                     "; !strings.HasPrefix(got, want) {
				t.Errorf("get pdb: got\n%s\nwant it to start with\n%s", got, want)
			}

			desc := run("describe", "pdb", "web")
			t.Logf("describe pdb:\n%s", desc)
			for _, want := range []string{"Min available:  2", "Selector:       app=web", "Allowed disruptions:  0", "Current:              2", "Desired:              2", "Total:                2"} {
				if !strings.Contains(desc, want) {
					t.Errorf("describe pdb lacks %q:\n%s", want, desc)
				}
			}
			explain := run("explain", "pdb.spec")
			for _, want := range []string{"KIND:", "PodDisruptionBudget", "minAvailable", "maxUnavailable", "unhealthyPodEvictionPolicy", "selector"} {
				if !strings.Contains(explain, want) {
					t.Errorf("explain pdb.spec lacks %q:\n%s", want, explain)
				}
			}

			// Held back: kubectl retries every 5 s until its timeout.
			out, err := kubectl("drain", "n1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout", "12s")
			t.Logf("blocked drain:\n%s", out)
			if err == nil {
				t.Fatalf("drain with the budget at its minimum succeeded:\n%s", out)
			}
			for _, want := range []string{
				"node/n1 cordoned",
				"(will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget.",
				"global timeout reached: 12s",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("blocked drain: output lacks %q:\n%s", want, out)
				}
			}
			if l, s := onNode("n1"); len(l) != 2 {
				t.Fatalf("a blocked drain evicted a pod: %s", s)
			}

			// Relaxed: the pods go one at a time, each replaced on n2
			// before the budget lets the next go.
			run("patch", "pdb", "web", "--type", "merge", "-p", `{"spec":{"minAvailable":1}}`)
			out = run("drain", "n1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout", "150s")
			t.Logf("drain:\n%s", out)
			for _, want := range []string{"evicted", "node/n1 drained"} {
				if !strings.Contains(out, want) {
					t.Errorf("drain: output lacks %q:\n%s", want, out)
				}
			}
			testutil.EventuallyWithin(t, 2*time.Minute, "two ready pods on n2", func() (bool, string) { l, s := onNode("n2"); return len(l) == 2, s })
			if out := run("get", "node", "n1"); !strings.Contains(out, "SchedulingDisabled") {
				t.Errorf("get node n1 after drain:\n%s", out)
			}
		})
	}
}
