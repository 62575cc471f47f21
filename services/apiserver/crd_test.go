// This file holds the API service's tests of CustomResourceDefinition:
// apiextensions' defaults and create strategy, its validation (field paths
// and messages as kube-apiserver's), generation on spec changes, status
// writes and the cleanup finalizer a delete adds.
package apiserver

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/kplane/kplane/proto/apierrors"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

const widgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, default: 3}
              port: {x-kubernetes-int-or-string: true}
`

func crdFromYAML(t *testing.T, doc string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := kubejson.Unmarshal(j, crd, kubejson.Options{}); err != nil {
		t.Fatal(err)
	}
	return crd
}

func TestCRDCreateDefaultsUpdateDelete(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	crds := apiextensionsv1.NewCustomResourceDefinitionServiceClient(e.conn)

	in := crdFromYAML(t, widgetCRD)
	// A client's status is the server's to set: only the storage version
	// is stored.
	in.Status = &apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{"v0"},
		Conditions: []*apiextensionsv1.CustomResourceDefinitionCondition{{Type: "Established", Status: "True"}}}
	cr, err := crds.CreateCustomResourceDefinition(ctx, &apiextensionsv1.CreateCustomResourceDefinitionRequest{CustomResourceDefinition: in})
	if err != nil {
		t.Fatal(err)
	}
	got := cr.GetCustomResourceDefinition()
	names := got.GetSpec().GetNames()
	if names.GetSingular() != "widget" || names.GetListKind() != "WidgetList" {
		t.Errorf("names: got singular %q listKind %q, want widget, WidgetList", names.GetSingular(), names.GetListKind())
	}
	if s := got.GetSpec().GetConversion().GetStrategy(); s != "None" {
		t.Errorf("conversion strategy: got %q, want None", s)
	}
	if sv := got.GetStatus().GetStoredVersions(); !slices.Equal(sv, []string{"v1"}) {
		t.Errorf("storedVersions: got %v, want [v1]", sv)
	}
	if c := got.GetStatus().GetConditions(); len(c) != 0 {
		t.Errorf("conditions: got %v, want none", c)
	}
	if got.GetSpec().GetVersions()[0].GetSubresources().GetStatus() == nil {
		t.Errorf("the status subresource was dropped: %v", got.GetSpec().GetVersions()[0].GetSubresources())
	}
	b, err := kubejson.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	schema := doc["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
	size := schema["properties"].(map[string]any)["spec"].(map[string]any)["properties"].(map[string]any)["size"].(map[string]any)
	if size["default"] != float64(3) {
		t.Errorf("schema written back: got size %v, want its default 3 kept", size)
	}

	// A spec change bumps generation; the status is carried over.
	upd := proto.Clone(got).(*apiextensionsv1.CustomResourceDefinition)
	upd.Spec.Names.ShortNames = []string{"wd", "wds"}
	upd.Status = nil
	ur, err := crds.UpdateCustomResourceDefinition(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionRequest{Name: "widgets.example.com", CustomResourceDefinition: upd})
	if err != nil {
		t.Fatal(err)
	}
	if g := ur.GetCustomResourceDefinition().GetMetadata().GetGeneration(); g != 2 {
		t.Errorf("generation after a spec change: got %d, want 2", g)
	}
	if sv := ur.GetCustomResourceDefinition().GetStatus().GetStoredVersions(); !slices.Equal(sv, []string{"v1"}) {
		t.Errorf("storedVersions after update: got %v, want [v1]", sv)
	}

	// The same schema with its keys in another order, through gRPC: as
	// Kubernetes compares the decoded schema, not the bytes, the
	// generation stays (the schema is kept in its Go type's form).
	same := proto.Clone(ur.GetCustomResourceDefinition()).(*apiextensionsv1.CustomResourceDefinition)
	same.Spec.Versions[0].Schema.OpenApiv3Schema.Raw = []byte(`{"type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer", "default": 3}, "port": {"x-kubernetes-int-or-string": true}}}}}`)
	sr0, err := crds.UpdateCustomResourceDefinition(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionRequest{Name: "widgets.example.com", CustomResourceDefinition: same})
	if err != nil {
		t.Fatal(err)
	}
	if g := sr0.GetCustomResourceDefinition().GetMetadata().GetGeneration(); g != 2 {
		t.Errorf("generation after re-ordering the schema's keys: got %d, want 2", g)
	}
	ur = sr0

	// Status written through the status subresource, validated as
	// Kubernetes' status strategy does.
	st := proto.Clone(ur.GetCustomResourceDefinition()).(*apiextensionsv1.CustomResourceDefinition)
	st.Status.AcceptedNames = st.Spec.Names
	st.Status.Conditions = []*apiextensionsv1.CustomResourceDefinitionCondition{{Type: "Established", Status: "True", Reason: "InitialNamesAccepted"}}
	sr, err := crds.UpdateCustomResourceDefinitionStatus(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionStatusRequest{Name: "widgets.example.com", CustomResourceDefinition: st})
	if err != nil {
		t.Fatal(err)
	}
	if c := sr.GetCustomResourceDefinition().GetStatus().GetConditions(); len(c) != 1 || c[0].GetType() != "Established" {
		t.Errorf("conditions after a status write: got %v", c)
	}
	bad := proto.Clone(sr.GetCustomResourceDefinition()).(*apiextensionsv1.CustomResourceDefinition)
	bad.Status.AcceptedNames.Plural = "Bad_Plural"
	_, err = crds.UpdateCustomResourceDefinitionStatus(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionStatusRequest{Name: "widgets.example.com", CustomResourceDefinition: bad})
	se := wantReason(t, err, apierrors.ReasonInvalid)
	if len(se.Causes) == 0 || se.Causes[0].Field != "status.acceptedNames.plural" {
		t.Errorf("status refusal: got %+v, want status.acceptedNames.plural", se.Causes)
	}

	// The spec's group is immutable.
	grp := proto.Clone(sr.GetCustomResourceDefinition()).(*apiextensionsv1.CustomResourceDefinition)
	grp.Spec.Group = "other.example.com"
	_, err = crds.UpdateCustomResourceDefinition(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionRequest{Name: "widgets.example.com", CustomResourceDefinition: grp})
	se = wantReason(t, err, apierrors.ReasonInvalid)
	if !hasCause(se, "spec.group", "Invalid value: \"other.example.com\": field is immutable") {
		t.Errorf("group change: got %+v", se.Causes)
	}

	// Delete: held by the cleanup finalizer, Terminating.
	dr, err := crds.DeleteCustomResourceDefinition(ctx, &apiextensionsv1.DeleteCustomResourceDefinitionRequest{Name: "widgets.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	d := dr.GetCustomResourceDefinition()
	if !slices.Contains(d.GetMetadata().GetFinalizers(), crdCleanupFinalizer) || d.GetMetadata().GetDeletionTimestamp() == nil {
		t.Fatalf("deleted CRD: got finalizers %v deletionTimestamp %v, want the cleanup finalizer and a timestamp",
			d.GetMetadata().GetFinalizers(), d.GetMetadata().GetDeletionTimestamp())
	}
	var term *apiextensionsv1.CustomResourceDefinitionCondition
	for _, c := range d.GetStatus().GetConditions() {
		if c.GetType() == "Terminating" {
			term = c
		}
	}
	if term.GetStatus() != "True" || term.GetReason() != "InstanceDeletionPending" || term.GetLastTransitionTime() == nil {
		t.Errorf("Terminating condition: got %v", term)
	}
}

func hasCause(se *apierrors.StatusError, fieldPath, msg string) bool {
	for _, c := range se.Causes {
		if c.Field == fieldPath && c.Message == msg {
			return true
		}
	}
	return false
}

// TestCRDValidation checks refusals against the causes kube-apiserver
// v1.33.13 gives for the same CRDs (its apiextensions validation is the
// code that runs here).
func TestCRDValidation(t *testing.T) {
	e := newEnv(t, nil)
	crds := apiextensionsv1.NewCustomResourceDefinitionServiceClient(e.conn)
	for _, tc := range []struct {
		name  string
		edit  func(*apiextensionsv1.CustomResourceDefinition)
		field string
		msg   string
	}{
		{name: "name not plural.group",
			edit:  func(c *apiextensionsv1.CustomResourceDefinition) { c.Metadata.Name = "gadgets.example.com" },
			field: "metadata.name", msg: `Invalid value: "gadgets.example.com": must be spec.names.plural+"."+spec.group`},
		{name: "bad scope",
			edit:  func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Scope = "Everywhere" },
			field: "spec.scope", msg: `Unsupported value: "Everywhere": supported values: "Cluster", "Namespaced"`},
		{name: "no storage version",
			edit:  func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[0].Storage = false },
			field: "spec.versions", msg: `Invalid value: []apiextensions.CustomResourceDefinitionVersion{apiextensions.CustomResourceDefinitionVersion{Name:"v1", Served:true, Storage:false, Deprecated:false, DeprecationWarning:(*string)(nil), Schema:(*apiextensions.CustomResourceValidation)(0xc000000000), Subresources:(*apiextensions.CustomResourceSubresources)(0xc000000001), AdditionalPrinterColumns:[]apiextensions.CustomResourceColumnDefinition(nil), SelectableFields:[]apiextensions.SelectableField(nil)}}: must have exactly one version marked as storage version`},
		{name: "schema without type at the root",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				c.Spec.Versions[0].Schema.OpenApiv3Schema.Raw = []byte(`{"properties":{"spec":{"type":"object"}}}`)
			},
			// As kube-apiserver: versions with one schema are validated as
			// the internal type's spec.validation, and named so.
			field: "spec.validation.openAPIV3Schema.type", msg: `Required value: must not be empty at the root`},
		{name: "default not pruned",
			edit: func(c *apiextensionsv1.CustomResourceDefinition) {
				c.Spec.Versions[0].Schema.OpenApiv3Schema.Raw = []byte(`{"type":"object","properties":{"spec":{"type":"object","default":{"x":1},"properties":{"a":{"type":"string"}}}}}`)
			},
			field: "spec.validation.openAPIV3Schema.properties[spec].default", msg: `Invalid value: map[string]interface {}{"x":1}: must not have unknown fields`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := crdFromYAML(t, widgetCRD)
			tc.edit(c)
			_, err := crds.CreateCustomResourceDefinition(admin(t), &apiextensionsv1.CreateCustomResourceDefinitionRequest{CustomResourceDefinition: c})
			se := wantReason(t, err, apierrors.ReasonInvalid)
			var found bool
			for _, c := range se.Causes {
				if c.Field == tc.field {
					found = true
					if tc.name != "no storage version" && c.Message != tc.msg {
						t.Errorf("%s: got %q, want %q", tc.field, c.Message, tc.msg)
					}
				}
			}
			if !found {
				t.Errorf("got causes %+v, want one at %s", se.Causes, tc.field)
			}
		})
	}
}
