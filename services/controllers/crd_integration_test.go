// This file holds the CRD controller's test on a real in-process API
// service: a new CRD gets its accepted names, NamesAccepted and
// Established (True: the kind is served); a second CRD of the group asking for a taken plural is
// refused its names with Kubernetes' reason and message, and gets them
// once the first is deleted; a deleted CRD's custom resources are deleted
// (one held by a finalizer holds the CRD), then it loses its cleanup
// finalizer and goes.
package controllers_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
	"github.com/kplane/kplane/services/controllers/crd"
)

func testCRD(name, plural, kind string, shortNames ...string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		Metadata: &metav1.ObjectMeta{Name: name},
		Spec: &apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: "Namespaced",
			Names: &apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind, ShortNames: shortNames},
			Versions: []*apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenApiv3Schema: &apiextensionsv1.JSONSchemaProps{
					Raw: []byte(`{"type":"object","x-kubernetes-preserve-unknown-fields":true}`)}}}},
		},
	}
}

func condition(c *apiextensionsv1.CustomResourceDefinition, typ string) *apiextensionsv1.CustomResourceDefinitionCondition {
	for _, x := range c.GetStatus().GetConditions() {
		if x.GetType() == typ {
			return x
		}
	}
	return nil
}

func TestCRDNamesEstablishedAndFinalizer(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) { cfg.Controllers = []string{controllers.CRD} })
	crds := client.Must[*apiextensionsv1.CustomResourceDefinition](c.conn)

	if _, err := crds.Create(c.ctx, testCRD("widgets.example.com", "widgets", "Widget", "wd")); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "widgets' names accepted and Established", func() (bool, string) {
		w, err := crds.Get(c.ctx, "", "widgets.example.com")
		na, est := condition(w, crd.NamesAccepted), condition(w, crd.Established)
		an := w.GetStatus().GetAcceptedNames()
		ok := err == nil && na.GetStatus() == "True" && na.GetReason() == "NoConflicts" && na.GetMessage() == "no conflicts found" &&
			est.GetStatus() == "True" && est.GetReason() == crd.EstablishedReason && est.GetMessage() == crd.EstablishedMessage &&
			an.GetPlural() == "widgets" && an.GetSingular() == "widget" && an.GetKind() == "Widget" && an.GetListKind() == "WidgetList" &&
			len(an.GetShortNames()) == 1 && an.GetShortNames()[0] == "wd"
		return ok, fmt.Sprintf("%v %v", w.GetStatus(), err)
	})

	// Another CRD of the group wants the plural "widgets" as its short
	// name, and a kind already accepted.
	if _, err := crds.Create(c.ctx, testCRD("gadgets.example.com", "gadgets", "Widget", "widgets")); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "gadgets names refused", func() (bool, string) {
		g, err := crds.Get(c.ctx, "", "gadgets.example.com")
		na, est := condition(g, crd.NamesAccepted), condition(g, crd.Established)
		an := g.GetStatus().GetAcceptedNames()
		// The list kind is checked last: its conflict is the one
		// reported, as in Kubernetes.
		ok := err == nil && na.GetStatus() == "False" && na.GetReason() == "ListKindConflict" && na.GetMessage() == `"WidgetList" is already in use` &&
			est.GetStatus() == "False" && est.GetReason() == "NotAccepted" &&
			an.GetPlural() == "gadgets" && an.GetKind() == "" && len(an.GetShortNames()) == 0
		return ok, fmt.Sprintf("%v %v", g.GetStatus(), err)
	})

	// A widget held by a finalizer.
	dyn := dynamicv1.NewResourceServiceClient(c.conn)
	w1 := &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "widgets", Namespace: "default", Name: "w1"}
	testutil.EventuallyWithin(t, waitLimit, "a widget created", func() (bool, string) {
		_, err := dyn.Create(c.ctx, &dynamicv1.CreateRequest{Target: w1,
			Object: []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","finalizers":["example.com/hold"]}}`)})
		return err == nil, fmt.Sprint(err)
	})

	// Deleting widgets: its widgets are deleted; w1's finalizer holds it
	// and so the CRD, which says so; once w1 goes, the cleanup finalizer
	// is removed and the CRD goes; gadgets then gets the names it asked
	// for.
	if err := crds.Delete(c.ctx, "", "widgets.example.com", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var held []byte
	testutil.EventuallyWithin(t, waitLimit, "w1 deleted, held by its finalizer, the CRD waiting for it", func() (bool, string) {
		w, err := crds.Get(c.ctx, "", "widgets.example.com")
		term := condition(w, crd.Terminating)
		got, gerr := dyn.Get(c.ctx, &dynamicv1.GetRequest{Target: w1})
		held = got.GetObject()
		ok := err == nil && gerr == nil && strings.Contains(string(held), `"deletionTimestamp"`) &&
			term.GetStatus() == "True" && term.GetReason() == "InstanceDeletionCheck"
		return ok, fmt.Sprintf("%v %s %v %v", term, held, err, gerr)
	})
	var doc map[string]any
	if err := json.Unmarshal(held, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc["metadata"].(map[string]any), "finalizers")
	b, _ := json.Marshal(doc)
	if _, err := dyn.Update(c.ctx, &dynamicv1.UpdateRequest{Target: w1, Object: b}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "widgets gone", func() (bool, string) {
		w, err := crds.Get(c.ctx, "", "widgets.example.com")
		return apierrors.IsNotFound(err), fmt.Sprintf("%v %v %v", w.GetMetadata().GetFinalizers(), w.GetStatus().GetConditions(), err)
	})
	testutil.EventuallyWithin(t, waitLimit, "gadgets' names accepted", func() (bool, string) {
		g, err := crds.Get(c.ctx, "", "gadgets.example.com")
		an := g.GetStatus().GetAcceptedNames()
		ok := err == nil && condition(g, crd.NamesAccepted).GetStatus() == "True" && condition(g, crd.Established).GetReason() == crd.EstablishedReason &&
			an.GetKind() == "Widget" && len(an.GetShortNames()) == 1 && an.GetShortNames()[0] == "widgets"
		return ok, fmt.Sprintf("%v %v", g.GetStatus(), err)
	})
}

// A namespace being deleted loses its custom objects (the API service
// deletes them; the Namespace controller counts them, NamespaceContentRemaining
// naming the resource as Kubernetes does, and finalizes the namespace once
// they are gone). The resource is served at two versions, and counted once.
func TestNamespaceDeletionDeletesCustomObjects(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) { cfg.Controllers = []string{controllers.CRD, controllers.Namespace} })
	crds := client.Must[*apiextensionsv1.CustomResourceDefinition](c.conn)
	twoVersions := testCRD("widgets.example.com", "widgets", "Widget")
	v2 := proto.Clone(twoVersions.GetSpec().GetVersions()[0]).(*apiextensionsv1.CustomResourceDefinitionVersion)
	v2.Name, v2.Storage = "v2", false
	twoVersions.Spec.Versions = append(twoVersions.Spec.Versions, v2)
	if _, err := crds.Create(c.ctx, twoVersions); err != nil {
		t.Fatal(err)
	}
	const ns = "doomed"
	c.namespace(t, ns)
	dyn := dynamicv1.NewResourceServiceClient(c.conn)
	w := func(name string) *dynamicv1.Target {
		return &dynamicv1.Target{Group: "example.com", Version: "v1", Resource: "widgets", Namespace: ns, Name: name}
	}
	testutil.EventuallyWithin(t, waitLimit, "widgets created", func() (bool, string) {
		_, err := dyn.Create(c.ctx, &dynamicv1.CreateRequest{Target: w(""),
			Object: []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","finalizers":["example.com/hold"]}}`)})
		return err == nil, fmt.Sprint(err)
	})
	if _, err := dyn.Create(c.ctx, &dynamicv1.CreateRequest{Target: w(""),
		Object: []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w2"}}`)}); err != nil {
		t.Fatal(err)
	}
	if err := c.nss.Delete(c.ctx, "", ns, client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var held []byte
	testutil.EventuallyWithin(t, waitLimit, "w2 gone, w1 held by its finalizer, the namespace waiting for it", func() (bool, string) {
		_, err2 := dyn.Get(c.ctx, &dynamicv1.GetRequest{Target: w("w2")})
		got, err1 := dyn.Get(c.ctx, &dynamicv1.GetRequest{Target: w("w1")})
		held = got.GetObject()
		n, err := c.nss.Get(c.ctx, "", ns)
		var remaining string
		for _, cond := range n.GetStatus().GetConditions() {
			if cond.GetType() == "NamespaceContentRemaining" {
				remaining = cond.GetMessage()
			}
		}
		ok := apierrors.IsNotFound(err2) && err1 == nil && strings.Contains(string(held), `"deletionTimestamp"`) && err == nil &&
			remaining == "Some resources are remaining: widgets.example.com has 1 resource instances"
		return ok, fmt.Sprintf("w2: %v; w1: %s %v; namespace: %q %v", err2, held, err1, remaining, err)
	})
	var doc map[string]any
	if err := json.Unmarshal(held, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc["metadata"].(map[string]any), "finalizers")
	b, _ := json.Marshal(doc)
	if _, err := dyn.Update(c.ctx, &dynamicv1.UpdateRequest{Target: w("w1"), Object: b}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "namespace gone", func() (bool, string) {
		_, err := c.nss.Get(c.ctx, "", ns)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
