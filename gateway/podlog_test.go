// This file holds the test of kubectl logs through the gateway, from a node
// agent on the built-in runtime.

package gateway_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/nodeagent"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/simruntime"
	"github.com/kplane/kplane/nodeagent/simruntime/simruntimetest"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

// startLogNode runs node name on the built-in runtime, with its log server
// on loopback HTTPS that only the API service's kubelet client certificate
// may read, until the test ends.
func startLogNode(t *testing.T, env *apiservertest.Env, name string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gwlog")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt, err := simruntime.New(simruntime.Config{Name: name, Images: []string{"kplane.test/web:1"}})
	if err != nil {
		t.Fatal(err)
	}
	sock := simruntimetest.Serve(t, rt)
	ctx, cancel := context.WithCancel(context.Background())
	rc, err := cri.New(cri.Config{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, err := nodeagent.New(nodeagent.Config{
		NodeName:       name,
		Conn:           env.DialCert(t, "system:node:"+name, "system:nodes"),
		Runtime:        rc,
		Capacity:       map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"},
		LogDir:         filepath.Join(dir, "logs"),
		RootDir:        filepath.Join(dir, "root"),
		LogPort:        int32(hl.Addr().(*net.TCPAddr).Port),
		StatusInterval: time.Second,
		RelistInterval: 100 * time.Millisecond,
		Backoff:        nodeagent.Backoff{Base: 200 * time.Millisecond, Max: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	ca := env.CA()
	srv := &http.Server{Handler: nodeagent.NewLogServer(a).RequireClientCert(apiservertest.KubeletClientUser)}
	go srv.Serve(tls.NewListener(hl, nodeagent.LogServerTLS(ca.Issue(t, "kplane-nodeagent", nil, true), ca.Pool)))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
		rc.Close()
	})
}

// TestKubectlLogs: the real kubectl reads container logs through the
// gateway, the API service's pods/log and the node agent's log server
// (built-in runtime, whose KPLANE_SIM_LOG lines are the container's
// output): all, --tail, -c, --previous, -f, and Kubernetes' errors.
func TestKubectlLogs(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{TLS: true})
	admin := env.Dial(t, apiservertest.AdminToken)
	k := kubectltest.Start(t, env.Dial(t, ""), apiservertest.AdminToken)
	startLogNode(t, env, "n1")
	pods := client.Must[*corev1.Pod](admin)
	ctx := context.Background()

	run := func(name string, spec *corev1.PodSpec) {
		t.Helper()
		p, err := pods.Create(ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		if err := pods.Bind(ctx, "default", p.Metadata.Name, "n1"); err != nil {
			t.Fatal(err)
		}
	}
	ctr := func(name, image string, env ...string) *corev1.Container {
		c := &corev1.Container{Name: name, Image: image}
		for i := 0; i+1 < len(env); i += 2 {
			c.Env = append(c.Env, &corev1.EnvVar{Name: env[i], Value: env[i+1]})
		}
		return c
	}
	wait := func(name, what string, ok func(*corev1.Pod) bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if p, err := pods.Get(ctx, "default", name); err == nil && ok(p) {
				return
			}
		}
		t.Fatalf("pod %s: %s did not happen in 60s", name, what)
	}
	running := func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Running" }

	const web = "kplane.test/web:1"
	run("logs", &corev1.PodSpec{Containers: []*corev1.Container{ctr("main", web, simruntime.EnvLog, "one\ntwo\nthree")}})
	run("two", &corev1.PodSpec{Containers: []*corev1.Container{
		ctr("a", web, simruntime.EnvLog, "from a"), ctr("b", web, simruntime.EnvLog, "from b")}})
	run("crash", &corev1.PodSpec{Containers: []*corev1.Container{ctr("main", web,
		simruntime.EnvLog, "attempt", simruntime.EnvRunSeconds, "0.2", simruntime.EnvExitCode, "3")}})
	// A pull that takes a minute: the container waits in ContainerCreating.
	run("pulling", &corev1.PodSpec{Containers: []*corev1.Container{ctr("main", "kplane.test/slow:v1-pull-60s")}})
	wait("logs", "Running", running)
	wait("two", "Running", running)
	wait("crash", "a restart", func(p *corev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) == 1 && cs[0].GetRestartCount() >= 1 && cs[0].GetLastTerminationState().GetTerminated() != nil
	})

	tests := []struct {
		name    string
		args    []string
		want    string // the whole output
		wantErr string // part of kubectl's error
	}{
		{name: "all", args: []string{"logs", "logs"}, want: "one\ntwo\nthree\n"},
		{name: "tail", args: []string{"logs", "logs", "--tail=2"}, want: "two\nthree\n"},
		{name: "tail zero", args: []string{"logs", "logs", "--tail=0"}, want: ""},
		{name: "limit bytes", args: []string{"logs", "logs", "--limit-bytes=6"}, want: "one\ntw"},
		{name: "container", args: []string{"logs", "two", "-c", "b"}, want: "from b\n"},
		{name: "kubectl picks the first container", args: []string{"logs", "two"}, want: "from a\n"},
		{name: "previous", args: []string{"logs", "crash", "--previous"}, want: "attempt\n"},
		{name: "no previous instance", args: []string{"logs", "logs", "--previous"},
			wantErr: `Error from server (BadRequest): previous terminated container "main" in pod "logs" not found`},
		{name: "waiting to start", args: []string{"logs", "pulling"},
			wantErr: `Error from server (BadRequest): container "main" in pod "pulling" is waiting to start: ContainerCreating`},
		{name: "container name required", args: []string{"get", "--raw", "/api/v1/namespaces/default/pods/two/log"},
			wantErr: `Error from server (BadRequest): a container name must be specified for pod two, choose one of: [a b]`},
		{name: "no such container", args: []string{"get", "--raw", "/api/v1/namespaces/default/pods/two/log?container=nope"},
			wantErr: `Error from server (BadRequest): container nope is not valid for pod two`},
		{name: "bad tail", args: []string{"get", "--raw", "/api/v1/namespaces/default/pods/logs/log?tailLines=-1"},
			wantErr: `PodLogOptions "logs" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0`},
		{name: "no such pod", args: []string{"logs", "nosuch"},
			wantErr: `pods "nosuch" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			out, err := k.Run(ctx, tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("kubectl %v: got %q, %v; want an error containing %q", tt.args, out, err, tt.wantErr)
				}
				return
			}
			if err != nil || out != tt.want {
				t.Fatalf("kubectl %v: got %q, %v; want %q", tt.args, out, err, tt.want)
			}
		})
	}

	t.Run("follow ends when the container stops", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		run("done", &corev1.PodSpec{RestartPolicy: "Never", Containers: []*corev1.Container{ctr("main", web,
			simruntime.EnvLog, "first\nlast", simruntime.EnvRunSeconds, "3")}})
		wait("done", "Running", running)
		out, err := k.Run(ctx, "logs", "-f", "done")
		if err != nil || out != "first\nlast\n" {
			t.Fatalf("kubectl logs -f done: got %q, %v; want the two lines, then the end", out, err)
		}
		if p, err := pods.Get(ctx, "default", "done"); err != nil || p.GetStatus().GetPhase() != "Succeeded" {
			t.Errorf("after logs -f ended: pod phase %q (%v), want Succeeded", p.GetStatus().GetPhase(), err)
		}
	})

	t.Run("follow streams, and ends when the pod is deleted", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cmd := k.Command(ctx, "logs", "-f", "logs")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The lines arrive while kubectl is still following.
		sc := bufio.NewScanner(stdout)
		var got []string
		for len(got) < 3 && sc.Scan() {
			got = append(got, sc.Text())
		}
		if strings.Join(got, ",") != "one,two,three" {
			t.Fatalf("kubectl logs -f: got lines %q, want one, two, three", got)
		}
		if err := pods.Delete(ctx, "default", "logs", client.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for sc.Scan() {
			t.Errorf("kubectl logs -f: unexpected line %q", sc.Text())
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("kubectl logs -f: %v (want exit 0 once the container stopped)", err)
		}
	})
}
