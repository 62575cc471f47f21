// This file holds the kubectl test of field management on custom
// resources: server-side apply with its conflicts and --force-conflicts,
// fields given up when an applier drops them, and the managers of other
// writes (create, patch) recorded and contended, as on kube-apiserver.
package gateway_test

import (
	"slices"
	"strings"
	"testing"
)

func TestKubectlCustomResourceServerSideApply(t *testing.T) {
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := startKube(t, bin)
			k.ok([]string{"apply", "-f", k.file("crd.yaml", widgetCRDYAML)}, "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created")
			k.acceptNames("widgets.example.com", "example.com", "widgets")
			// The managers of an object, sorted (entries of one second are
			// ordered by name, others by time).
			managers := func(name string) string {
				out := k.ok([]string{"get", "widget", name, "-n", "default", "-o", `jsonpath={range .metadata.managedFields[*]}{.manager}:{.operation} {end}`})
				f := strings.Fields(out)
				slices.Sort(f)
				return strings.Join(f, " ")
			}
			widget := func(spec string) string {
				return k.file("w.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: default}\nspec: "+spec+"\n")
			}

			k.ok([]string{"apply", "--server-side", "-f", widget("{color: red, size: 4}")}, "widget.example.com/w1 serverside-applied")
			if got := managers("w1"); got != "kubectl:Apply" {
				t.Errorf("managers after the first apply: got %q", got)
			}
			// Another manager setting a field kubectl owns: a conflict,
			// in the field manager's words.
			k.fails([]string{"apply", "--server-side", "--field-manager=tuner", "-f", widget("{color: blue}")},
				`Apply failed with 1 conflict: conflict with "kubectl": .spec.color`)
			k.ok([]string{"apply", "--server-side", "--field-manager=tuner", "--force-conflicts", "-f", widget("{color: blue}")}, "serverside-applied")
			k.ok([]string{"get", "widget", "w1", "-n", "default", "-o", "jsonpath={.spec.color}/{.spec.size}"}, "blue/4")
			// kubectl dropping color gives up nothing (tuner owns it now);
			// dropping size, which only kubectl owned, removes it: the
			// schema's default comes back.
			k.ok([]string{"apply", "--server-side", "-f", widget("{}")}, "serverside-applied")
			k.ok([]string{"get", "widget", "w1", "-n", "default", "-o", "jsonpath={.spec.color}/{.spec.size}"}, "blue/3")

			// A patch's manager is recorded (operation Update), and an
			// apply of the field it set conflicts with it.
			k.ok([]string{"patch", "widget", "w1", "-n", "default", "--type=merge", "-p", `{"spec":{"size":6}}`}, "patched")
			if got := managers("w1"); got != "kubectl-patch:Update kubectl:Apply tuner:Apply" {
				t.Errorf("managers after the patch: got %q", got)
			}
			k.fails([]string{"apply", "--server-side", "-f", widget("{size: 5}")}, `conflict with "kubectl-patch"`)

			// A create's manager.
			k.ok([]string{"create", "-f", k.file("w2.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w2, namespace: default}\nspec: {color: red}\n")}, "created")
			if got := managers("w2"); got != "kubectl-create:Update" {
				t.Errorf("managers after create: got %q", got)
			}
			// Refusals of bad applied configurations.
			k.fails([]string{"apply", "--server-side", "-f", k.file("w3.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w3, namespace: default}\nspec: {size: 11}\n")},
				`spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10`)
			k.fails([]string{"get", "widget", "w3", "-n", "default"}, `widgets.example.com "w3" not found`)
		})
	}
}
