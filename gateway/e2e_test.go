package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/services/client/clienttest"
)

// kube runs the real kubectl against a gateway in front of an in-process
// API service.
type kube struct {
	t          *testing.T
	bin        string
	kubeconfig string
	cache      string
	dir        string
}

// startKube starts etcd, the API service and the gateway (HTTPS, the
// bearer token forwarded to the API service) and writes a kubeconfig for
// user admin.
func startKube(t *testing.T, bin string) *kube {
	t.Helper()
	kubectl := findKubectl(t, bin)
	env := clienttest.Start(t, clienttest.Options{})
	gw, err := gateway.New(gateway.Config{Conn: env.Dial(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(gw)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kplane
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: kplane
  context: {cluster: kplane, user: admin, namespace: default}
current-context: kplane
`, srv.URL, clienttest.AdminToken)
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return &kube{t: t, bin: kubectl, kubeconfig: kc, cache: filepath.Join(dir, "cache"), dir: dir}
}

// findKubectl finds bin on PATH or beside the kubectl dispatcher (the cloud
// SDK installs kubectl.1.27 … kubectl.1.33 there without linking them).
func findKubectl(t *testing.T, bin string) string {
	t.Helper()
	if p, err := exec.LookPath(bin); err == nil {
		return p
	}
	if d, err := exec.LookPath("kubectl"); err == nil {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			p := filepath.Join(filepath.Dir(real), bin)
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return testutil.RequireBinary(t, bin, "the Google Cloud SDK kubectl component (kubectl and kubectl.1.27 … kubectl.1.33)")
}

// run runs kubectl with args and returns its combined output and error.
func (k *kube) run(args ...string) (string, error) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig, "KUBECACHEDIR="+k.cache, "HOME="+k.dir)
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
	p := filepath.Join(k.dir, name)
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
