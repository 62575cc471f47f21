// This file holds the tests of kubectl exec, attach and port-forward
// through the gateway to a pod on the built-in runtime, over SPDY (kubectl
// 1.27) and WebSocket (kubectl 1.33), which get that runtime's refusals.

package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/nodeagent/simruntime"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

// TestKubectlExecBuiltInRuntime: the real kubectl 1.27 (SPDY) and 1.33
// (WebSocket v5.channel.k8s.io, falling back to SPDY) reach a pod on the
// built-in runtime through the gateway, the API service's StreamPod and
// the node agent's streaming endpoints, and get the runtime's documented
// answers: exec runs nothing and exits 126 saying so (in a scripted
// container, a shell script or an applet runs in the runtime's shell),
// attach and port-forward refuse; errors before the upgrade are Kubernetes' Status.
func TestKubectlExecBuiltInRuntime(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{TLS: true})
	admin := env.Dial(t, apiservertest.AdminToken)
	k := kubectltest.Start(t, env.Dial(t, ""), apiservertest.AdminToken)
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
	// A scripted container (see nodeagent/README.md): its script and
	// exec's commands run in the runtime's shell.
	sp, err := pods.Create(ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "script", Namespace: "default"},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "a", Image: "kplane.test/busybox:1",
			Command: []string{"sh", "-c", "echo ok > /tmp/x; sleep 3600"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pods.Bind(ctx, "default", sp.Metadata.Name, "n1"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sim", "script"} {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if p, err := pods.Get(ctx, "default", name); err == nil && p.GetStatus().GetPhase() == "Running" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s did not run in 60s", name)
			}
		}
	}

	if _, err := pods.Create(ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "unscheduled", Namespace: "default"},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "a", Image: "kplane.test/web:1"}}}}); err != nil {
		t.Fatal(err)
	}
	kubectl := func(k *kubectltest.Kubectl, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		return k.Run(ctx, args...)
	}
	exitCode := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return -1
	}

	// Authorization as kube-apiserver 1.33 does it (checked against the
	// real one): the verb is the HTTP method's, create for SPDY's POST and
	// get for a WebSocket's GET; kubectl 1.33 tries WebSocket first and
	// falls back to SPDY, so a user with neither is told about create.
	bob := kubectltest.Start(t, env.Dial(t, ""), apiservertest.BobToken)
	for _, args := range [][]string{
		{"create", "role", "reader", "--verb=get,list", "--resource=pods"},
		{"create", "rolebinding", "bob-reader", "--role=reader", "--user=bob"},
	} {
		if _, err := kubectl(k, args...); err != nil {
			t.Fatal(err)
		}
	}
	const forbidden = `Error from server (Forbidden): pods "sim" is forbidden: User "bob" cannot create resource "pods/exec" in API group "" in the namespace "default"`
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		if _, err := kubectl(bob.WithBinary(t, bin), "exec", "sim", "-c", "a", "--", "true"); err == nil || !strings.Contains(err.Error(), forbidden) {
			t.Errorf("%s exec as bob: got %v, want %q", bin, err, forbidden)
		}
	}
	// port-forward: kubectl reports the refused upgrade in its own words.
	const pfForbidden = `error: error upgrading connection: pods "sim" is forbidden: User "bob" cannot create resource "pods/portforward" in API group "" in the namespace "default"`
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		if _, err := kubectl(bob.WithBinary(t, bin), "port-forward", "sim", ":80"); err == nil || !strings.Contains(err.Error(), pfForbidden) {
			t.Errorf("%s port-forward as bob: got %v, want %q", bin, err, pfForbidden)
		}
	}
	// With get (not create) on pods/exec, WebSocket (kubectl 1.33) gets
	// through, SPDY (kubectl 1.27) does not.
	for _, args := range [][]string{
		{"create", "role", "exec-get", "--verb=get", "--resource=pods/exec"},
		{"create", "rolebinding", "bob-exec-get", "--role=exec-get", "--user=bob"},
	} {
		if _, err := kubectl(k, args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kubectl(bob.WithBinary(t, "kubectl.1.27"), "exec", "sim", "-c", "a", "--", "true"); err == nil || !strings.Contains(err.Error(), forbidden) {
		t.Errorf("kubectl 1.27 exec as bob with get pods/exec: got %v, want %q", err, forbidden)
	}
	if _, err := kubectl(bob.WithBinary(t, "kubectl.1.33"), "exec", "sim", "-c", "a", "--", "true"); exitCode(err) != simruntime.ExecExitCode {
		t.Errorf("kubectl 1.33 exec as bob with get pods/exec: got %v, want it through to the runtime (exit %d)", err, simruntime.ExecExitCode)
	}

	// Every stream ends with its kubectl: no goroutine of the gateway, the
	// API service or the node agent outlives it (the exec above started
	// the runtime's streaming server, which stays).
	before := goleak.IgnoreCurrent()
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		k := k.WithBinary(t, bin)
		t.Run(bin, func(t *testing.T) {
			run := kubectl
			wantErr := func(what string, err error, want string) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: got %v, want an error containing %q", what, err, want)
				}
			}
			out, err := run(k, "exec", "sim", "-c", "b", "--", "cat", "/etc/hostname")
			if exitCode(err) != simruntime.ExecExitCode || out != "" {
				t.Errorf("exec: got %q, %v; want no output and kubectl exiting %d", out, err, simruntime.ExecExitCode)
			}
			wantErr("exec", err, `kplane-sim: the built-in runtime runs no processes: "cat /etc/hostname" was not run`)
			wantErr("exec", err, "command terminated with exit code 126")

			if out, err := run(k, "exec", "script", "--", "cat", "/tmp/x"); err != nil || out != "ok\n" {
				t.Errorf("exec into a scripted container: got %q, %v; want the file its script wrote", out, err)
			}
			if _, err := run(k, "exec", "script", "--", "sh", "-c", "echo bye >&2; exit 3"); exitCode(err) != 3 {
				t.Errorf("exec of a script: got %v, want kubectl exiting 3", err)
			} else {
				wantErr("exec of a script", err, "bye")
			}

			cmd := k.Command(ctx, "exec", "-i", "sim", "-c", "a", "--", "sh")
			cmd.Stdin = strings.NewReader("echo hi\n")
			b, err := cmd.CombinedOutput()
			if exitCode(err) != simruntime.ExecExitCode || !strings.Contains(string(b), `"sh" was not run`) {
				t.Errorf("exec -i: got %q, %v; want the runtime's refusal and exit %d", b, err, simruntime.ExecExitCode)
			}

			_, err = run(k, "attach", "sim", "-c", "a")
			wantErr("attach", err, "kplane-sim: the built-in runtime runs no processes: there is nothing to attach to")

			t.Run("port-forward refuses", func(t *testing.T) {
				portForwardRefused(t, k, "sim")
			})

			_, err = run(k, "exec", "sim", "-c", "nope", "--", "true")
			wantErr("exec -c nope", err, "Error from server (BadRequest): container nope is not valid for pod sim")
			_, err = run(k, "exec", "nosuch", "--", "true")
			wantErr("exec nosuch", err, `Error from server (NotFound): pods "nosuch" not found`)
			_, err = run(k, "exec", "unscheduled", "--", "true")
			wantErr("exec unscheduled", err, "Error from server (BadRequest): pod unscheduled does not have a host assigned")
		})
	}
	goleak.VerifyNone(t, before)
}

// portForwardRefused runs `kubectl port-forward pod :80`, connects to the
// local port and checks that the connection is closed and kubectl reports
// the built-in runtime's refusal.
func portForwardRefused(t *testing.T, k *kubectltest.Kubectl, pod string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := k.Command(ctx, "port-forward", pod, ":80")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	// "Forwarding from 127.0.0.1:PORT -> 80"
	lines := bufio.NewScanner(stdout)
	var local string
	for lines.Scan() {
		if f := strings.Fields(lines.Text()); len(f) == 5 && f[0] == "Forwarding" && strings.HasPrefix(f[2], "127.0.0.1:") {
			local = f[2]
			break
		}
	}
	if local == "" {
		t.Fatalf("kubectl port-forward printed no local address (%v)", lines.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	c, err := net.Dial("tcp", local)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	if b, err := io.ReadAll(c); len(b) != 0 {
		t.Errorf("port-forward: read %q (%v), want the connection closed with nothing", b, err)
	}
	const want = "kplane-sim: the built-in runtime runs no processes: nothing listens on port 80"
	errs := bufio.NewScanner(stderr)
	var seen []string
	for errs.Scan() {
		if strings.Contains(errs.Text(), want) {
			return
		}
		seen = append(seen, errs.Text())
	}
	t.Errorf("kubectl port-forward's errors %q do not contain %q", seen, want)
}
