// This file holds the kubectl tests of custom resources: a CRD applied,
// then kubectl 1.27 and 1.33 apply, get (the CRD's printer columns, its
// short name, JSON), patch (merge; strategic refused with 415), describe,
// watch and delete a custom object, with Kubernetes' refusals of invalid
// ones, and discovery of its resource.

package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

const widgetCRDYAML = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, default: 3, maximum: 10}
              color: {type: string}
`

// acceptNames does what the crd controller does for a new CRD (not run in
// this harness): accepts its names, so the API service serves its
// resource; then waits (a bounded number of tries) until it does.
func (k *kube) acceptNames(name, group, plural string) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	crds := apiextensionsv1.NewCustomResourceDefinitionServiceClient(k.conn)
	got, err := crds.GetCustomResourceDefinition(ctx, &apiextensionsv1.GetCustomResourceDefinitionRequest{Name: name})
	if err != nil {
		k.t.Fatal(err)
	}
	crd := got.GetCustomResourceDefinition()
	crd.Status.AcceptedNames = crd.GetSpec().GetNames()
	crd.Status.Conditions = []*apiextensionsv1.CustomResourceDefinitionCondition{{Type: "NamesAccepted", Status: "True", Reason: "NoConflicts", Message: "no conflicts found"}}
	if _, err := crds.UpdateCustomResourceDefinitionStatus(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionStatusRequest{Name: name, CustomResourceDefinition: crd}); err != nil {
		k.t.Fatal(err)
	}
	dyn := dynamicv1.NewResourceServiceClient(k.conn)
	for range 400 {
		resp, err := dyn.Discover(ctx, &dynamicv1.DiscoverRequest{})
		if err != nil {
			k.t.Fatal(err)
		}
		for _, r := range resp.GetResources() {
			if r.GetGroup() == group && r.GetResource() == plural {
				return
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	k.t.Fatalf("%s not served after 400 tries", name)
}

func TestKubectlCustomResources(t *testing.T) {
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := startKube(t, bin)
			k.ok([]string{"apply", "-f", k.file("crd.yaml", widgetCRDYAML)}, "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created")
			k.acceptNames("widgets.example.com", "example.com", "widgets")

			w1 := k.file("w1.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: default}\nspec: {color: red}\n")
			// kubectl's field validation is Strict: an unknown field is
			// refused as kube-apiserver refuses it; Warn prunes it with a
			// warning, its quotes escaped in the Warning header as
			// kube-apiserver escapes them.
			bogus := k.file("bogus.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w0, namespace: default}\nspec: {color: red, bogus: 1}\n")
			k.fails([]string{"apply", "-f", bogus}, `Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.bogus"`)
			k.ok([]string{"create", "--validate=warn", "-f", bogus}, `Warning: unknown field "spec.bogus"`, "widget.example.com/w0 created")
			k.ok([]string{"delete", "-f", bogus}, `widget.example.com "w0" deleted`)
			k.ok([]string{"apply", "-f", w1}, "widget.example.com/w1 created")
			out := k.ok([]string{"get", "widgets", "-n", "default"}, "NAME", "SIZE", "COLOR", "AGE")
			if !strings.Contains(strings.Join(strings.Fields(out), " "), "w1 3 red") {
				t.Errorf("kubectl get widgets: got\n%s\nwant a row w1 3 red (the default size)", out)
			}
			k.ok([]string{"get", "wd", "w1", "-n", "default", "-o", "jsonpath={.spec.size}/{.metadata.generation}"}, "3/1")

			// apply again with a change: a merge patch of the last applied.
			k.file("w1.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: default}\nspec: {color: blue, size: 5}\n")
			k.ok([]string{"apply", "-f", w1}, "widget.example.com/w1 configured")
			k.ok([]string{"get", "widget", "w1", "-n", "default", "-o", "jsonpath={.spec.color}/{.spec.size}/{.metadata.generation}"}, "blue/5/2")

			k.ok([]string{"patch", "widget", "w1", "-n", "default", "--type=merge", "-p", `{"spec":{"size":7}}`}, "widget.example.com/w1 patched")
			k.ok([]string{"patch", "widget", "w1", "-n", "default", "--type=json", "-p", `[{"op":"replace","path":"/spec/color","value":"green"}]`}, "widget.example.com/w1 patched")
			k.ok([]string{"get", "widget", "w1", "-n", "default", "-o", "jsonpath={.spec.color}/{.spec.size}"}, "green/7")
			k.fails([]string{"patch", "widget", "w1", "-n", "default", "-p", `{"spec":{"size":8}}`}, "the body of the request was in an unknown format")

			// Schema validation, with Kubernetes' message (as kubectl
			// prints an Invalid Status).
			k.fails([]string{"patch", "widget", "w1", "-n", "default", "--type=merge", "-p", `{"spec":{"size":11}}`},
				`The Widget "w1" is invalid: spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10`)

			k.ok([]string{"describe", "widget", "w1", "-n", "default"}, "Name:", "w1", "Kind:", "Widget", "Size:", "7")
			// A watch from the start: the JSON stream, the object as it
			// stands (the server ends the watch after its timeout).
			out = k.ok([]string{"get", "--raw", "/apis/example.com/v1/namespaces/default/widgets?watch=true&timeoutSeconds=1"}, `{"type":"ADDED","object":{"apiVersion":"example.com/v1"`)
			if !strings.Contains(out, `"color":"green"`) {
				t.Errorf("watch: got %s, want w1 with its color green", out)
			}
			// kubectl get -w: Tables with the printer columns, then a row
			// per change.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := k.Command(ctx, "get", "widgets", "-n", "default", "-w")
			var watched syncBuffer
			cmd.Stdout, cmd.Stderr = &watched, &watched
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cancel(); _ = cmd.Wait() }()
			outputContains(t, &watched, "COLOR")
			outputContains(t, &watched, "green")
			k.ok([]string{"patch", "widget", "w1", "-n", "default", "--type=merge", "-p", `{"spec":{"color":"yellow"}}`}, "widget.example.com/w1 patched")
			outputContains(t, &watched, "yellow")
			// Discovery names it, with its short name and subresource.
			k.ok([]string{"api-resources", "--api-group=example.com"}, "widgets", "wd", "example.com/v1", "true", "Widget")
			k.ok([]string{"get", "--raw", "/apis/example.com/v1"}, `"name":"widgets/status"`)
			k.ok([]string{"delete", "widget", "w1", "-n", "default"}, `widget.example.com "w1" deleted`)
			k.fails([]string{"get", "widget", "w1", "-n", "default"}, `widgets.example.com "w1" not found`)
		})
	}
}
