// This file holds the ReplicationController test with the real kubectl
// (1.27 and 1.33) through the gateway, on a node agent with the built-in
// simulated runtime, the scheduler and the controllers: apply -f, get rc
// (and -o wide), scale rc, describe rc, explain rc.spec, an invalid RC's
// message as kube-apiserver words it, delete rc collecting the pods.
package kubectltest

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

const rcYAML = `apiVersion: v1
kind: ReplicationController
metadata:
  name: web
spec:
  replicas: 2
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: c
        image: kplane.test/web:1
`

// rcMismatchYAML's selector does not match its template's labels.
const rcMismatchYAML = `apiVersion: v1
kind: ReplicationController
metadata: {name: mismatch}
spec:
  selector: {app: a}
  template:
    metadata: {labels: {app: b}}
    spec: {containers: [{name: c, image: nginx}]}
`

func TestKubectlReplicationController(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{TLS: true})
	conn := startControlPlane(t, env, true, controllers.ReplicationController, controllers.GarbageCollector)
	ctx := context.Background()
	startSimNode(t, env, "n1")
	pods := client.Must[*corev1.Pod](conn)
	gwConn := env.Dial(t, "")

	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, gwConn, apiservertest.AdminToken, bin)
			kubectl := kubectlRunner(k, 100*time.Second)
			ns := "rc" + strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl."), ".", "")
			run := func(args ...string) string {
				t.Helper()
				out, err := kubectl("", append(args, "-n", ns)...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			ready := func(n string) {
				t.Helper()
				run("wait", "--for=jsonpath={.status.readyReplicas}="+n, "rc/web", "--timeout=90s")
			}
			if out, err := kubectl("", "create", "ns", ns); err != nil {
				t.Fatalf("create ns: %v\n%s", err, out)
			}
			if out, err := kubectl(rcYAML, "apply", "-n", ns, "-f", "-"); err != nil || !strings.Contains(out, "replicationcontroller/web created") {
				t.Fatalf("apply: %v\n%s", err, out)
			}
			ready("2")
			out := run("get", "rc")
			if !regexp.MustCompile(`NAME\s+DESIRED\s+CURRENT\s+READY\s+AGE\nweb\s+2\s+2\s+2\s+\S+\n`).MatchString(out) {
				t.Errorf("get rc:\n%s", out)
			}
			out = run("get", "rc", "-o", "wide")
			if !regexp.MustCompile(`NAME\s+DESIRED\s+CURRENT\s+READY\s+AGE\s+CONTAINERS\s+IMAGES\s+SELECTOR\nweb\s+2\s+2\s+2\s+\S+\s+c\s+kplane.test/web:1\s+app=web\n`).MatchString(out) {
				t.Errorf("get rc -o wide:\n%s", out)
			}
			if out, err := kubectl(rcYAML, "apply", "-n", ns, "-f", "-"); err != nil || !strings.Contains(out, "replicationcontroller/web unchanged") {
				t.Errorf("apply again: %v\n%s", err, out)
			}
			if out := run("scale", "rc", "web", "--replicas=3"); !strings.Contains(out, "replicationcontroller/web scaled") {
				t.Errorf("scale: %s", out)
			}
			ready("3")
			out = run("describe", "rc", "web")
			for _, want := range []string{`Selector:\s+app=web`, `Labels:\s+app=web`, `Replicas:\s+3 current / 3 desired`,
				`Pods Status:\s+3 Running / 0 Waiting / 0 Succeeded / 0 Failed`, `Image:\s+kplane.test/web:1`, `SuccessfulCreate\s+.*Created pod: web-`} {
				if !regexp.MustCompile(want).MatchString(out) {
					t.Errorf("describe rc: no %s in\n%s", want, out)
				}
			}
			if out := run("scale", "rc", "web", "--replicas=1"); !strings.Contains(out, "replicationcontroller/web scaled") {
				t.Errorf("scale down: %s", out)
			}
			ready("1")
			if out := run("get", "all"); !strings.Contains(out, "replicationcontroller/web") {
				t.Errorf("get all has no replicationcontroller/web:\n%s", out)
			}
			if out := run("explain", "rc.spec"); !strings.Contains(out, "selector") || !strings.Contains(out, "template") || !strings.Contains(out, "minReadySeconds") {
				t.Errorf("explain rc.spec:\n%s", out)
			}
			// kube-apiserver v1.33.13's answer for the same object.
			const want = "The ReplicationController \"mismatch\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"b\"}: `selector` does not match template `labels`"
			if out, err := kubectl(rcMismatchYAML, "create", "-n", ns, "-f", "-"); err == nil || !strings.Contains(out, want) {
				t.Errorf("create an RC whose selector does not match: %v\n%s", err, out)
			}
			if out := run("delete", "rc", "web"); !strings.Contains(out, `replicationcontroller "web" deleted`) {
				t.Errorf("delete: %s", out)
			}
			waitNoPods(t, ctx, pods, ns)
		})
	}
}
