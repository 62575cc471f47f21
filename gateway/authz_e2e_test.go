// This file holds the test of kubectl auth can-i through the gateway:
// SelfSubjectAccessReview, SubjectAccessReview and LocalSubjectAccessReview
// against RBAC rules.

package gateway_test

import (
	"strings"
	"testing"
)

const canIRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-creator, namespace: default}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [create, get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-creates-pods, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-creator}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
`

const sarYAML = `apiVersion: authorization.k8s.io/v1
kind: SubjectAccessReview
spec:
  user: bob
  resourceAttributes: {namespace: default, verb: %s, resource: pods}
`

const lsarYAML = `apiVersion: authorization.k8s.io/v1
kind: LocalSubjectAccessReview
metadata: {namespace: default}
spec:
  user: bob
  resourceAttributes: {namespace: %s, verb: create, resource: pods}
`

// TestKubectlAuthCanI: kubectl auth can-i (SelfSubjectAccessReview),
// --list (SelfSubjectRulesReview), --as (impersonation) and a
// SubjectAccessReview and a LocalSubjectAccessReview created from a file,
// through the gateway, for the admin and for bob, who has a Role to create
// and get pods in default.
func TestKubectlAuthCanI(t *testing.T) {
	k := startKube(t, "kubectl")
	bob := "--token=bob-token"
	k.ok([]string{"auth", "can-i", "create", "pods"}, "yes")
	k.fails([]string{"auth", "can-i", "create", "pods", bob}, "no")
	k.ok([]string{"apply", "-f", k.file("rbac.yaml", canIRBAC)}, "role.rbac.authorization.k8s.io/pod-creator created")

	t.Run("can-i", func(t *testing.T) {
		k := k.with(t)
		k.ok([]string{"auth", "can-i", "create", "pods", bob}, "yes")
		k.ok([]string{"auth", "can-i", "get", "pod/mypod", bob}, "yes")
		k.fails([]string{"auth", "can-i", "delete", "pods", bob}, "no")
		k.fails([]string{"auth", "can-i", "create", "pods", "-n", "kube-system", bob}, "no")
		k.fails([]string{"auth", "can-i", "create", "deployments.apps", bob}, "no")
		k.ok([]string{"auth", "can-i", "get", "/healthz", bob}, "yes") // system:discovery
		for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
			old := k.withBinary(t, bin)
			old.ok([]string{"auth", "can-i", "create", "pods", bob}, "yes")
			old.fails([]string{"auth", "can-i", "delete", "pods", bob}, "no")
		}
	})
	t.Run("list", func(t *testing.T) {
		k := k.with(t)
		out := k.ok([]string{"auth", "can-i", "--list", bob}, "Resources", "Non-Resource URLs", "Verbs",
			"selfsubjectaccessreviews.authorization.k8s.io", "[/healthz]")
		if !strings.Contains(out, "pods") || !strings.Contains(out, "[create get]") {
			t.Errorf("bob's rules in default: got\n%s\nwant pods [create get]", out)
		}
		out = k.ok([]string{"auth", "can-i", "--list", "-n", "kube-system", bob})
		if strings.Contains(out, "[create get]") {
			t.Errorf("bob's rules in kube-system: got\n%s\nwant no pod rule", out)
		}
		k.ok([]string{"auth", "can-i", "--list"}, "*.*", "[*]")
	})
	t.Run("impersonation", func(t *testing.T) {
		k := k.with(t)
		k.ok([]string{"auth", "can-i", "get", "pods", "--as=bob"}, "yes")
		k.fails([]string{"auth", "can-i", "delete", "pods", "--as=bob"}, "no")
		k.ok([]string{"auth", "can-i", "delete", "pods", "--as=bob", "--as-group=system:masters"}, "yes")
		k.ok([]string{"get", "pods", "--as=bob", "-n", "kube-system", "--as-group=system:masters"}, "No resources found")
		k.fails([]string{"get", "pods", "--as=bob"},
			`Error from server (Forbidden): pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "default"`)
		// bob may not impersonate.
		k.fails([]string{"auth", "can-i", "get", "pods", "--as=admin", bob},
			`users "admin" is forbidden: User "bob" cannot impersonate resource "users" in API group "" at the cluster scope`)
	})
	t.Run("subjectaccessreview", func(t *testing.T) {
		k := k.with(t)
		k.ok([]string{"create", "-f", k.file("sar.yaml", strings.ReplaceAll(sarYAML, "%s", "create")), "-o", "jsonpath={.status.allowed} {.status.reason}"},
			`true RBAC: allowed by RoleBinding "bob-creates-pods"`)
		out := k.ok([]string{"create", "-f", k.file("sar2.yaml", strings.ReplaceAll(sarYAML, "%s", "delete")), "-o", "jsonpath={.status.allowed}"})
		if strings.TrimSpace(out) != "false" {
			t.Errorf("SubjectAccessReview of bob deleting pods: allowed %q, want false", out)
		}
		// kubectl asks whether a kind without a PATCH operation is a
		// custom resource by listing CRDs, which bob may not: it stops
		// there, as it does against kube-apiserver v1.33.13 (checked);
		// --validate=false reaches the server's refusal.
		k.fails([]string{"create", "-f", k.file("sar3.yaml", strings.ReplaceAll(sarYAML, "%s", "create")), bob},
			`failed to check CRD: failed to list CRDs: customresourcedefinitions.apiextensions.k8s.io is forbidden: User "bob" cannot list resource "customresourcedefinitions" in API group "apiextensions.k8s.io" at the cluster scope`)
		k.fails([]string{"create", "--validate=false", "-f", k.Dir() + "/sar3.yaml", bob},
			`Error from server (Forbidden): error when creating "`+k.Dir()+`/sar3.yaml": subjectaccessreviews.authorization.k8s.io is forbidden: User "bob" cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope`)
		k.fails([]string{"create", "-f", k.file("sar4.yaml", "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\nspec: {user: bob}\n")},
			"exactly one of nonResourceAttributes or resourceAttributes must be specified")
		k.ok([]string{"api-resources", "--api-group=authorization.k8s.io"}, "selfsubjectaccessreviews", "selfsubjectrulesreviews", "subjectaccessreviews")
	})
	t.Run("localsubjectaccessreview", func(t *testing.T) {
		for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
			k := k.withBinary(t, bin)
			same := k.file("lsar.yaml", strings.ReplaceAll(lsarYAML, "%s", "default"))
			k.ok([]string{"create", "-f", same, "-o", "jsonpath={.kind} {.metadata.namespace} {.status.allowed} {.status.reason}"},
				`LocalSubjectAccessReview default true RBAC: allowed by RoleBinding "bob-creates-pods"`)
			k.fails([]string{"create", "-f", k.file("lsar2.yaml", strings.ReplaceAll(lsarYAML, "%s", "kube-system"))},
				`The LocalSubjectAccessReview "" is invalid: spec.resourceAttributes.namespace: Invalid value: "kube-system": must match metadata.namespace`)
			raw := k.file("lsar.json", `{"apiVersion":"authorization.k8s.io/v1","kind":"LocalSubjectAccessReview","metadata":{"namespace":"default"},`+
				`"spec":{"user":"bob","resourceAttributes":{"namespace":"default","verb":"create","resource":"pods"}}}`)
			k.fails([]string{"create", "--raw", "/apis/authorization.k8s.io/v1/namespaces/kube-system/localsubjectaccessreviews", "-f", raw},
				"the namespace of the provided object does not match the namespace sent on the request")
			k.fails([]string{"create", "--validate=false", "-f", same, bob},
				`localsubjectaccessreviews.authorization.k8s.io is forbidden: User "bob" cannot create resource "localsubjectaccessreviews" in API group "authorization.k8s.io" in the namespace "default"`)
			out := k.ok([]string{"api-resources", "--api-group=authorization.k8s.io", "--namespaced=true"}, "localsubjectaccessreviews", "LocalSubjectAccessReview")
			if strings.Contains(out, "selfsubjectaccessreviews") {
				t.Errorf("%s api-resources --namespaced=true: got\n%s\nwant only localsubjectaccessreviews", bin, out)
			}
			k.ok([]string{"explain", "localsubjectaccessreviews.spec.resourceAttributes"}, "namespace", "verb")
			k.ok([]string{"auth", "can-i", "create", "pods", "--as=bob", "-n", "default"}, "yes")
			k.fails([]string{"auth", "can-i", "create", "pods", "--as=bob", "-n", "kube-system"}, "no")
		}
	})
}
