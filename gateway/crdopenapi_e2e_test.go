// This file holds the kubectl tests of custom resources' OpenAPI and served
// versions: a CRD with two served versions published in /openapi/v2 and
// /openapi/v3, kubectl 1.27 and 1.33 explaining it and refusing an unknown
// field, an object written at one version and read at the other, and the
// documents following the CRD as a version stops being served and the CRD
// goes.

package gateway_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

const gadgetCRDYAML = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    selectableFields: [{jsonPath: .spec.name}]
    schema:
      openAPIV3Schema: &schema
        type: object
        description: A Gadget for testing.
        properties:
          spec:
            type: object
            description: What the gadget should be.
            required: [name]
            properties:
              name: {type: string, description: The gadget's name.}
              size: {type: integer, description: How big it is.}
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
                description: Anything at all.
  - name: v2
    served: %s
    storage: false
    selectableFields: [{jsonPath: .spec.name}]
    schema:
      openAPIV3Schema: *schema
`

// establish does what the crd controller does for a new CRD (not run in
// this harness): accepts its names and marks it Established, so the API
// service serves its resource and the gateway publishes its OpenAPI; then
// waits (a bounded number of tries) until versions are served.
func (k *kube) establish(name, group, plural string, versions ...string) {
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
	crd.Status.Conditions = []*apiextensionsv1.CustomResourceDefinitionCondition{
		{Type: "NamesAccepted", Status: "True", Reason: "NoConflicts", Message: "no conflicts found"},
		{Type: "Established", Status: "True", Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"},
	}
	if _, err := crds.UpdateCustomResourceDefinitionStatus(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionStatusRequest{Name: name, CustomResourceDefinition: crd}); err != nil {
		k.t.Fatal(err)
	}
	k.waitServed(group, plural, versions...)
}

// waitServed waits (a bounded number of tries) until the API service
// serves plural at exactly versions.
func (k *kube) waitServed(group, plural string, versions ...string) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dyn := dynamicv1.NewResourceServiceClient(k.conn)
	var got []string
	for range 400 {
		resp, err := dyn.Discover(ctx, &dynamicv1.DiscoverRequest{})
		if err != nil {
			k.t.Fatal(err)
		}
		got = nil
		for _, r := range resp.GetResources() {
			if r.GetGroup() == group && r.GetResource() == plural {
				got = append(got, r.GetVersion())
			}
		}
		if slices.Equal(got, versions) {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	k.t.Fatalf("%s.%s served at %v after 400 tries, want %v", plural, group, got, versions)
}

// definitions returns the names of /openapi/v2's definitions and the
// group versions /openapi/v3 lists.
func (k *kube) definitions() (v2 map[string]json.RawMessage, v3 map[string]json.RawMessage) {
	k.t.Helper()
	var doc struct {
		Definitions map[string]json.RawMessage `json:"definitions"`
	}
	if err := json.Unmarshal([]byte(k.ok([]string{"get", "--raw", "/openapi/v2"})), &doc); err != nil {
		k.t.Fatal(err)
	}
	var root struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal([]byte(k.ok([]string{"get", "--raw", "/openapi/v3"})), &root); err != nil {
		k.t.Fatal(err)
	}
	return doc.Definitions, root.Paths
}

func TestKubectlCustomResourceOpenAPI(t *testing.T) {
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := startKube(t, bin)
			crdFile := k.file("crd.yaml", strings.Replace(gadgetCRDYAML, "%s", "true", 1))
			k.ok([]string{"apply", "-f", crdFile}, "customresourcedefinition.apiextensions.k8s.io/gadgets.example.com created")
			// Discover lists the versions by Kubernetes' priority: v2 first.
			k.establish("gadgets.example.com", "example.com", "gadgets", "v2", "v1")
			k.ok([]string{"get", "--raw", "/apis/example.com"}, `"preferredVersion":{"groupVersion":"example.com/v2","version":"v2"}`,
				`"versions":[{"groupVersion":"example.com/v2","version":"v2"},{"groupVersion":"example.com/v1","version":"v1"}]`)

			// Both served versions are published, as kube-apiserver names
			// and renders them.
			v2, v3 := k.definitions()
			for _, name := range []string{"com.example.v1.Gadget", "com.example.v2.Gadget", "com.example.v1.GadgetList"} {
				if v2[name] == nil {
					t.Errorf("/openapi/v2 has no definition %s", name)
				}
			}
			var gadget struct {
				Description string `json:"description"`
				Properties  map[string]struct {
					Properties map[string]map[string]any `json:"properties"`
				} `json:"properties"`
				GVK []map[string]string `json:"x-kubernetes-group-version-kind"`
			}
			if err := json.Unmarshal(v2["com.example.v1.Gadget"], &gadget); err != nil {
				t.Fatal(err)
			}
			if gadget.Description != "A Gadget for testing." || len(gadget.GVK) != 1 || gadget.GVK[0]["kind"] != "Gadget" {
				t.Errorf("com.example.v1.Gadget = %+v, want the schema's description and the Gadget kind", gadget)
			}
			if extra := gadget.Properties["spec"].Properties["extra"]; extra["x-kubernetes-preserve-unknown-fields"] != true {
				t.Errorf("spec.extra = %v, want x-kubernetes-preserve-unknown-fields", extra)
			}
			for _, key := range []string{"apis/example.com/v1", "apis/example.com/v2", "apis/apps/v1"} {
				if v3[key] == nil {
					t.Errorf("/openapi/v3 does not list %s", key)
				}
			}
			k.ok([]string{"get", "--raw", "/openapi/v3/apis/example.com/v1"}, `"com.example.v1.Gadget"`, `"/apis/example.com/v1/namespaces/{namespace}/gadgets/{name}"`)

			// kubectl explain reads the schema.
			k.ok([]string{"explain", "gadgets"}, "KIND:", "Gadget", "DESCRIPTION:", "A Gadget for testing.", "spec", "What the gadget should be.")
			k.ok([]string{"explain", "gadgets.spec"}, "name", "<string>", "The gadget's name.", "size", "<integer>", "How big it is.")
			k.fails([]string{"explain", "gadgets.spec.bogus"}, `field "bogus" does not exist`)

			// kubectl's validation refuses an unknown field and a missing
			// required one.
			bogus := k.file("bogus.yaml", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g0, namespace: default}\nspec: {name: a, bogus: 1}\n")
			k.fails([]string{"create", "--validate=strict", "-f", bogus}, `unknown field "spec.bogus"`)
			noName := k.file("noname.yaml", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g0, namespace: default}\nspec: {size: 1}\n")
			k.fails([]string{"create", "--validate=strict", "-f", noName}, `spec.name: Required value`)

			// Written at v2, read at v1 and v2: the same object, its
			// apiVersion the one asked for (conversion strategy None).
			g1 := k.file("g1.yaml", "apiVersion: example.com/v2\nkind: Gadget\nmetadata: {name: g1, namespace: default}\nspec: {name: one, size: 2}\n")
			k.ok([]string{"create", "-f", g1}, "gadget.example.com/g1 created")
			k.ok([]string{"get", "gadgets.v1.example.com", "g1", "-n", "default", "-o", "jsonpath={.apiVersion}/{.spec.size}"}, "example.com/v1/2")
			k.ok([]string{"get", "gadgets.v2.example.com", "g1", "-n", "default", "-o", "jsonpath={.apiVersion}/{.spec.size}"}, "example.com/v2/2")
			k.ok([]string{"get", "--raw", "/apis/example.com/v2/namespaces/default/gadgets"}, `"apiVersion":"example.com/v2"`, `"kind":"GadgetList"`)

			// selectableFields select in lists and watches.
			g2 := k.file("g2.yaml", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g2, namespace: default}\nspec: {name: two}\n")
			k.ok([]string{"create", "-f", g2}, "gadget.example.com/g2 created")
			out := k.ok([]string{"get", "gadgets.v1.example.com", "-n", "default", "--field-selector", "spec.name=two", "-o", "name"}, "gadget.example.com/g2")
			if strings.Contains(out, "g1") {
				t.Errorf("--field-selector spec.name=two: got\n%s\nwant g2 alone", out)
			}
			for _, v := range []string{"v1", "v2"} {
				out = k.ok([]string{"get", "--raw", "/apis/example.com/" + v + "/namespaces/default/gadgets?watch=1&timeoutSeconds=1&fieldSelector=spec.name%3Done"},
					`"type":"ADDED"`, `"apiVersion":"example.com/`+v+`"`, `"name":"g1"`)
				if strings.Contains(out, `"g2"`) {
					t.Errorf("watch at %s with spec.name=one: got\n%s\nwant g1 alone", v, out)
				}
			}
			k.fails([]string{"get", "gadgets.v1.example.com", "-n", "default", "--field-selector", "spec.size=2"}, "field label not supported: spec.size")

			// v2 stops being served: its definitions and document go, v1's
			// stay.
			k.file("crd.yaml", strings.Replace(gadgetCRDYAML, "%s", "false", 1))
			k.ok([]string{"apply", "-f", crdFile}, "customresourcedefinition.apiextensions.k8s.io/gadgets.example.com configured")
			k.waitServed("example.com", "gadgets", "v1")
			v2, v3 = k.definitions()
			if v2["com.example.v2.Gadget"] != nil || v3["apis/example.com/v2"] != nil {
				t.Errorf("v2 is still published after it stopped being served")
			}
			if v2["com.example.v1.Gadget"] == nil || v3["apis/example.com/v1"] == nil {
				t.Errorf("v1 is no longer published")
			}
			k.fails([]string{"get", "--raw", "/apis/example.com/v2/namespaces/default/gadgets"}, "NotFound")

			// The CRD goes: so do its definitions. (The crd controller,
			// which is not run here, would remove the cleanup finalizer
			// once the objects are gone.)
			k.ok([]string{"delete", "-f", crdFile, "--wait=false"}, `customresourcedefinition.apiextensions.k8s.io "gadgets.example.com" deleted`)
			k.ok([]string{"patch", "crd", "gadgets.example.com", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`}, "patched")
			k.waitServed("example.com", "gadgets")
			v2, v3 = k.definitions()
			if v2["com.example.v1.Gadget"] != nil || v3["apis/example.com/v1"] != nil {
				t.Errorf("the deleted CRD is still published")
			}
		})
	}
}
