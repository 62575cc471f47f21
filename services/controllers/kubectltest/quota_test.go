// This file holds the quota, limit range and priority test with the real
// kubectl (1.27 and 1.33) through the gateway while the resource quota
// controller runs: create quota and describe quota (Used/Hard), a
// LimitRange's defaults on a created pod, a pod over the quota refused with
// Kubernetes' message, create priorityclass and a pod given its value.
package kubectltest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

func TestKubectlQuotaLimitsPriority(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	conn := startControlPlane(t, env, false, controllers.ResourceQuota, controllers.Namespace)
	quotas := client.Must[*corev1.ResourceQuota](conn)
	gwConn := env.Dial(t, "")

	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, gwConn, apiservertest.AdminToken, bin)
			kubectl := kubectlRunner(k, 60*time.Second)
			run := func(stdin string, args ...string) string {
				t.Helper()
				out, err := kubectl(stdin, args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			v := strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl."), ".", "")
			ns := "q" + v
			run("", "create", "ns", ns)
			if out := run("", "create", "quota", "compute", "-n", ns, "--hard=pods=2,requests.cpu=1,limits.memory=1Gi"); !strings.Contains(out, "resourcequota/compute created") {
				t.Fatalf("create quota:\n%s", out)
			}
			// The controller fills the status: wait for it with a watch.
			wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer wcancel()
			w, err := quotas.Watch(wctx, ns, client.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for {
				ev, err := w.Next()
				if err != nil {
					t.Fatalf("waiting for the quota's status: %v", err)
				}
				if len(ev.Object.GetStatus().GetUsed()) == 3 {
					break
				}
			}
			w.Close()
			out := run("", "describe", "quota", "compute", "-n", ns)
			for _, want := range []string{"Resource Used Hard", "limits.memory 0 1Gi", "pods 0 2", "requests.cpu 0 1"} {
				if !strings.Contains(squeeze(out), want) {
					t.Errorf("describe quota: no %q in\n%s", want, out)
				}
			}

			// Defaults from a LimitRange fill what the quota requires.
			run(`apiVersion: v1
kind: LimitRange
metadata: {name: defaults}
spec:
  limits:
  - type: Container
    default: {cpu: 200m, memory: 256Mi}
    defaultRequest: {cpu: 100m}
`, "apply", "-n", ns, "-f", "-")
			run(`apiVersion: v1
kind: Pod
metadata: {name: small}
spec:
  containers: [{name: app, image: nginx}]
`, "create", "-n", ns, "-f", "-")
			out = run("", "get", "pod", "small", "-n", ns, "-o", `jsonpath={.spec.containers[0].resources.requests.cpu} {.spec.containers[0].resources.limits.memory} {.metadata.annotations.kubernetes\.io/limit-ranger}`)
			// As Kubernetes, the default request of memory is its default
			// limit.
			if want := "100m 256Mi LimitRanger plugin set: cpu, memory request for container app; cpu, memory limit for container app"; out != want {
				t.Errorf("pod with the LimitRange's defaults: got %q, want %q", out, want)
			}
			out = run("", "describe", "quota", "compute", "-n", ns)
			if !strings.Contains(squeeze(out), "pods 1 2") || !strings.Contains(squeeze(out), "requests.cpu 100m 1") {
				t.Errorf("describe quota after a pod:\n%s", out)
			}
			// Over the quota: Kubernetes' refusal.
			out, err = kubectl(`apiVersion: v1
kind: Pod
metadata: {name: big}
spec:
  containers: [{name: app, image: nginx, resources: {requests: {cpu: "2"}, limits: {cpu: "2"}}}]
`, "create", "-n", ns, "-f", "-")
			if want := `pods "big" is forbidden: exceeded quota: compute, requested: requests.cpu=2, used: requests.cpu=100m, limited: requests.cpu=1`; err == nil || !strings.Contains(out, "Error from server (Forbidden)") || !strings.Contains(out, want) {
				t.Errorf("pod over the quota: %v\n%s\nwant %s", err, out, want)
			}

			// Priority classes.
			pc := "high-" + v
			if out := run("", "create", "priorityclass", pc, "--value=1000", "--description=important"); !strings.Contains(out, "priorityclass.scheduling.k8s.io/"+pc+" created") {
				t.Fatalf("create priorityclass:\n%s", out)
			}
			out = run("", "get", "pc", pc)
			if !strings.Contains(squeeze(out), "NAME VALUE GLOBAL-DEFAULT AGE") || !strings.Contains(squeeze(out), pc+" 1000 false") {
				t.Errorf("get pc:\n%s", out)
			}
			run(`apiVersion: v1
kind: Pod
metadata: {name: important}
spec:
  priorityClassName: `+pc+`
  containers: [{name: app, image: nginx}]
`, "create", "-n", ns, "-f", "-")
			if out := run("", "get", "pod", "important", "-n", ns, "-o", "jsonpath={.spec.priority} {.spec.preemptionPolicy}"); out != "1000 PreemptLowerPriority" {
				t.Errorf("pod of class %s: got %q", pc, out)
			}
			out, err = kubectl(`apiVersion: v1
kind: Pod
metadata: {name: greedy}
spec:
  priority: 2000000000
  containers: [{name: app, image: nginx}]
`, "create", "-n", ns, "-f", "-")
			if err == nil || !strings.Contains(out, "the integer value of priority (2000000000) must not be provided in pod spec") {
				t.Errorf("pod setting its own priority: %v\n%s", err, out)
			}
		})
	}
}

// squeeze collapses runs of spaces, so that column widths do not matter.
func squeeze(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}
