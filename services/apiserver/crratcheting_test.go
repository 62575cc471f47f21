// This file tests validation ratcheting of custom objects on update, as
// Kubernetes' CRDValidationRatcheting (on by default): once the CRD's
// schema tightens, a stored object that no longer passes can still be
// updated where it is valid, but a changed value must pass.
package apiserver

import (
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/proto/apierrors"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

func TestCustomResourceValidationRatcheting(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	dyn := dynamicv1.NewResourceServiceClient(e.conn)
	crd := establishCRD(t, e, gadgetCRD, gadgets("default", ""))
	if _, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgets("default", ""),
		Object: []byte(`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"},"spec":{"color":"red","size":8}}`)}); err != nil {
		t.Fatal(err)
	}
	// The schema tightens: size at most 5.
	crds := apiextensionsv1.NewCustomResourceDefinitionServiceClient(e.conn)
	got, err := crds.GetCustomResourceDefinition(ctx, &apiextensionsv1.GetCustomResourceDefinitionRequest{Name: crd.GetMetadata().GetName()})
	if err != nil {
		t.Fatal(err)
	}
	c := got.GetCustomResourceDefinition()
	sch := c.GetSpec().GetVersions()[0].GetSchema().GetOpenApiv3Schema()
	tightened := strings.Replace(string(sch.GetRaw()), `"maximum":10`, `"maximum":5`, 1)
	if tightened == string(sch.GetRaw()) {
		t.Fatalf("no maximum to tighten in %s", sch.GetRaw())
	}
	sch.Raw = []byte(tightened)
	if _, err := crds.UpdateCustomResourceDefinition(ctx, &apiextensionsv1.UpdateCustomResourceDefinitionRequest{Name: c.GetMetadata().GetName(), CustomResourceDefinition: c}); err != nil {
		t.Fatal(err)
	}
	// Wait for the registry's new schema: a new object of size 6 refused.
	for i := 0; ; i++ {
		_, err := dyn.Create(ctx, &dynamicv1.CreateRequest{Target: gadgets("default", ""),
			Object: []byte(`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"probe"},"spec":{"color":"red","size":6}}`)})
		if apierrors.ReasonOf(err) == apierrors.ReasonInvalid {
			break
		}
		if err == nil {
			_, _ = dyn.Delete(ctx, &dynamicv1.DeleteRequest{Target: gadgets("default", "probe")})
		}
		if i == 400 {
			t.Fatalf("the tightened schema never applied: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	update := func(spec string) error {
		cur, err := dyn.Get(ctx, &dynamicv1.GetRequest{Target: gadgets("default", "g")})
		if err != nil {
			t.Fatal(err)
		}
		o := decodeJSON(t, cur.GetObject())
		o["spec"] = decodeJSON(t, []byte(spec))
		_, err = dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: gadgets("default", "g"), Object: mustJSON(t, o)})
		return err
	}
	// size 8 unchanged: the color may change.
	if err := update(`{"color":"blue","size":8}`); err != nil {
		t.Errorf("update leaving the now-invalid size alone: %v", err)
	}
	// A changed size must pass the new schema.
	err = update(`{"color":"blue","size":7}`)
	if se := wantReason(t, err, apierrors.ReasonInvalid); !strings.Contains(se.Message, "spec.size in body should be less than or equal to 5") {
		t.Errorf("changing the size: got %v", err)
	}
	if err := update(`{"color":"blue","size":4}`); err != nil {
		t.Errorf("a valid size: %v", err)
	}
}
