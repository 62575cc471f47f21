// This file holds the test of kubectl get and patch with
// --subresource=status.

package gateway_test

import (
	"strings"
	"testing"
)

// TestKubectlStatusSubresource: kubectl get and patch --subresource=status
// read and write only the status, for every kind with a status
// subresource; a write of the main resource leaves the status alone.
func TestKubectlStatusSubresource(t *testing.T) {
	k := startKube(t, "kubectl.1.33")
	k.ok([]string{"create", "deployment", "web", "--image", "nginx", "--replicas", "2"})
	k.ok([]string{"get", "deployment", "web", "--subresource=status"}, "READY", "0/2")
	if out := k.ok([]string{"get", "deployment", "web", "--subresource=scale"}); !strings.HasPrefix(strings.Join(strings.Fields(out), " "), "NAME DESIRED AVAILABLE AGE web 2 0 ") {
		t.Fatalf("kubectl get deployment web --subresource=scale:\n%s", out)
	}
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := k.withBinary(t, bin)
			// A status write ignores the spec.
			k.ok([]string{"patch", "deployment", "web", "--subresource=status", "--type=merge",
				"-p", `{"status":{"replicas":2,"readyReplicas":1,"availableReplicas":0},"spec":{"replicas":5}}`}, "deployment.apps/web patched")
			if got := k.ok([]string{"get", "deployment", "web", "-o", "jsonpath={.spec.replicas} {.status.readyReplicas}"}); got != "2 1" {
				t.Fatalf("after the status patch: spec.replicas, status.readyReplicas = %q, want 2 1", got)
			}
			k.ok([]string{"patch", "deployment", "web", "--subresource=status", "--type=json",
				"-p", `[{"op":"replace","path":"/status/readyReplicas","value":2}]`}, "patched")
			k.ok([]string{"patch", "deployment", "web", "--subresource=status", "--type=strategic",
				"-p", `{"status":{"availableReplicas":2}}`}, "patched")
			if got := k.ok([]string{"get", "deployment", "web", "-o", "jsonpath={.status.readyReplicas} {.status.availableReplicas}"}); got != "2 2" {
				t.Fatalf("status = %q, want 2 2", got)
			}
			// A main-resource write ignores the status.
			k.ok([]string{"patch", "deployment", "web", "--type=merge", "-p", `{"status":{"readyReplicas":0}}`})
			if got := k.ok([]string{"get", "deployment", "web", "-o", "jsonpath={.status.readyReplicas}"}); got != "2" {
				t.Fatalf("status.readyReplicas = %q after a main-resource patch, want 2", got)
			}
		})
	}
	// Status writes are validated as Kubernetes validates them (its words,
	// recorded from kube-apiserver v1.33.13).
	k.fails([]string{"patch", "deployment", "web", "--subresource=status", "--type=merge", "-p", `{"status":{"replicas":-1,"readyReplicas":5}}`},
		`The Deployment "web" is invalid: 
* status.replicas: Invalid value: -1: must be greater than or equal to 0
* status.updatedReplicas: Invalid value: 0: cannot be greater than status.replicas
* status.readyReplicas: Invalid value: 5: cannot be greater than status.replicas
* status.availableReplicas: Invalid value: 2: cannot be greater than status.replicas`)
	// A replace of the status (PUT) takes the status only.
	cur := k.ok([]string{"get", "deployment", "web", "-o", "json"})
	cur = strings.Replace(cur, `"replicas": 2,`, `"replicas": 4,`, 1) // spec.replicas
	cur = strings.Replace(cur, `"availableReplicas": 2`, `"availableReplicas": 1`, 1)
	if !strings.Contains(cur, `"replicas": 4,`) || !strings.Contains(cur, `"availableReplicas": 1`) {
		t.Fatalf("kubectl get -o json:\n%s", cur)
	}
	k.ok([]string{"replace", "--subresource=status", "-f", k.file("replace.json", cur)}, "replaced")
	if got := k.ok([]string{"get", "deployment", "web", "-o", "jsonpath={.spec.replicas} {.status.availableReplicas}"}); got != "2 1" {
		t.Fatalf("after the status replace: %q, want 2 1", got)
	}
	// Server-side apply of the status: the status patches' manager owns
	// the fields (a conflict naming it, with its subresource), the spec
	// in the applied configuration is ignored.
	applied := k.file("status.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec: {replicas: 9}
status: {replicas: 7, readyReplicas: 3}
`)
	k.fails([]string{"apply", "--server-side", "--subresource=status", "--field-manager=tester", "-f", applied},
		`conflicts with "kubectl-patch" with subresource "status" using apps/v1:`)
	k.ok([]string{"apply", "--server-side", "--subresource=status", "--field-manager=tester", "--force-conflicts", "-f", applied}, "serverside-applied")
	if got := k.ok([]string{"get", "deployment", "web", "-o", "jsonpath={.spec.replicas} {.status.replicas} {.status.readyReplicas}"}); got != "2 7 3" {
		t.Fatalf("after the status apply: %q, want 2 7 3", got)
	}
	mf := k.ok([]string{"get", "deployment", "web", "--show-managed-fields", "-o",
		`jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation}/{.subresource};{end}`})
	if !strings.Contains(mf, "tester/Apply/status;") || !strings.Contains(mf, "kubectl-create/Update/;") {
		t.Fatalf("managedFields: %s", mf)
	}
	// Finalizers and owner references change through status (not a Pod's
	// owner references), labels too (not a Deployment's), as in Kubernetes.
	owner := `"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"cm","uid":"00000000-0000-4000-8000-000000000001"}]`
	k.ok([]string{"patch", "deployment", "web", "--subresource=status", "--type=merge", "-p",
		`{"metadata":{"labels":{"x":"y"},"finalizers":["example.com/x"],` + owner + `}}`})
	if got := k.ok([]string{"get", "deployment", "web", "-o", "jsonpath={.metadata.labels.x}/{.metadata.finalizers}/{.metadata.ownerReferences[0].name}"}); got != `/["example.com/x"]/cm` {
		t.Fatalf("deployment metadata after a status patch: %s", got)
	}
	k.ok([]string{"patch", "deployment", "web", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`})
	k.ok([]string{"run", "p", "--image", "busybox"})
	k.ok([]string{"patch", "pod", "p", "--subresource=status", "--type=merge", "-p",
		`{"metadata":{"labels":{"x":"y"},"finalizers":["example.com/x"],` + owner + `}}`})
	if got := k.ok([]string{"get", "pod", "p", "-o", "jsonpath={.metadata.labels.x}/{.metadata.finalizers}/{.metadata.ownerReferences}"}); got != `y/["example.com/x"]/` {
		t.Fatalf("pod metadata after a status patch: %s", got)
	}
	k.ok([]string{"patch", "pod", "p", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`})
	k.ok([]string{"patch", "pod", "p", "--subresource=status", "--type=merge", "-p",
		`{"status":{"phase":"Running","containerStatuses":[{"name":"p","image":"busybox","imageID":"","ready":true,"restartCount":0,"state":{"running":{}}}]}}`})
	out := k.ok([]string{"get", "pod", "p"})
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "p 1/1 Running 0") {
		t.Fatalf("kubectl get pod p:\n%s", out)
	}
	k.ok([]string{"get", "pod", "p", "--subresource=status"}, "Running")
	k.ok([]string{"create", "namespace", "ns1"})
	k.ok([]string{"patch", "namespace", "ns1", "--subresource=status", "--type=merge", "-p", `{"status":{"conditions":[{"type":"NamespaceDeletionDiscoveryFailure","status":"False"}]}}`})
	k.fails([]string{"patch", "namespace", "ns1", "--subresource=status", "--type=merge", "-p", `{"status":{"phase":"Bogus"}}`},
		"The Namespace \"ns1\" is invalid: status.Phase: Invalid value: \"Bogus\": may only be 'Active' if `deletionTimestamp` is empty")
	k.ok([]string{"create", "service", "loadbalancer", "lb", "--tcp", "80:8080"})
	k.ok([]string{"patch", "service", "lb", "--subresource=status", "--type=merge", "-p", `{"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.7"}]}}}`})
	k.ok([]string{"get", "service", "lb"}, "203.0.113.7")
	// A kind without a status subresource: 404, as in Kubernetes.
	k.ok([]string{"create", "configmap", "cm"})
	k.fails([]string{"patch", "configmap", "cm", "--subresource=status", "--type=merge", "-p", `{"data":{"a":"b"}}`}, "NotFound")
	k.fails([]string{"get", "configmap", "cm", "--subresource=status"}, "NotFound")
}
