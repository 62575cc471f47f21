// This file holds the test of the columns kubectl get and kubectl get -o
// wide print for objects of every kind.

package gateway_test

import (
	"regexp"
	"strings"
	"testing"
)

// tableObjects are objects of every kind whose columns need no status.
const tableObjects = `apiVersion: v1
kind: ConfigMap
metadata: {name: cm-data}
data: {a: "1", b: "2"}
binaryData: {c: AAE=}
---
apiVersion: v1
kind: Secret
metadata: {name: secret-opaque}
data: {user: YQ==, pass: Yg==}
---
apiVersion: v1
kind: Endpoints
metadata: {name: ep-more}
subsets:
- addresses: [{ip: 10.0.0.1}, {ip: 10.0.0.2}, {ip: 10.0.0.3}, {ip: 10.0.0.4}, {ip: 10.0.0.5}]
  ports: [{port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: svc-nodeport}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, nodePort: 30080}]
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: lease-held}
spec: {holderIdentity: kcm-1_0b3f, leaseDurationSeconds: 15}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: role-reader}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: rb-mixed}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: role-reader}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: alice}
- {kind: Group, apiGroup: rbac.authorization.k8s.io, name: devs}
- {kind: ServiceAccount, name: builder, namespace: ci}
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: bob}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: vwc-one}
webhooks:
- name: v.example.com
  clientConfig: {url: "https://v.example.com/validate"}
  sideEffects: None
  admissionReviewVersions: [v1]
  rules: [{operations: [CREATE], apiGroups: [example.com], apiVersions: [v1], resources: [widgets]}]
`

// TestKubectlGetColumns checks that kubectl get (and -o wide) prints
// Kubernetes' columns for kinds that printed only NAME and AGE before.
func TestKubectlGetColumns(t *testing.T) {
	k := startKube(t, "kubectl")
	k.ok([]string{"apply", "-f", k.file("objs.yaml", tableObjects)})
	k.ok([]string{"apply", "-f", k.file("more.yaml", `apiVersion: v1
kind: Pod
metadata: {name: init-pod}
spec:
  initContainers: [{name: init, image: busybox}]
  containers: [{name: app, image: nginx}]
---
apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {node-role.kubernetes.io/control-plane: ""}
spec: {unschedulable: true}
`)})
	k.ok([]string{"patch", "pod", "init-pod", "--subresource=status", "--type=merge", "-p",
		`{"status":{"initContainerStatuses":[{"name":"init","image":"busybox","imageID":"","ready":false,"restartCount":4,"state":{"waiting":{"reason":"CrashLoopBackOff"}}}]}}`})
	k.ok([]string{"patch", "node", "node-a", "--subresource=status", "--type=merge", "-p",
		`{"status":{"conditions":[{"type":"Ready","status":"True"}],"addresses":[{"type":"InternalIP","address":"192.168.1.10"}],` +
			`"nodeInfo":{"kubeletVersion":"v1.33.13","osImage":"Debian","kernelVersion":"6.1.0","containerRuntimeVersion":"containerd://1.7.24"}}}`})
	age := `\d+s`
	for _, c := range []struct {
		args []string
		want []string // lines, spaces collapsed, as regular expressions
	}{
		{[]string{"get", "cm", "cm-data"}, []string{"NAME DATA AGE", "cm-data 3 " + age}},
		{[]string{"get", "secret", "secret-opaque"}, []string{"NAME TYPE DATA AGE", "secret-opaque Opaque 2 " + age}},
		{[]string{"get", "ep", "ep-more"}, []string{"NAME ENDPOINTS AGE",
			`ep-more 10\.0\.0\.1:8080,10\.0\.0\.2:8080,10\.0\.0\.3:8080 \+ 2 more\.\.\. ` + age}},
		{[]string{"get", "svc", "svc-nodeport", "-o", "wide"}, []string{"NAME TYPE CLUSTER-IP EXTERNAL-IP PORT\\(S\\) AGE SELECTOR",
			`svc-nodeport NodePort \S+ <none> 80:30080/TCP ` + age + ` app=web`}},
		{[]string{"get", "lease", "lease-held"}, []string{"NAME HOLDER AGE", "lease-held kcm-1_0b3f " + age}},
		{[]string{"get", "role", "role-reader"}, []string{"NAME CREATED AT", `role-reader \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`}},
		{[]string{"get", "rolebinding", "rb-mixed", "-o", "wide"}, []string{"NAME ROLE AGE USERS GROUPS SERVICEACCOUNTS",
			"rb-mixed Role/role-reader " + age + " alice, bob devs ci/builder"}},
		{[]string{"get", "validatingwebhookconfiguration", "vwc-one"}, []string{"NAME WEBHOOKS AGE", "vwc-one 1 " + age}},
		{[]string{"get", "pod", "init-pod", "-o", "wide"}, []string{"NAME READY STATUS RESTARTS AGE IP NODE NOMINATED NODE READINESS GATES",
			"init-pod 0/1 Init:CrashLoopBackOff 4 " + age + ` <none> <none> <none> <none>`}},
		{[]string{"get", "node", "node-a", "-o", "wide"}, []string{"NAME STATUS ROLES AGE VERSION INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME",
			"node-a Ready,SchedulingDisabled control-plane " + age + " v1.33.13 192.168.1.10 <none> Debian 6.1.0 containerd://1.7.24"}},
	} {
		out := k.ok(c.args)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(c.want) {
			t.Fatalf("kubectl %s: got\n%s\nwant %d lines", strings.Join(c.args, " "), out, len(c.want))
		}
		for i, w := range c.want {
			got := strings.Join(strings.Fields(lines[i]), " ")
			if !regexp.MustCompile("^" + w + "$").MatchString(got) {
				t.Errorf("kubectl %s: line %d is %q, want %q", strings.Join(c.args, " "), i, got, w)
			}
		}
	}
}
