// This file holds the kubectl harness (the real kubectl against a gateway in
// front of an in-process API service) and the end-to-end kubectl flows it
// drives.

package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/internal/testutil"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

// kube runs the real kubectl against a gateway in front of an in-process
// API service (internal/kubectltest), reporting to t.
type kube struct {
	*kubectltest.Kubectl
	t *testing.T
	// conn reaches the API service directly, as admin.
	conn grpc.ClientConnInterface
}

// startKube starts a store, the API service and the gateway (HTTPS, the
// bearer token forwarded to the API service) with a kubeconfig for user
// admin, for the kubectl named bin.
func startKube(t *testing.T, bin string) *kube {
	t.Helper()
	env := apiservertest.Start(t, apiservertest.Options{})
	k := kubectltest.StartBinary(t, env.Dial(t, ""), apiservertest.AdminToken, bin)
	return &kube{Kubectl: k, t: t, conn: env.Dial(t, apiservertest.AdminToken)}
}

// with returns k reporting to t (for subtests).
func (k *kube) with(t *testing.T) *kube {
	c := *k
	c.t = t
	return &c
}

// withBinary returns k running the kubectl named bin, reporting to t.
func (k *kube) withBinary(t *testing.T, bin string) *kube {
	c := k.with(t)
	c.Kubectl = k.WithBinary(t, bin)
	return c
}

// run runs kubectl with args and returns its combined output and error.
func (k *kube) run(args ...string) (string, error) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := k.Command(ctx, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// ok runs kubectl and fails unless it succeeds with output containing every want.
func (k *kube) ok(args []string, wants ...string) string {
	k.t.Helper()
	out, err := k.run(args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			k.t.Fatalf("kubectl %s: got\n%s\nwant it to contain %q", strings.Join(args, " "), out, w)
		}
	}
	return out
}

// fails runs kubectl and fails unless it fails with output containing want.
func (k *kube) fails(args []string, want string) {
	k.t.Helper()
	out, err := k.run(args...)
	if err == nil {
		k.t.Fatalf("kubectl %s: succeeded, want failure %q\n%s", strings.Join(args, " "), want, out)
	}
	if !strings.Contains(out, want) {
		k.t.Fatalf("kubectl %s: got\n%s\nwant it to contain %q", strings.Join(args, " "), out, want)
	}
}

func (k *kube) file(name, content string) string {
	k.t.Helper()
	p := filepath.Join(k.Dir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		k.t.Fatal(err)
	}
	return p
}

const deployYAML = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: %d
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: %s
`

const podYAML = `apiVersion: v1
kind: Pod
metadata:
  name: mypod
  labels: {tier: %s}
spec:
  containers:
  - name: main
    image: busybox
`

// coreFlow is the flow every kubectl version must pass.
func coreFlow(t *testing.T, k *kube) {
	dep := k.file("deploy.yaml", fmt.Sprintf(deployYAML, 2, "nginx:1.25"))
	pod := k.file("pod.yaml", fmt.Sprintf(podYAML, "a"))
	k.ok([]string{"apply", "-f", dep}, "deployment.apps/web created")
	k.ok([]string{"apply", "-f", pod}, "pod/mypod created")
	k.ok([]string{"apply", "-f", pod}, "pod/mypod unchanged")
	k.ok([]string{"apply", "-f", k.file("pod2.yaml", fmt.Sprintf(podYAML, "b"))}, "pod/mypod configured")
	k.ok([]string{"apply", "-f", k.file("deploy2.yaml", fmt.Sprintf(deployYAML, 3, "nginx:1.26"))}, "deployment.apps/web configured")
	k.ok([]string{"get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}"}, "3 nginx:1.26")
	k.ok([]string{"get", "pods"}, "NAME", "READY", "STATUS", "RESTARTS", "AGE", "mypod", "0/1", "Pending")
	k.ok([]string{"get", "pod", "mypod", "-o", "yaml"}, "kind: Pod", "name: mypod", "tier: b")
	k.ok([]string{"get", "deployments"}, "UP-TO-DATE", "AVAILABLE", "web")
	k.ok([]string{"scale", "deployment", "web", "--replicas=5"}, "deployment.apps/web scaled")
	k.ok([]string{"get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"}, "5")
	k.ok([]string{"label", "pod", "mypod", "env=prod"}, "pod/mypod labeled")
	k.ok([]string{"get", "pods", "-l", "env=prod", "-o", "name"}, "pod/mypod")
	k.fails([]string{"get", "pod", "nosuch"}, `Error from server (NotFound): pods "nosuch" not found`)
	k.fails([]string{"create", "-f", pod}, `Error from server (AlreadyExists)`)
	k.ok([]string{"delete", "pod", "mypod", "--grace-period=0", "--force"}, `pod "mypod" force deleted`)
	k.ok([]string{"delete", "-f", dep}, `deployment.apps "web" deleted`)
	k.ok([]string{"version"}, "Server Version")
}

func TestKubectlCoreFlow(t *testing.T) {
	for _, bin := range []string{"kubectl", "kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			coreFlow(t, startKube(t, bin))
		})
	}
}

// TestKubectlFlow covers the rest of what people do with kubectl, with the
// kubectl on PATH.
func TestKubectlFlow(t *testing.T) {
	k := startKube(t, "kubectl")
	pod := k.file("pod.yaml", fmt.Sprintf(podYAML, "a"))
	k.ok([]string{"apply", "-f", pod}, "pod/mypod created")
	k.ok([]string{"create", "namespace", "team"}, "namespace/team created")
	k.ok([]string{"run", "other", "--image=busybox", "-n", "team", "--labels=tier=z"}, "pod/other created")

	t.Run("server-side apply", func(t *testing.T) {
		k := k.with(t)
		dep := k.file("ssa.yaml", strings.ReplaceAll(fmt.Sprintf(deployYAML, 1, "nginx:1.25"), "web", "api"))
		k.ok([]string{"apply", "--server-side", "-f", dep}, "deployment.apps/api serverside-applied")
		dep2 := k.file("ssa2.yaml", strings.ReplaceAll(fmt.Sprintf(deployYAML, 4, "nginx:1.27"), "web", "api"))
		k.ok([]string{"apply", "--server-side", "-f", dep2}, "deployment.apps/api serverside-applied")
		k.ok([]string{"get", "deploy", "api", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}"}, "4 nginx:1.27")
		k.ok([]string{"rollout", "restart", "deployment/api"}, "deployment.apps/api restarted")
		k.ok([]string{"get", "deploy", "api", "-o", "jsonpath={.spec.template.metadata.annotations}"}, "kubectl.kubernetes.io/restartedAt")
		dry := k.file("ssa3.yaml", strings.ReplaceAll(fmt.Sprintf(deployYAML, 7, "nginx:1.27"), "web", "api"))
		k.ok([]string{"apply", "--server-side", "--dry-run=server", "-f", dry}, "serverside-applied (server dry run)")
		k.ok([]string{"get", "deploy", "api", "-o", "jsonpath={.spec.replicas}"}, "4")
	})
	t.Run("server-side apply field managers", func(t *testing.T) {
		k := k.with(t)
		cm := func(name, data string) string {
			return k.file(name, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned\ndata:\n"+data)
		}
		k.ok([]string{"apply", "--server-side", "--field-manager=alice", "-f", cm("alice.yaml", "  a: \"1\"\n")}, "configmap/owned serverside-applied")
		k.ok([]string{"get", "cm", "owned", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager} {.metadata.managedFields[*].operation}"}, "alice Apply")
		// bob sets another field: shared object, no conflict.
		k.ok([]string{"apply", "--server-side", "--field-manager=bob", "-f", cm("bob.yaml", "  b: \"2\"\n")}, "serverside-applied")
		// bob sets alice's field: 409 Conflict naming alice and the field.
		bob := cm("bob2.yaml", "  a: \"9\"\n  b: \"2\"\n")
		k.fails([]string{"apply", "--server-side", "--field-manager=bob", "-f", bob}, `conflict with "alice": .data.a`)
		k.ok([]string{"get", "cm", "owned", "-o", "jsonpath={.data.a}"}, "1")
		// --force-conflicts: bob takes the field over.
		k.ok([]string{"apply", "--server-side", "--field-manager=bob", "--force-conflicts", "-f", bob}, "serverside-applied")
		k.ok([]string{"get", "cm", "owned", "-o", "jsonpath={.data.a}{.data.b}"}, "92")
		k.ok([]string{"get", "cm", "owned", "--show-managed-fields", "-o", "yaml"}, "manager: bob", "f:a: {}")
		aliceOwns := k.ok([]string{"get", "cm", "owned", "--show-managed-fields", "-o", `jsonpath={.metadata.managedFields[?(@.manager=="alice")].fieldsV1}`})
		if strings.Contains(aliceOwns, `"f:a"`) {
			t.Errorf("after bob's forced apply alice still owns .data.a: %s", aliceOwns)
		}
		// kubectl label records its own Update entry; an apply of that
		// label by another manager then conflicts with it.
		k.ok([]string{"label", "cm", "owned", "team=blue"}, "labeled")
		k.ok([]string{"get", "cm", "owned", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}"}, "kubectl-label")
		k.fails([]string{"apply", "--server-side", "--field-manager=carol", "-f",
			k.file("carol.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned\n  labels: {team: red}\n")}, `conflict with "kubectl-label"`)
		// A Pod (immutable spec): applying a label must change nothing else.
		k.ok([]string{"apply", "--server-side", "--field-manager=dave", "-f", k.file("ssapod.yaml", strings.ReplaceAll(fmt.Sprintf(podYAML, "x1"), "mypod", "ssapod"))}, "pod/ssapod serverside-applied")
		k.ok([]string{"apply", "--server-side", "--field-manager=dave", "-f", k.file("ssapod2.yaml", strings.ReplaceAll(fmt.Sprintf(podYAML, "x2"), "mypod", "ssapod"))}, "pod/ssapod serverside-applied")
		k.ok([]string{"get", "pod", "ssapod", "-o", "jsonpath={.metadata.labels.tier}"}, "x2")
		// alice, applying without the field, no longer removes it: bob owns it.
		k.ok([]string{"apply", "--server-side", "--field-manager=alice", "-f", cm("alice2.yaml", "  c: \"3\"\n")}, "serverside-applied")
		k.ok([]string{"get", "cm", "owned", "-o", "jsonpath={.data.a}{.data.b}{.data.c}"}, "923")
	})
	t.Run("get variants", func(t *testing.T) {
		k := k.with(t)
		k.ok([]string{"get", "pods", "-o", "wide"}, "IP", "NODE", "NOMINATED NODE", "READINESS GATES", "mypod")
		k.ok([]string{"get", "pod", "mypod", "-o", "json"}, `"kind": "Pod"`, `"name": "mypod"`)
		k.ok([]string{"get", "pods", "-A"}, "NAMESPACE", "default", "team", "mypod", "other")
		k.ok([]string{"get", "pods", "--show-labels"}, "LABELS", "tier=a")
		out := k.ok([]string{"get", "pods", "-A", "--sort-by=.metadata.name", "-o", "name"}, "pod/mypod", "pod/other")
		if strings.Index(out, "pod/mypod") > strings.Index(out, "pod/other") {
			t.Errorf("--sort-by: got\n%s\nwant mypod before other", out)
		}
		k.ok([]string{"get", "pods", "-A", "--sort-by=.metadata.name"}, "mypod", "other")
		out = k.ok([]string{"get", "pods", "-A", "--field-selector", "metadata.name=other", "-o", "name"}, "pod/other")
		if strings.Contains(out, "mypod") {
			t.Errorf("--field-selector: got\n%s\nwant only pod/other", out)
		}
		k.ok([]string{"get", "namespaces"}, "STATUS", "team")
		k.ok([]string{"get", "events", "-A"})
		k.ok([]string{"api-resources"}, "deployments", "deploy", "apps/v1", "pods", "po")
		k.ok([]string{"get", "all"}, "pod/mypod", "deployment.apps/api")
		k.ok([]string{"get", "--raw", "/healthz"}, "ok")
	})
	t.Run("describe label annotate", func(t *testing.T) {
		k := k.with(t)
		uid := k.ok([]string{"get", "pod", "mypod", "-o", "jsonpath={.metadata.uid}"})
		ev := k.file("event.yaml", fmt.Sprintf(`apiVersion: v1
kind: Event
metadata: {name: mypod.1}
involvedObject: {kind: Pod, namespace: default, name: mypod, uid: %q, apiVersion: v1}
reason: Scheduled
message: Successfully assigned default/mypod to n1
type: Normal
source: {component: default-scheduler}
count: 1
firstTimestamp: "2026-01-01T00:00:00Z"
lastTimestamp: "2026-01-01T00:00:00Z"
`, uid))
		k.ok([]string{"create", "-f", ev}, "event/mypod.1 created")
		k.ok([]string{"describe", "pod", "mypod"}, "Name:", "mypod", "Containers:", "Events:", "Scheduled", "Successfully assigned default/mypod to n1")
		k.ok([]string{"get", "events"}, "LAST SEEN", "Scheduled", "pod/mypod")
		k.ok([]string{"annotate", "pod", "mypod", "note=hello"}, "pod/mypod annotated")
		k.ok([]string{"get", "pod", "mypod", "-o", "jsonpath={.metadata.annotations.note}"}, "hello")
		k.ok([]string{"label", "pod", "mypod", "tier=c", "--overwrite"}, "pod/mypod labeled")
		// Not scheduled: no log yet, an empty answer as in Kubernetes
		// (podlog_test.go has the logs of running pods).
		if out := k.ok([]string{"logs", "mypod"}); strings.TrimSpace(out) != "" {
			t.Errorf("kubectl logs of an unscheduled pod: got %q, want nothing", out)
		}
	})
	t.Run("watch", func(t *testing.T) {
		k := k.with(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := k.Command(ctx, "get", "pods", "-w")
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = cmd.Wait() }()
		outputContains(t, &out, "mypod")
		k.ok([]string{"run", "watched", "--image=busybox"}, "pod/watched created")
		outputContains(t, &out, "watched")

		// One object: kubectl drops the first event of the watch
		// (?fieldSelector=metadata.name=watched&resourceVersion=0) and
		// prints the following ones.
		one := k.Command(ctx, "get", "pod", "watched", "-w", "--output-watch-events")
		var oneOut syncBuffer
		one.Stdout, one.Stderr = &oneOut, &oneOut
		if err := one.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = one.Wait() }()
		outputContains(t, &oneOut, "watched")
		k.ok([]string{"label", "pod", "watched", "seen=yes"}, "labeled")
		outputContains(t, &oneOut, "MODIFIED")
	})
	t.Run("rollout status", func(t *testing.T) {
		// No controllers run here: the test plays the Deployment
		// controller and reports the rollout complete. kubectl rollout
		// status then prints its verdict and must exit (it waits for its
		// reflector's watch to stop, which needs the watch's response
		// headers sent when the watch starts; k.run kills it after 60s).
		k := k.with(t)
		k.ok([]string{"apply", "-f", k.file("roll.yaml", strings.ReplaceAll(fmt.Sprintf(deployYAML, 2, "nginx:1.25"), "web", "roll"))}, "created")
		deps := client.Must[*appsv1.Deployment](k.conn)
		ctx := context.Background()
		d, err := deps.Get(ctx, "default", "roll")
		if err != nil {
			t.Fatal(err)
		}
		d.Status = &appsv1.DeploymentStatus{ObservedGeneration: d.GetMetadata().GetGeneration(),
			Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
		if _, err := deps.UpdateStatus(ctx, d); err != nil {
			t.Fatal(err)
		}
		k.ok([]string{"rollout", "status", "deployment/roll"}, `deployment "roll" successfully rolled out`)
		k.ok([]string{"rollout", "status", "deployment/roll", "--watch=false"}, `deployment "roll" successfully rolled out`)
	})
	t.Run("errors", func(t *testing.T) {
		k := k.with(t)
		k.fails([]string{"get", "deploy", "nosuch"}, `Error from server (NotFound): deployments.apps "nosuch" not found`)
		k.fails([]string{"create", "namespace", "team"}, `Error from server (AlreadyExists): namespaces "team" already exists`)
		stale := k.ok([]string{"get", "pod", "mypod", "-o", "yaml"})
		k.ok([]string{"label", "pod", "mypod", "bump=1"}, "labeled")
		k.fails([]string{"replace", "-f", k.file("stale.yaml", stale)}, "Error from server (Conflict)")
		bad := k.file("bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers: []\n")
		k.fails([]string{"apply", "-f", bad}, `The Pod "bad" is invalid`)
		unknown := k.file("unknown.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: unk\nspec:\n  foo: 1\n  containers:\n  - name: a\n    image: busybox\n")
		k.fails([]string{"apply", "-f", unknown}, `unknown field "spec.foo"`)
	})
	t.Run("delete", func(t *testing.T) {
		k := k.with(t)
		// Orphan deletion holds the object with the orphan finalizer until the
		// garbage collector (not running here) releases it: do not wait.
		k.ok([]string{"delete", "deployment", "api", "--cascade=orphan", "--wait=false"}, `deployment.apps "api" deleted`)
		k.ok([]string{"delete", "-f", pod, "--grace-period=0", "--force"}, `pod "mypod" force deleted`)
		k.ok([]string{"delete", "pod", "other", "-n", "team", "--cascade=background", "--grace-period=0", "--force"}, `pod "other" force deleted`)
		k.fails([]string{"get", "pod", "mypod"}, "NotFound")
	})
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// outputContains waits (at most 30s) until out contains want.
func outputContains(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("the output to contain %q", want), func() (bool, string) {
		got := out.String()
		return strings.Contains(got, want), "\n" + got
	})
}
