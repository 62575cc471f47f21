// This file holds the test of kubectl debug with an ephemeral container:
// the real kubectl 1.27 and 1.33 patch pods/ephemeralcontainers through the
// gateway, the node agent starts the container in the running pod on the
// built-in runtime, reports it in ephemeralContainerStatuses, and kubectl
// exec reaches it.

package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

func TestKubectlDebugEphemeralContainer(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{TLS: true})
	admin := env.Dial(t, apiservertest.AdminToken)
	startLogNode(t, env, "n1")
	pods := client.Must[*corev1.Pod](admin)
	ctx := context.Background()
	p, err := pods.Create(ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "app", Namespace: "default"},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "main", Image: "kplane.test/busybox:1",
			Command: []string{"sh", "-c", "sleep 3600"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pods.Bind(ctx, "default", p.Metadata.Name, "n1"); err != nil {
		t.Fatal(err)
	}
	waitPod := func(what string, ok func(*corev1.Pod) bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if p, err := pods.Get(ctx, "default", "app"); err == nil && ok(p) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 60s", what)
			}
		}
	}
	waitPod("app Running", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Running" })

	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, env.Dial(t, ""), apiservertest.AdminToken, bin)
			run := func(args ...string) string {
				t.Helper()
				ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				out, err := k.Run(ctx, args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			name := "dbg-" + strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl."), ".", "")
			out := run("debug", "app", "--image=kplane.test/busybox:1", "--target=main", "-c", name, "--", "sh", "-c", "sleep 3600")
			if !strings.Contains(out, `Targeting container "main"`) {
				t.Errorf("kubectl debug:\n%s", out)
			}
			waitPod(name+" running", func(p *corev1.Pod) bool {
				for _, s := range p.GetStatus().GetEphemeralContainerStatuses() {
					if s.GetName() == name && s.GetState().GetRunning() != nil {
						return true
					}
				}
				return false
			})
			if out := run("get", "pod", "app", "-o", "jsonpath={.spec.ephemeralContainers[*].targetContainerName} {.status.phase}"); !strings.HasSuffix(out, "main Running") {
				t.Errorf("after debug: got %q", out)
			}
			if out := run("exec", "app", "-c", name, "--", "echo", "inside"); strings.TrimSpace(out) != "inside" {
				t.Errorf("exec in the ephemeral container: got %q", out)
			}
			// A target that is not one of the pod's containers is refused
			// as kube-apiserver refuses it.
			ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			out, err := k.Run(ctx, "debug", "app", "--image=kplane.test/busybox:1", "--target=nope", "-c", name+"-x")
			if err == nil || !strings.Contains(out+err.Error(), `targetContainerName: Not found: "nope"`) {
				t.Errorf("debug with a target that is not there: got %v\n%s", err, out)
			}
		})
	}
}
