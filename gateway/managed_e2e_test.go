// This file holds the test of the managedFields kubectl create and kubectl
// replace leave on an object.

package gateway_test

import (
	"strings"
	"testing"
)

// TestKubectlManagedFieldsOnCreateAndReplace: kubectl create and replace
// record their field manager (operation Update) in metadata.managedFields,
// as Kubernetes does, so a later server-side apply by another manager
// conflicts with them and names them.
func TestKubectlManagedFieldsOnCreateAndReplace(t *testing.T) {
	k := startKube(t, "kubectl")
	cm := func(name, data string) string {
		return k.file(name, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: made\ndata:\n"+data)
	}
	k.ok([]string{"create", "-f", cm("create.yaml", "  a: \"1\"\n")}, "configmap/made created")
	k.ok([]string{"get", "cm", "made", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager} {.metadata.managedFields[*].operation}"},
		"kubectl-create Update")
	k.ok([]string{"get", "cm", "made", "--show-managed-fields", "-o", "yaml"}, "manager: kubectl-create", "f:a: {}", "operation: Update")
	// Without --show-managed-fields kubectl hides them, as with Kubernetes.
	if out := k.ok([]string{"get", "cm", "made", "-o", "yaml"}); strings.Contains(out, "managedFields") {
		t.Errorf("get -o yaml shows managedFields:\n%s", out)
	}
	k.fails([]string{"apply", "--server-side", "--field-manager=ssa", "-f", cm("ssa.yaml", "  a: \"2\"\n")}, `conflict with "kubectl-create"`)
	k.ok([]string{"get", "cm", "made", "-o", "jsonpath={.data.a}"}, "1")

	// replace (PUT): its manager takes the field it changed.
	k.ok([]string{"replace", "-f", cm("replace.yaml", "  a: \"1\"\n  b: \"2\"\n")}, "configmap/made replaced")
	out := k.ok([]string{"get", "cm", "made", "--show-managed-fields", "-o", "jsonpath={range .metadata.managedFields[*]}{.manager}={.fieldsV1}{\"\\n\"}{end}"}, "kubectl-replace=")
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "kubectl-replace=") && !strings.Contains(line, `"f:b"`) {
			t.Errorf("kubectl-replace's fields: %s, want f:b", line)
		}
		if strings.HasPrefix(line, "kubectl-create=") && !strings.Contains(line, `"f:a"`) {
			t.Errorf("kubectl-create's fields: %s, want f:a still", line)
		}
	}
	k.fails([]string{"apply", "--server-side", "--field-manager=ssa", "-f", cm("ssa2.yaml", "  b: \"3\"\n")}, `conflict with "kubectl-replace"`)
	// A forced apply takes the fields over; a stale replace is still a Conflict.
	k.ok([]string{"apply", "--server-side", "--field-manager=ssa", "--force-conflicts", "-f", cm("ssa3.yaml", "  a: \"9\"\n  b: \"9\"\n")}, "serverside-applied")
	k.ok([]string{"get", "cm", "made", "-o", "jsonpath={.data.a}{.data.b}"}, "99")
	stale := k.ok([]string{"get", "cm", "made", "-o", "yaml"})
	k.ok([]string{"label", "cm", "made", "x=1"}, "labeled")
	k.fails([]string{"replace", "-f", k.file("stale.yaml", stale)}, "Error from server (Conflict)")

	// fieldManager on the query and the user agent's default.
	k.ok([]string{"create", "deployment", "web", "--image=nginx", "--field-manager=deployer"}, "deployment.apps/web created")
	k.ok([]string{"get", "deploy", "web", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}"}, "deployer")
	k.ok([]string{"create", "-f", k.file("pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox\n")}, "pod/p created")
	k.ok([]string{"get", "pod", "p", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}"}, "kubectl-create")
	// A bad body is still refused before anything is written.
	k.fails([]string{"create", "-f", k.file("bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\ndata: 5\n")}, "Error from server (BadRequest)")
	k.fails([]string{"get", "cm", "bad"}, "NotFound")
}
