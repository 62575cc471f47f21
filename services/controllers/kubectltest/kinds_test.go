// This file holds the kubectl tests (1.27 and 1.33, through the gateway)
// of EndpointSlices kept by the controller and of the kinds served at the
// storage level: get endpointslices prints kube-apiserver's columns for the
// controller's slice; each new kind is applied (created, then unchanged),
// listed with its columns (and short name), described and deleted.
package kubectltest

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/internal/kubectltest"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

// fields joins s's whitespace-separated words with single spaces.
func fields(s string) string { return strings.Join(strings.Fields(s), " ") }

func TestKubectlEndpointSlices(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	conn := startControlPlane(t, env, false, controllers.EndpointSlice)
	ctx := context.Background()
	gwConn := env.Dial(t, "")
	pods := client.Must[*corev1.Pod](conn)
	slices := client.Must[*discoveryv1.EndpointSlice](conn)
	if _, err := client.Must[*corev1.Node](conn).Create(ctx, &corev1.Node{Metadata: &metav1.ObjectMeta{Name: "node-a"}}); err != nil {
		t.Fatal(err)
	}

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
			ns := "es" + strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl."), ".", "")
			run("", "create", "ns", ns)
			run(`apiVersion: v1
kind: Service
metadata: {name: web, namespace: `+ns+`}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: `+ns+`, labels: {app: web}}
spec:
  nodeName: node-a
  containers: [{name: web, image: nginx, ports: [{name: http, containerPort: 8080}]}]
`, "apply", "-f", "-")
			p, err := pods.Get(ctx, ns, "web-1")
			if err != nil {
				t.Fatal(err)
			}
			p.Status = &corev1.PodStatus{Phase: "Running", PodIp: "10.2.0.5",
				Conditions: []*corev1.PodCondition{{Type: "Ready", Status: "True", LastTransitionTime: timestamppb.Now()}}}
			if _, err := pods.UpdateStatus(ctx, p); err != nil {
				t.Fatal(err)
			}
			// The controller writes the slice from the pod's watch event:
			// wait for it with a watch, then read it with kubectl.
			wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
			defer wcancel()
			w, err := slices.Watch(wctx, ns, client.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for {
				ev, err := w.Next()
				if err != nil {
					t.Fatalf("waiting for the slice of %s/web: %v", ns, err)
				}
				if len(ev.Object.GetEndpoints()) == 1 {
					break
				}
			}
			w.Close()
			out := run("", "get", "endpointslices", "-n", ns)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 2 || !strings.HasPrefix(fields(lines[0]), "NAME ADDRESSTYPE PORTS ENDPOINTS AGE") ||
				!strings.HasPrefix(fields(lines[1]), "web-") || !strings.Contains(fields(lines[1]), " IPv4 8080 10.2.0.5 ") {
				t.Errorf("kubectl get endpointslices:\n%s", out)
			}
			out = run("", "get", "endpointslices", "-n", ns, "-l", "kubernetes.io/service-name=web",
				"-o", "jsonpath={.items[0].metadata.labels.endpointslice\\.kubernetes\\.io/managed-by} {.items[0].endpoints[0].conditions.ready} {.items[0].endpoints[0].targetRef.name} {.items[0].ports[0].name}")
			if out != "endpointslice-controller.k8s.io true web-1 http" {
				t.Errorf("kubectl get endpointslices -o jsonpath: %q", out)
			}
			if out := run("", "describe", "endpointslices", "-n", ns); !strings.Contains(out, "AddressType:  IPv4") || !strings.Contains(out, "10.2.0.5") {
				t.Errorf("kubectl describe endpointslices:\n%s", out)
			}
		})
	}
}

// kindCase is one kind the test applies, lists, describes and deletes.
// Manifests spell out what defaulting would add inside lists kubectl
// replaces whole (a NetworkPolicy port's protocol): otherwise the second
// apply's three-way merge sends that list again and reports "configured".
type kindCase struct {
	resource, short, name string
	namespaced            bool
	manifest              string
	header                string // the first words of get's header
	row                   string // words get prints after the name
	describe              string // a line describe prints
}

func TestKubectlStorageLevelKinds(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	gwConn := env.Dial(t, "")
	cases := []kindCase{
		{resource: "podtemplates", name: "web", namespaced: true, manifest: `apiVersion: v1
kind: PodTemplate
metadata: {name: web}
template:
  metadata: {labels: {app: web}}
  spec: {containers: [{name: web, image: nginx}]}
`, header: "NAME CONTAINERS IMAGES POD LABELS", row: "web nginx app=web", describe: "Image:"},
		{resource: "ingresses", short: "ing", name: "web", namespaced: true, manifest: `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  ingressClassName: nginx
  rules:
  - host: web.example.com
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
`, header: "NAME CLASS HOSTS ADDRESS PORTS AGE", row: "nginx web.example.com 80", describe: "web.example.com"},
		{resource: "ingressclasses", name: "nginx", manifest: `apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: nginx}
spec: {controller: k8s.io/ingress-nginx}
`, header: "NAME CONTROLLER PARAMETERS AGE", row: "k8s.io/ingress-nginx <none>", describe: "k8s.io/ingress-nginx"},
		{resource: "networkpolicies", short: "netpol", name: "deny", namespaced: true, manifest: `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}}], ports: [{port: 80, protocol: TCP}]}]
`, header: "NAME POD-SELECTOR AGE", row: "app=web", describe: "10.0.0.0/8"},
		{resource: "runtimeclasses", name: "gvisor", manifest: `apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
`, header: "NAME HANDLER AGE", row: "runsc", describe: "runsc"},
		{resource: "csidrivers", name: "csi.example.com", manifest: `apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: csi.example.com}
spec: {podInfoOnMount: true}
`, header: "NAME ATTACHREQUIRED PODINFOONMOUNT STORAGECAPACITY TOKENREQUESTS REQUIRESREPUBLISH MODES AGE",
			row: "true true false <unset> false Persistent", describe: "Attach Required:"},
		{resource: "csinodes", name: "node-a", manifest: `apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: node-a}
spec: {drivers: [{name: csi.example.com, nodeID: node-a}]}
`, header: "NAME DRIVERS AGE", row: "1", describe: "csi.example.com"},
		{resource: "volumeattachments", name: "va-1", manifest: `apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {name: va-1}
spec: {attacher: csi.example.com, nodeName: node-a, source: {persistentVolumeName: pv-1}}
`, header: "NAME ATTACHER PV NODE ATTACHED AGE", row: "csi.example.com pv-1 node-a false", describe: "csi.example.com"},
	}

	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, gwConn, apiservertest.AdminToken, bin)
			kubectl := kubectlRunner(k, 60*time.Second)
			for _, c := range cases {
				t.Run(c.resource, func(t *testing.T) {
					run := func(stdin string, args ...string) string {
						t.Helper()
						out, err := kubectl(stdin, args...)
						if err != nil {
							t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
						}
						return out
					}
					if out := run(c.manifest, "apply", "-f", "-"); !strings.Contains(out, " created") {
						t.Fatalf("kubectl apply: %s", out)
					}
					if out := run(c.manifest, "apply", "-f", "-"); !strings.Contains(out, " unchanged") {
						t.Errorf("kubectl apply again: %s", out)
					}
					res := c.resource
					if c.short != "" {
						res = c.short
					}
					out := run("", "get", res, c.name)
					lines := strings.Split(strings.TrimSpace(out), "\n")
					if len(lines) != 2 || !strings.HasPrefix(fields(lines[0]), c.header) || !strings.HasPrefix(fields(lines[1]), c.name+" "+c.row) {
						t.Errorf("kubectl get %s %s: want header %q and row %q\n%s", res, c.name, c.header, c.name+" "+c.row, out)
					}
					if out := run("", "describe", c.resource, c.name); !strings.Contains(out, c.describe) {
						t.Errorf("kubectl describe %s %s: no %q in\n%s", c.resource, c.name, c.describe, out)
					}
					if out := run("", "delete", c.resource, c.name); !strings.Contains(out, "deleted") {
						t.Errorf("kubectl delete: %s", out)
					}
					if out, err := kubectl("", "get", c.resource, c.name); err == nil || !strings.Contains(out, "NotFound") {
						t.Errorf("kubectl get after delete: %v\n%s", err, out)
					}
				})
			}
		})
	}
}
