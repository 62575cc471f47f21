// This file holds the CustomResourceDefinition test with the real kubectl
// (1.27 and 1.33) through the gateway while the CRD controller runs: a
// published 320 KB CRD (Gateway API's HTTPRoute: deep schema, CEL rules,
// two versions) applied client-side then server-side, waited for as
// Established, listed, described and deleted; a CRD of our own with int-or-string,
// preserve-unknown-fields, defaults, subresources and printer columns
// applied client-side, re-applied unchanged, patched (generation 2), a
// custom object of it applied, listed, edited (kubectl edit), found by
// `get all` (its category) and scaled (and refused, by the schema and by
// its CEL rule), and an
// invalid CRD refused with Kubernetes' message; deleting the CRDs deletes
// their custom objects.
package kubectltest

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/controllers"
)

func TestKubectlCustomResourceDefinitions(t *testing.T) {
	env := apiservertest.Start(t, apiservertest.Options{})
	startControlPlane(t, env, false, controllers.CRD)
	gwConn := env.Dial(t, "")
	httproutes, err := os.ReadFile("testdata/httproutes-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gizmos, err := os.ReadFile("testdata/gizmos-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const hr = "httproutes.gateway.networking.k8s.io"
	const gz = "gizmos.tools.example.org"

	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := kubectltest.StartBinary(t, gwConn, apiservertest.AdminToken, bin)
			kubectl := kubectlRunner(k, 90*time.Second)
			run := func(stdin string, args ...string) string {
				t.Helper()
				out, err := kubectl(stdin, args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}

			// Client-side, then server-side over it: the same values, so
			// no conflict with the client-side manager's fields.
			out := run(string(httproutes), "apply", "-f", "-")
			if !strings.Contains(out, "customresourcedefinition.apiextensions.k8s.io/"+hr+" created") {
				t.Errorf("apply:\n%s", out)
			}
			out = run(string(httproutes), "apply", "--server-side", "-f", "-")
			if !strings.Contains(out, "customresourcedefinition.apiextensions.k8s.io/"+hr+" serverside-applied") {
				t.Errorf("apply --server-side:\n%s", out)
			}
			// Neither apply changed the spec as stored: the schema came back
			// as it was sent.
			if out := run("", "get", "crd", hr, "-o", "jsonpath={.metadata.generation}"); out != "1" {
				t.Errorf("generation after client-side and server-side apply of the same CRD: got %q, want 1", out)
			}
			var sent, stored map[string]any
			if err := yaml.Unmarshal(httproutes, &sent); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(run("", "get", "crd", hr, "-o", "json")), &stored); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(sent["spec"].(map[string]any)["versions"], stored["spec"].(map[string]any)["versions"]); diff != "" {
				t.Errorf("spec.versions stored differ from those sent (-sent +stored):\n%s", diff)
			}
			out = run("", "wait", "--for=condition=Established", "crd/"+hr, "--timeout=60s")
			if !strings.Contains(out, "condition met") {
				t.Errorf("wait Established:\n%s", out)
			}

			out = run(string(gizmos), "apply", "-f", "-")
			if !strings.Contains(out, "customresourcedefinition.apiextensions.k8s.io/"+gz+" created") {
				t.Errorf("apply gizmos:\n%s", out)
			}
			out = run(string(gizmos), "apply", "-f", "-")
			if !strings.Contains(out, gz+" unchanged") {
				t.Errorf("apply gizmos again:\n%s", out)
			}
			out = run("", "get", "crd")
			if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 ||
				strings.Join(strings.Fields(lines[0]), " ") != "NAME CREATED AT" ||
				!strings.HasPrefix(lines[1], gz+" ") || !strings.HasPrefix(lines[2], hr+" ") {
				t.Errorf("kubectl get crd:\n%s", out)
			}
			out = run("", "get", "crds", gz, "-o", "jsonpath={.status.acceptedNames.shortNames} {.status.storedVersions} {.spec.names.listKind} {.metadata.generation}")
			if out != `["gz"] ["v1alpha1"] GizmoList 1` {
				t.Errorf("gizmos status: got %q", out)
			}
			out = run("", "describe", "crd", hr)
			for _, want := range []string{"Name:         " + hr, "Kind:       HTTPRoute", "Type:                  Established", "Reason:                InitialNamesAccepted"} {
				if !strings.Contains(out, want) {
					t.Errorf("describe crd: no %q in\n%s", want, out[:min(len(out), 3000)])
				}
			}

			// A gizmo, once its CRD is Established: nested defaults, an
			// int-or-string, the printer columns, the short name; a
			// duplicate key of a map list refused as Kubernetes does.
			run("", "wait", "--for=condition=Established", "crd/"+gz, "--timeout=60s")
			out = run("apiVersion: tools.example.org/v1alpha1\nkind: Gizmo\nmetadata: {name: g1}\nspec: {port: http, parts: [{name: a}]}\n", "apply", "-f", "-")
			if !strings.Contains(out, "gizmo.tools.example.org/g1 created") {
				t.Errorf("apply gizmo:\n%s", out)
			}
			out = run("", "get", "gz")
			if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
				strings.Join(strings.Fields(lines[0]), " ") != "NAME REPLICAS PORT AGE" || !strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "g1 1 http ") {
				t.Errorf("kubectl get gz:\n%s", out)
			}
			if out := run("", "get", "gizmo", "g1", "-o", "jsonpath={.spec.mode}/{.spec.parts[0].weight}"); out != "careful/1" {
				t.Errorf("gizmo defaults: got %q, want careful/1", out)
			}
			// kubectl edit, with an editor that changes the mode; and
			// `get all`, which lists the kind of the `all` category.
			edit := func(script string) (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				cmd := k.Command(ctx, "edit", "gizmo", "g1")
				cmd.Env = append(cmd.Env, "KUBE_EDITOR="+script, "TMPDIR="+k.Dir())
				b, err := cmd.CombinedOutput()
				return string(b), err
			}
			if out, err := edit("sed -i s/careful/fast/"); err != nil || !strings.Contains(out, "gizmo.tools.example.org/g1 edited") {
				t.Errorf("kubectl edit: %v\n%s", err, out)
			}
			if out := run("", "get", "gizmo", "g1", "-o", "jsonpath={.spec.mode}/{.metadata.generation}"); out != "fast/2" {
				t.Errorf("after edit: got %q, want fast/2", out)
			}
			// Refused by the schema: kubectl reopens the file with the
			// error (the editor here does not fix it) and gives up.
			if out, err := edit("sed -i s/fast/reckless/"); err == nil || !strings.Contains(out, `gizmos.tools.example.org "g1" is invalid`) ||
				!strings.Contains(out, "Edit cancelled, no valid changes were saved") {
				t.Errorf("kubectl edit to an invalid value: got %v\n%s", err, out)
			}
			if out := run("", "get", "all"); !strings.Contains(out, "gizmo.tools.example.org/g1") {
				t.Errorf("kubectl get all: no gizmo in\n%s", out)
			}
			// The scale subresource, and the CEL rule on what it writes.
			out = run("", "scale", "gizmo", "g1", "--replicas=3")
			if !strings.Contains(out, "gizmo.tools.example.org/g1 scaled") {
				t.Errorf("scale:\n%s", out)
			}
			if out := run("", "get", "gizmo", "g1", "-o", "jsonpath={.spec.replicas}/{.metadata.generation}"); out != "3/3" {
				t.Errorf("after scale: got %q, want 3/3", out)
			}
			if out, err := kubectl("", "scale", "gizmo", "g1", "--replicas=11"); err == nil || !strings.Contains(out, "at most ten replicas") {
				t.Errorf("scale past the CEL rule: got %v\n%s", err, out)
			}
			if out, err := kubectl("apiVersion: tools.example.org/v1alpha1\nkind: Gizmo\nmetadata: {name: g2}\nspec: {port: 80, parts: [{name: a}, {name: a}]}\n", "apply", "-f", "-"); err == nil ||
				!strings.Contains(out, `The Gizmo "g2" is invalid: spec.parts[1]: Duplicate value`) {
				t.Errorf("duplicate map key: got %v\n%s", err, out)
			}

			// The category kube-apiserver gives CRDs and webhook
			// configurations.
			out = run("", "get", "api-extensions", "-o", "name")
			for _, want := range []string{"customresourcedefinition.apiextensions.k8s.io/" + gz, "customresourcedefinition.apiextensions.k8s.io/" + hr} {
				if !strings.Contains(out, want) {
					t.Errorf("get api-extensions: no %s in\n%s", want, out)
				}
			}

			out = run("", "patch", "crd", gz, "--type=merge", "-p", `{"spec":{"names":{"shortNames":["gz","gzm"]}}}`)
			if !strings.Contains(out, gz+" patched") {
				t.Errorf("patch:\n%s", out)
			}
			out = run("", "get", "crd", gz, "-o", "jsonpath={.metadata.generation}")
			if out != "2" {
				t.Errorf("generation after the patch: got %q, want 2", out)
			}

			bad := strings.Replace(string(gizmos), "name: gizmos.tools.example.org", "name: gadgets.tools.example.org", 1)
			out, err := kubectl(bad, "apply", "-f", "-")
			if err == nil || !strings.Contains(out, `The CustomResourceDefinition "gadgets.tools.example.org" is invalid: metadata.name: Invalid value: "gadgets.tools.example.org": must be spec.names.plural+"."+spec.group`) {
				t.Errorf("invalid CRD: got %v\n%s", err, out)
			}

			// An unknown field inside the schema: kubectl's strict field
			// validation refuses it, naming it, as kube-apiserver does.
			unknown := strings.Replace(string(gizmos), "          spec:\n            type: object\n", "          spec:\n            type: object\n            colour: red\n", 1)
			unknown = strings.Replace(unknown, "name: gizmos.tools.example.org", "name: gadgets.tools.example.org", 1)
			unknown = strings.Replace(unknown, "plural: gizmos", "plural: gadgets", 1)
			out, err = kubectl(unknown, "apply", "-f", "-")
			if err == nil || !strings.Contains(out, `strict decoding error: unknown field "spec.versions[0].schema.openAPIV3Schema.properties.spec.colour"`) {
				t.Errorf("unknown schema field: got %v\n%s", err, out)
			}

			out = run("", "explain", "customresourcedefinitions.spec.names")
			if !strings.Contains(out, "shortNames") || !strings.Contains(out, "listKind") {
				t.Errorf("explain:\n%s", out)
			}

			run("", "delete", "crd", hr, gz)
			out = run("", "get", "crd")
			if !strings.Contains(out, "No resources found") {
				t.Errorf("after delete:\n%s", out)
			}
		})
	}
}
