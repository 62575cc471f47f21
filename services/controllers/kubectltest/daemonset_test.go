// This file holds the DaemonSet test with the real kubectl (1.27 and 1.33)
// through the gateway, on a cluster of two node agents with the built-in
// simulated runtime, the scheduler and the controllers: apply -f, rollout
// status, get ds, set image, rollout history, rollout undo (which reads
// the ControllerRevisions and patches the DaemonSet), explain.
package kubectltest

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

const daemonSetYAML = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
      - name: c
        image: kplane.test/agent:1
`

func TestKubectlDaemonSet(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{TLS: true})
	conn := startControlPlane(t, env, true, controllers.DaemonSet, controllers.GarbageCollector)
	ctx := context.Background()
	startSimNode(t, env, "n1")
	startSimNode(t, env, "n2")
	pods := client.Must[*corev1.Pod](conn)
	gwConn := env.Dial(t, "")

	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, gwConn, apiservertest.AdminToken, bin)
			kubectl := kubectlRunner(k, 100*time.Second)
			ns := "d" + strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl."), ".", "")
			run := func(args ...string) string {
				t.Helper()
				out, err := kubectl("", append(args, "-n", ns)...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			rolledOut := func() {
				t.Helper()
				out := run("rollout", "status", "daemonset/agent", "--timeout=90s")
				if !strings.Contains(out, `daemon set "agent" successfully rolled out`) {
					t.Fatalf("rollout status: %s", out)
				}
			}
			images := func() string {
				t.Helper()
				l, _, err := pods.List(ctx, ns, client.ListOptions{LabelSelector: "app=agent"})
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, p := range l {
					if p.GetMetadata().GetDeletionTimestamp() == nil {
						out = append(out, p.GetSpec().GetNodeName()+"="+p.GetSpec().GetContainers()[0].GetImage())
					}
				}
				return strings.Join(slices.Sorted(slices.Values(out)), " ")
			}

			run0 := func(args ...string) string {
				t.Helper()
				out, err := kubectl("", args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			run0("create", "ns", ns)
			if out, err := kubectl(daemonSetYAML, "apply", "-n", ns, "-f", "-"); err != nil || !strings.Contains(out, "daemonset.apps/agent created") {
				t.Fatalf("apply: %v\n%s", err, out)
			}
			rolledOut()
			if got := images(); got != "n1=kplane.test/agent:1 n2=kplane.test/agent:1" {
				t.Errorf("pods: got %s, want one per node", got)
			}
			out := run("get", "ds")
			if !regexp.MustCompile(`NAME\s+DESIRED\s+CURRENT\s+READY\s+UP-TO-DATE\s+AVAILABLE\s+NODE SELECTOR\s+AGE\n` +
				`agent\s+2\s+2\s+2\s+2\s+2\s+<none>\s+\S+\n`).MatchString(out) {
				t.Errorf("get ds:\n%s", out)
			}
			if out := run("get", "ds", "-o", "wide"); !strings.Contains(out, "kplane.test/agent:1") || !strings.Contains(out, "app=agent") {
				t.Errorf("get ds -o wide:\n%s", out)
			}
			if out, err := kubectl(daemonSetYAML, "apply", "-n", ns, "-f", "-"); err != nil || !strings.Contains(out, "daemonset.apps/agent unchanged") {
				t.Errorf("apply again: %v\n%s", err, out)
			}

			run("set", "image", "daemonset/agent", "c=kplane.test/agent:2")
			rolledOut()
			if got := images(); got != "n1=kplane.test/agent:2 n2=kplane.test/agent:2" {
				t.Errorf("pods after set image: got %s", got)
			}
			out = run("rollout", "history", "daemonset/agent")
			if !regexp.MustCompile(`REVISION\s+CHANGE-CAUSE\n1\s+<none>\n2\s+<none>\n`).MatchString(out) {
				t.Errorf("rollout history:\n%s", out)
			}
			if out := run("rollout", "history", "daemonset/agent", "--revision=1"); !strings.Contains(out, "kplane.test/agent:1") {
				t.Errorf("rollout history --revision=1:\n%s", out)
			}
			if out := run("get", "controllerrevisions"); !regexp.MustCompile(`agent-\S+\s+daemonset.apps/agent\s+2\s`).MatchString(out) {
				t.Errorf("get controllerrevisions:\n%s", out)
			}

			out = run("rollout", "undo", "daemonset/agent")
			if !strings.Contains(out, "daemonset.apps/agent rolled back") {
				t.Errorf("rollout undo: %s", out)
			}
			rolledOut()
			if got := images(); got != "n1=kplane.test/agent:1 n2=kplane.test/agent:1" {
				t.Errorf("pods after undo: got %s", got)
			}
			out = run("rollout", "history", "daemonset/agent")
			if !regexp.MustCompile(`REVISION\s+CHANGE-CAUSE\n2\s+<none>\n3\s+<none>\n`).MatchString(out) {
				t.Errorf("rollout history after undo (revision 1 became 3):\n%s", out)
			}
			if out, err := kubectl("", "rollout", "undo", "daemonset/agent", "--to-revision=3", "-n", ns); err != nil || !strings.Contains(out, "skipped rollback") {
				t.Errorf("undo to the current revision: %v\n%s", err, out)
			}
			if out := run("explain", "daemonset.spec"); !strings.Contains(out, "updateStrategy") || !strings.Contains(out, "revisionHistoryLimit") {
				t.Errorf("explain daemonset.spec:\n%s", out)
			}
			run("delete", "daemonset", "agent")
			waitNoPods(t, ctx, pods, ns)
		})
	}
}

func waitNoPods(t *testing.T, ctx context.Context, pods *client.Client[*corev1.Pod], ns string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		l, _, err := pods.List(ctx, ns, client.ListOptions{})
		if err == nil && len(l) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods of %s not collected: %d left (%v)", ns, len(l), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
