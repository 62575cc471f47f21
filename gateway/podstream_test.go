package gateway_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/client/clienttest"
)

// TestKubectlExecBuiltInRuntime: the real kubectl 1.27 (SPDY) and 1.33
// (WebSocket v5.channel.k8s.io, falling back to SPDY) reach a pod on the
// built-in runtime through the gateway, the API service's StreamPod and
// the node agent's streaming endpoints, and get the runtime's documented
// answers: exec runs nothing and exits 126 saying so, attach and
// port-forward refuse; errors before the upgrade are Kubernetes' Status.
func TestKubectlExecBuiltInRuntime(t *testing.T) {
	env := clienttest.Start(t, clienttest.Options{TLS: true})
	admin := env.Dial(t, clienttest.AdminToken)
	k := kubectltest.Start(t, env.Dial(t, ""), clienttest.AdminToken)
	startLogNode(t, env, "n1")
	pods := client.Must[*corev1.Pod](admin)
	ctx := context.Background()

	p, err := pods.Create(ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "sim", Namespace: "default"},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{
			{Name: "a", Image: "kplane.test/web:1"}, {Name: "b", Image: "kplane.test/web:1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pods.Bind(ctx, "default", p.Metadata.Name, "n1"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if p, err := pods.Get(ctx, "default", "sim"); err == nil && p.GetStatus().GetPhase() == "Running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pod sim did not run in 60s")
		}
	}

	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		k := k.WithBinary(t, bin)
		run := func(args ...string) (string, error) {
			ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			return k.Run(ctx, args...)
		}
		t.Run(bin, func(t *testing.T) {
			out, err := run("exec", "sim", "-c", "b", "--", "cat", "/etc/hostname")
			t.Logf("exec: %q %v", out, err)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 126 {
				t.Errorf("exec: got %v, want kubectl to exit 126", err)
			}
			if want := `kplane-sim: the built-in runtime runs no processes: "cat /etc/hostname" was not run`; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("exec: got %q, %v; want stderr %q", out, err, want)
			}
			out, err = run("exec", "-i", "sim", "-c", "a", "--", "sh")
			t.Logf("exec -i: %q %v", out, err)
			out, err = run("exec", "sim", "-c", "nope", "--", "true")
			t.Logf("exec -c nope: %q %v", out, err)
			out, err = run("exec", "nosuch", "--", "true")
			t.Logf("exec nosuch: %q %v", out, err)
			out, err = run("attach", "sim", "-c", "a")
			t.Logf("attach: %q %v", out, err)
		})
	}
}
