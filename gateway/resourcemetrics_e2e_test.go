// This file holds the resource metrics test: kubectl top (1.27 and 1.33)
// reads metrics.k8s.io through the gateway and the API service, which asks
// the node agent's stats summary; the built-in runtime reports the usage a
// container declares (KPLANE_SIM_CPU_USAGE, KPLANE_SIM_MEMORY_USAGE).
package gateway_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/nodeagent/simruntime"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

func TestKubectlTop(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{TLS: true})
	admin := env.Dial(t, apiservertest.AdminToken)
	startLogNode(t, env, "n1")
	pods := client.Must[*corev1.Pod](admin)
	ctx := context.Background()
	envs := func(kv ...string) []*corev1.EnvVar {
		var out []*corev1.EnvVar
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, &corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	const web = "kplane.test/web:1"
	for _, p := range []*corev1.Pod{
		{Metadata: &metav1.ObjectMeta{Name: "busy", Namespace: "default", Labels: map[string]string{"app": "busy"}}, Spec: &corev1.PodSpec{Containers: []*corev1.Container{
			{Name: "a", Image: web, Env: envs(simruntime.EnvCPUUsage, "250m", simruntime.EnvMemoryUsage, "64Mi")},
			{Name: "b", Image: web, Env: envs(simruntime.EnvCPUUsage, "0.5", simruntime.EnvMemoryUsage, "32Mi")}}}},
		{Metadata: &metav1.ObjectMeta{Name: "idle", Namespace: "default"}, Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "main", Image: web}}}},
	} {
		if _, err := pods.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := pods.Bind(ctx, "default", p.Metadata.Name, "n1"); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"busy", "idle"} {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if p, err := pods.Get(ctx, "default", name); err == nil && p.GetStatus().GetPhase() == "Running" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s is not Running after 60s", name)
			}
		}
	}
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, env.Dial(t, ""), apiservertest.AdminToken, bin)
			for _, tc := range []struct {
				name string
				args []string
				want []string // regular expressions, one per line after the header
			}{
				{name: "pods", args: []string{"top", "pods"}, want: []string{`^busy\s+750m\s+96Mi\s*$`, `^idle\s+0m\s+0Mi\s*$`}},
				{name: "containers", args: []string{"top", "pods", "busy", "--containers"}, want: []string{`^busy\s+a\s+250m\s+64Mi\s*$`, `^busy\s+b\s+500m\s+32Mi\s*$`}},
				{name: "selector", args: []string{"top", "pods", "-l", "app=busy"}, want: []string{`^busy\s+750m\s+96Mi\s*$`}},
				// 750m of the node's 4 cores, 96Mi of its 8Gi.
				{name: "nodes", args: []string{"top", "nodes"}, want: []string{`^n1\s+750m\s+18%\s+96Mi\s+1%\s*$`}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
					defer cancel()
					out, err := k.Run(ctx, tc.args...)
					if err != nil {
						t.Fatalf("kubectl %v: %v\n%s", tc.args, err, out)
					}
					lines := strings.Split(strings.TrimSpace(out), "\n")
					if len(lines) != len(tc.want)+1 {
						t.Fatalf("kubectl %v: got %q, want a header and %d rows", tc.args, out, len(tc.want))
					}
					for i, w := range tc.want {
						if !regexp.MustCompile(w).MatchString(lines[i+1]) {
							t.Errorf("kubectl %v row %d: got %q, want %s", tc.args, i, lines[i+1], w)
						}
					}
				})
			}
			// metrics.k8s.io's pods and nodes take no short name or
			// category from the core ones.
			if out, err := k.Run(ctx, "get", "po"); err != nil || !strings.Contains(out, "STATUS") || !strings.Contains(out, "busy") {
				t.Errorf("get po: got %q %v, want the core pods", out, err)
			}
			if out, err := k.Run(ctx, "get", "all"); err != nil || strings.Contains(out, "podmetrics") || !strings.Contains(out, "pod/busy") {
				t.Errorf("get all: got %q %v, want core pods and no metrics", out, err)
			}
			out, err := k.Run(ctx, "top", "pods", "nosuch")
			if err == nil || !strings.Contains(err.Error()+out, `pods.metrics.k8s.io "nosuch" not found`) {
				t.Errorf("top pods nosuch: got %q %v, want NotFound", out, err)
			}
		})
	}
}
