// This file holds what the API service does for CustomResourceDefinitions
// beyond the common machinery: their defaults, their create and update
// strategy (status.storedVersions) and their validation, each done by
// k8s.io/apiextensions-apiserver's own code on its Go types.
package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// crdToKube returns crd as apiextensions' v1 Go type, through its
// Kubernetes JSON (the schema is kept as JSON in the message).
func crdToKube(crd *apiextensionsv1.CustomResourceDefinition) (*kubeapiextv1.CustomResourceDefinition, error) {
	b, err := kubejson.Marshal(crd)
	if err != nil {
		return nil, fmt.Errorf("crd to json: %w", err)
	}
	out := &kubeapiextv1.CustomResourceDefinition{}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("crd from json: %w", err)
	}
	return out, nil
}

// crdFromKube replaces crd's contents with in's.
func crdFromKube(in *kubeapiextv1.CustomResourceDefinition, crd *apiextensionsv1.CustomResourceDefinition) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("crd to json: %w", err)
	}
	if err := kubejson.Unmarshal(b, crd, kubejson.Options{}); err != nil {
		return fmt.Errorf("crd from json: %w", err)
	}
	return nil
}

// crdToInternal is crdToKube then apiextensions' conversion to its internal
// type, the one its validation takes.
func crdToInternal(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensions.CustomResourceDefinition, error) {
	v1, err := crdToKube(crd)
	if err != nil {
		return nil, err
	}
	out := &apiextensions.CustomResourceDefinition{}
	if err := kubeapiextv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1, out, nil); err != nil {
		return nil, fmt.Errorf("crd to internal: %w", err)
	}
	return out, nil
}

// defaultCRD applies apiextensions' v1 defaults (singular and listKind from
// kind, conversion strategy None, a webhook service's port 443). A CRD that
// does not convert is left as it is: validation reports it.
func defaultCRD(crd *apiextensionsv1.CustomResourceDefinition) {
	v1, err := crdToKube(crd)
	if err != nil {
		return
	}
	// storedVersions is the strategy's (prepareCRDCreate), not a default.
	stored := v1.Status.StoredVersions
	kubeapiextv1.SetObjectDefaults_CustomResourceDefinition(v1)
	v1.Status.StoredVersions = stored
	_ = crdFromKube(v1, crd) // the same document back: cannot fail
}

// prepareCRDCreate is the CRD create strategy: the status is the server's,
// holding only the storage version as the one stored version.
func prepareCRDCreate(crd *apiextensionsv1.CustomResourceDefinition) {
	crd.Status = &apiextensionsv1.CustomResourceDefinitionStatus{}
	addStorageVersion(crd)
}

// prepareCRDUpdate is the CRD update strategy once the status has been
// carried over: a new storage version joins status.storedVersions. The
// spec is first put in its Go type's form, so that a schema sent with its
// keys in another order or spaced otherwise is the same spec, as
// Kubernetes compares the decoded spec when it decides whether the
// generation changes. (Only the spec is replaced: the caller holds the
// metadata.)
func prepareCRDUpdate(crd *apiextensionsv1.CustomResourceDefinition) {
	if v1, err := crdToKube(crd); err == nil {
		canon := &apiextensionsv1.CustomResourceDefinition{}
		if crdFromKube(v1, canon) == nil {
			crd.Spec = canon.Spec
		}
	}
	if crd.Status == nil {
		crd.Status = &apiextensionsv1.CustomResourceDefinitionStatus{}
	}
	addStorageVersion(crd)
}

func addStorageVersion(crd *apiextensionsv1.CustomResourceDefinition) {
	for _, v := range crd.GetSpec().GetVersions() {
		if v.GetStorage() {
			if !slices.Contains(crd.Status.StoredVersions, v.GetName()) {
				crd.Status.StoredVersions = append(crd.Status.StoredVersions, v.GetName())
			}
			return
		}
	}
}

// validateCRD is Kubernetes' validation of a CRD: on create, on update
// (names immutable once Established, schema rules relaxed for what the old
// object already had), and of a status write.
func validateCRD(ctx context.Context, r *resourceInfo, crd *apiextensionsv1.CustomResourceDefinition, old proto.Message, status bool) error {
	in, err := crdToInternal(crd)
	if err != nil {
		return invalid(r, meta(crd).GetName(), field.ErrorList{field.Invalid(field.NewPath("spec"), nil, err.Error())})
	}
	var errs field.ErrorList
	if old == nil {
		errs = crdvalidation.ValidateCustomResourceDefinition(ctx, in)
	} else {
		oldIn, err := crdToInternal(old.(*apiextensionsv1.CustomResourceDefinition))
		if err != nil {
			return fmt.Errorf("stored crd %s: %w", meta(old).GetName(), err)
		}
		if status {
			errs = crdvalidation.ValidateUpdateCustomResourceDefinitionStatus(in, oldIn)
		} else {
			errs = crdvalidation.ValidateCustomResourceDefinitionUpdate(ctx, in, oldIn)
		}
	}
	return invalid(r, meta(crd).GetName(), errs)
}

// crdCleanupFinalizer holds a deleted CRD until the CRD controller has
// deleted its custom resources.
const crdCleanupFinalizer = "customresourcecleanup.apiextensions.k8s.io"

// markCRDTerminating is what a delete does to a CRD, as Kubernetes' CRD
// storage does: the cleanup finalizer holds it, and its Terminating
// condition says its custom resources are about to be deleted.
func markCRDTerminating(crd *apiextensionsv1.CustomResourceDefinition) {
	addFinalizer(crd.GetMetadata(), crdCleanupFinalizer)
	if crd.Status == nil {
		crd.Status = &apiextensionsv1.CustomResourceDefinitionStatus{}
	}
	setCRDCondition(crd.Status, &apiextensionsv1.CustomResourceDefinitionCondition{
		Type: "Terminating", Status: "True", Reason: "InstanceDeletionPending",
		Message: "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
	})
}

// setCRDCondition sets condition c in st, keeping its lastTransitionTime
// when the status does not change, as Kubernetes' setCRDCondition does.
func setCRDCondition(st *apiextensionsv1.CustomResourceDefinitionStatus, c *apiextensionsv1.CustomResourceDefinitionCondition) {
	for i, old := range st.Conditions {
		if old.GetType() != c.GetType() {
			continue
		}
		c = proto.Clone(c).(*apiextensionsv1.CustomResourceDefinitionCondition)
		if old.GetStatus() == c.GetStatus() {
			c.LastTransitionTime = old.GetLastTransitionTime()
		}
		if c.LastTransitionTime == nil {
			c.LastTransitionTime = timestamppb.New(time.Now().Truncate(time.Second))
		}
		st.Conditions[i] = c
		return
	}
	c = proto.Clone(c).(*apiextensionsv1.CustomResourceDefinitionCondition)
	if c.LastTransitionTime == nil {
		c.LastTransitionTime = timestamppb.New(time.Now().Truncate(time.Second))
	}
	st.Conditions = append(st.Conditions, c)
}
