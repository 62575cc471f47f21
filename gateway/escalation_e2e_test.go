// This file holds the kubectl tests of RBAC escalation prevention: create,
// patch and server-side apply of rbac objects through the gateway.

package gateway_test

import (
	"strings"
	"testing"
	"time"
)

// bobWritesRBAC lets bob write Roles in default and create
// ClusterRoleBindings, and read pods in default; nothing else.
const bobWritesRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: role-writer, namespace: default}
rules:
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles]
  verbs: [get, list, create, update, patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-writes-roles, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: role-writer}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: crb-creator}
rules:
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterrolebindings]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bob-creates-crbs}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: crb-creator}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
`

// bobSecretsRole is role "mine" with a rule bob does not hold.
const bobSecretsRole = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: mine, namespace: default}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list]
`

// TestKubectlCannotEscalateRBAC: bob, who may write Roles and create
// ClusterRoleBindings, can neither bind cluster-admin to himself nor give a
// Role rules he does not hold, whether by create, patch or server-side
// apply; Kubernetes' message reaches kubectl unchanged.
func TestKubectlCannotEscalateRBAC(t *testing.T) {
	k := startKube(t, "kubectl")
	bob := "--token=bob-token"
	k.ok([]string{"apply", "-f", k.file("rbac.yaml", bobWritesRBAC)}, "role.rbac.authorization.k8s.io/role-writer created")
	// RBAC follows the store asynchronously: wait (bounded) until it lets
	// bob create clusterrolebindings, the last grant applied.
	for i := 0; ; i++ {
		out, _ := k.run("auth", "can-i", "create", "clusterrolebindings", bob)
		if strings.HasSuffix(strings.TrimSpace(out), "yes") { // after a warning that the resource is cluster-scoped
			break
		}
		if i == 100 {
			t.Fatalf("bob still may not create clusterrolebindings: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	const user = `user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n"

	k.fails([]string{"create", "clusterrolebinding", "pwn", "--clusterrole=cluster-admin", "--user=bob", bob},
		`error: failed to create clusterrolebinding: clusterrolebindings.rbac.authorization.k8s.io "pwn" is forbidden: `+user+
			`{APIGroups:["*"], Resources:["*"], Verbs:["*"]}`+"\n"+`{NonResourceURLs:["*"], Verbs:["*"]}`)
	k.fails([]string{"get", "secrets", "-A", bob}, "Error from server (Forbidden)")

	k.ok([]string{"create", "role", "mine", "--verb=get", "--resource=pods", bob}, "role.rbac.authorization.k8s.io/mine created")
	const secrets = `{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}`
	k.fails([]string{"patch", "role", "mine", "--type=json", bob,
		`-p=[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["secrets"],"verbs":["get","list"]}}]`},
		`roles.rbac.authorization.k8s.io "mine" is forbidden: `+user+secrets)
	k.fails([]string{"apply", "--server-side", "--force-conflicts", "-f", k.file("mine.yaml", bobSecretsRole), bob},
		`roles.rbac.authorization.k8s.io "mine" is forbidden: `+user+secrets)
	k.fails([]string{"apply", "--server-side", "-f", k.file("theirs.yaml", strings.ReplaceAll(bobSecretsRole, "name: mine", "name: theirs")), bob},
		`roles.rbac.authorization.k8s.io "theirs" is forbidden: `+user+secrets)
	out := k.ok([]string{"get", "role", "mine", "-o", "jsonpath={.rules[*].resources}"})
	if strings.Contains(out, "secrets") {
		t.Errorf("role mine after the refused writes: rules on %s, want pods only", out)
	}
	k.fails([]string{"get", "role", "theirs"}, "NotFound")
}
