// This file holds what the API service does to a custom resource's object:
// its JSON form (the stored form, and the form the generic service speaks)
// and kplane.dynamic.v1.Object, pruning and defaulting from the CRD's
// structural schema, and its validation, done by
// k8s.io/apiextensions-apiserver's schema packages as kube-apiserver does.
package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	apiextcel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	celmodel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiextvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeversion "k8s.io/apimachinery/pkg/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"

	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// crSchema is what the service needs of one CRD version's schema: the
// structural schema (pruning, defaulting, embedded metadata, list types)
// and the OpenAPI validator. It is built once per CRD change and never
// modified after.
type crSchema struct {
	structural *structuralschema.Structural
	validator  apiextvalidation.SchemaValidator
	// cel holds the compiled x-kubernetes-validations rules (nil: none).
	cel *apiextcel.Validator
	// scale is the version's scale subresource (nil: none).
	scale *kubeapiextv1.CustomResourceSubresourceScale
	// status is whether the version has the status subresource.
	status bool
	// selectable are the version's selectableFields, as field labels
	// ("spec.color").
	selectable []string
	// crd is the CRD it was built from (discovery reads its names and
	// printer columns).
	crd *kubeapiextv1.CustomResourceDefinition
	// version is the CRD version the schema is of.
	version string
	// served holds, on the storage version's schema, the schema of every
	// served version by name (the storage version's is itself when
	// served); a version missing is not served.
	served map[string]*crSchema
	// warning is the version's deprecation warning, sent with every
	// request at it ("" when the version is not deprecated).
	warning string
	// conv converts objects between the CRD's versions by its conversion
	// webhook (apiextensions-apiserver's converter); nil for strategy
	// None, whose conversion is the apiVersion rewritten.
	conv runtime.ObjectConvertor
}

// allSelectable are the selectableFields of the storage version and
// every served version, once each.
func (s *crSchema) allSelectable() []string {
	out := slices.Clone(s.selectable)
	for _, v := range s.served {
		for _, f := range v.selectable {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// newServedSchemas builds the schema of the storage version and of every
// other served version of crd; the storage version's is returned, with
// served filled in. A CRD converting by webhook gets its converter from
// convs (nil: such a CRD is served at its storage version only).
func newServedSchemas(crd *kubeapiextv1.CustomResourceDefinition, storage string, convs *conversion.CRConverterFactory) (*crSchema, error) {
	sch, err := newCRSchema(crd, storage)
	if err != nil {
		return nil, err
	}
	sch.served = map[string]*crSchema{}
	webhook := crd.Spec.Conversion != nil && crd.Spec.Conversion.Strategy == kubeapiextv1.WebhookConverter
	if webhook && convs != nil {
		if sch.conv, _, err = convs.NewConverter(crd); err != nil {
			return nil, fmt.Errorf("crd %s conversion: %w", crd.Name, err)
		}
	}
	for _, v := range crd.Spec.Versions {
		switch {
		case !v.Served:
		case webhook && convs == nil && v.Name != storage:
		case v.Name == storage:
			sch.served[v.Name] = sch
		default:
			vs, err := newCRSchema(crd, v.Name)
			if err != nil {
				return nil, err
			}
			vs.conv = sch.conv
			sch.served[v.Name] = vs
		}
	}
	return sch, nil
}

// newCRSchema builds the schema of version of a CRD (v1 Go type). A CRD
// validation has accepted always has a structural schema; an error here
// means the CRD was stored by something that skipped validation.
func newCRSchema(crd *kubeapiextv1.CustomResourceDefinition, version string) (*crSchema, error) {
	var v1 *kubeapiextv1.JSONSchemaProps
	var scale *kubeapiextv1.CustomResourceSubresourceScale
	var status bool
	var selectable []string
	for _, v := range crd.Spec.Versions {
		if v.Name == version && v.Schema != nil {
			v1 = v.Schema.OpenAPIV3Schema
		}
		if v.Name == version && v.Subresources != nil {
			scale = v.Subresources.Scale
			status = v.Subresources.Status != nil
		}
		if v.Name == version {
			for _, f := range v.SelectableFields {
				selectable = append(selectable, strings.TrimPrefix(f.JSONPath, "."))
			}
		}
	}
	if v1 == nil {
		return nil, fmt.Errorf("crd %s version %s has no schema", crd.Name, version)
	}
	in := &apiextensions.JSONSchemaProps{}
	if err := kubeapiextv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v1, in, nil); err != nil {
		return nil, fmt.Errorf("crd %s schema: %w", crd.Name, err)
	}
	st, err := structuralschema.NewStructural(in)
	if err != nil {
		return nil, fmt.Errorf("crd %s schema is not structural: %w", crd.Name, err)
	}
	val, _, err := apiextvalidation.NewSchemaValidator(in)
	if err != nil {
		return nil, fmt.Errorf("crd %s schema validator: %w", crd.Name, err)
	}
	// The rules are compiled once here, with Kubernetes' per-call cost
	// limit, as its custom resource strategy compiles them.
	rules := apiextcel.NewValidator(st, true, celconfig.PerCallLimit)
	return &crSchema{structural: st, validator: val, cel: rules, scale: scale, status: status, selectable: selectable, crd: crd, version: version,
		warning: deprecationWarning(crd, version)}, nil
}

// customToMap renders obj as its Kubernetes JSON document (a map in
// apimachinery's unstructured form: numbers as int64 or float64).
func customToMap(obj *dynamicv1.Object) (map[string]any, error) {
	u := map[string]any{}
	if len(obj.GetContent()) > 0 {
		if err := utiljson.Unmarshal(obj.GetContent(), &u); err != nil {
			return nil, fmt.Errorf("custom object content: %w", err)
		}
	}
	if st := obj.GetStatus(); st != nil {
		var v any
		if err := utiljson.Unmarshal(st.GetRaw(), &v); err != nil {
			return nil, fmt.Errorf("custom object status: %w", err)
		}
		u["status"] = v
	}
	mb, err := kubejson.Marshal(meta(obj))
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := utiljson.Unmarshal(mb, &m); err != nil {
		return nil, fmt.Errorf("custom object metadata: %w", err)
	}
	u["metadata"] = m
	if obj.GetApiVersion() != "" {
		u["apiVersion"] = obj.GetApiVersion()
	}
	if obj.GetKind() != "" {
		u["kind"] = obj.GetKind()
	}
	return u, nil
}

// customToJSON is obj's Kubernetes JSON.
func customToJSON(obj *dynamicv1.Object) ([]byte, error) {
	u, err := customToMap(obj)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(u)
	if err != nil {
		return nil, fmt.Errorf("custom object to json: %w", err)
	}
	return b, nil
}

// errMetadata marks a document whose metadata does not decode.
var errMetadata = errors.New("metadata does not decode")

// customFromMap builds the Object for document u of resource r: the
// metadata decoded into ObjectMeta (unknown metadata fields are dropped and
// their paths returned, as Kubernetes prunes them), status apart when r has
// a status subresource, every other field the content. u is consumed.
func customFromMap(r *resourceInfo, u map[string]any) (*dynamicv1.Object, []string, error) {
	obj := &dynamicv1.Object{Metadata: &metav1.ObjectMeta{}}
	obj.ApiVersion, _ = u["apiVersion"].(string)
	obj.Kind, _ = u["kind"].(string)
	if sch := r.custom.schema.Load(); sch != nil && len(sch.allSelectable()) > 0 {
		// As Kubernetes' selectable fields: the value printed, "" where
		// the field is absent; those of every served version (the same
		// object at each: conversion strategy None).
		obj.SelectableFields = map[string]string{}
		for _, f := range sch.allSelectable() {
			v, ok, _ := unstructured.NestedFieldNoCopy(u, jsonPathFields(f)...)
			if ok && v != nil {
				obj.SelectableFields[f] = fmt.Sprint(v)
			} else {
				obj.SelectableFields[f] = ""
			}
		}
	}
	var unknown []string
	if m, ok := u["metadata"]; ok && m != nil {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil, nil, fmt.Errorf("%w: metadata must be an object", errMetadata)
		}
		b, err := json.Marshal(mm)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", errMetadata, err)
		}
		err = kubejson.Unmarshal(b, obj.Metadata, kubejson.Options{})
		var uf *kubejson.UnknownFieldsError
		if errors.As(err, &uf) {
			for _, p := range uf.Paths {
				unknown = append(unknown, "metadata."+p)
			}
			err = kubejson.Unmarshal(b, obj.Metadata, kubejson.Options{DiscardUnknown: true})
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", errMetadata, err)
		}
	}
	delete(u, "apiVersion")
	delete(u, "kind")
	delete(u, "metadata")
	if st, ok := u["status"]; ok && r.HasStatus {
		b, err := json.Marshal(st)
		if err != nil {
			return nil, nil, fmt.Errorf("custom object status: %w", err)
		}
		obj.Status = &dynamicv1.JSON{Raw: b}
		delete(u, "status")
	}
	b, err := json.Marshal(u) // keys sorted: equal content, equal bytes
	if err != nil {
		return nil, nil, fmt.Errorf("custom object content: %w", err)
	}
	obj.Content = b
	return obj, unknown, nil
}

// customFromJSON decodes a stored custom object of r with the schema's
// defaults applied, as kube-apiserver defaults what it reads from the store
// (a default the CRD gained after the object was written shows).
func customFromJSON(r *resourceInfo, data []byte) (*dynamicv1.Object, error) {
	u := map[string]any{}
	if err := utiljson.Unmarshal(data, &u); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", r.Resource, err)
	}
	if sch := r.custom.schema.Load(); sch != nil {
		structuraldefaulting.Default(u, sch.structural)
	}
	obj, _, err := customFromMap(r, u)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", r.Resource, err)
	}
	return obj, nil
}

// decodeCustomRequest decodes a request's object for r as kube-apiserver's
// custom resource decoder does: a JSON object, its unknown fields pruned
// (Strict refuses them instead, as a BadRequest naming each), then the
// schema's defaults applied, by the schema of the version the request was
// made at (sch; nil: r's). It returns the object and a warning per pruned
// field.
func decodeCustomRequest(r *resourceInfo, sch *crSchema, data []byte, fieldValidation string) (*dynamicv1.Object, []string, error) {
	if len(data) == 0 {
		return nil, nil, nil
	}
	u := map[string]any{}
	if err := utiljson.Unmarshal(data, &u); err != nil {
		return nil, nil, apierrors.NewBadRequest("the request body does not decode: " + err.Error())
	}
	var unknown []string
	version := r.Version
	if sch == nil {
		sch = r.custom.schema.Load()
	}
	if sch != nil {
		version = sch.version
		unknown = structuralpruning.PruneWithOptions(u, sch.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
		structuraldefaulting.Default(u, sch.structural)
	}
	obj, metaUnknown, err := customFromMap(r, u)
	if err != nil {
		return nil, nil, apierrors.NewBadRequest("the request body does not decode: " + err.Error())
	}
	unknown = append(unknown, metaUnknown...)
	var warnings []string
	for _, p := range unknown {
		warnings = append(warnings, fmt.Sprintf("unknown field %q", p))
	}
	switch fieldValidation {
	case "Strict":
		if len(warnings) > 0 {
			// As kube-apiserver words a decoding error of the request.
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: strict decoding error: %s",
				r.Kind, version, r.Kind, strings.Join(warnings, ", ")))
		}
	case "Ignore":
		warnings = nil
	}
	return obj, warnings, nil
}

// validateCustom is Kubernetes' validation of a custom object: its type
// meta, metadata, the schema (OpenAPI validation, embedded resources'
// metadata, list types and map keys, CEL rules). A status write is validated the same
// way, on the whole object. As on Kubernetes, the schema is that of the
// version the request was made at, and the object (and the stored one)
// are validated as that version sees them.
func validateCustom(ctx context.Context, r *resourceInfo, obj *dynamicv1.Object, old *dynamicv1.Object) error {
	name := meta(obj).GetName()
	var errs field.ErrorList
	if obj.GetKind() != r.Kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), obj.GetKind(), "must be "+r.Kind))
	}
	if obj.GetApiVersion() != r.APIVersion() {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), obj.GetApiVersion(), "must be "+r.APIVersion()))
	}
	if len(errs) > 0 {
		return invalid(r, name, errs)
	}
	errs = append(errs, validateMeta(r, meta(obj), field.NewPath("metadata"))...)
	if old != nil {
		errs = append(errs, validateMetaUpdate(meta(obj), meta(old), field.NewPath("metadata"))...)
	}
	if sch := requestSchema(ctx, r); sch != nil {
		u, err := customToMap(obj)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if u, _, err = atRequestVersion(ctx, r, u); err != nil {
			return err
		}
		if old == nil {
			errs = append(errs, apiextvalidation.ValidateCustomResource(nil, u, sch.validator)...)
			errs = append(errs, validateScaleReplicas(u, sch.scale)...)
			errs = append(errs, schemaobjectmeta.Validate(nil, u, sch.structural, false)...)
			errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, sch.structural, u)...)
			if sch.cel != nil {
				errs = append(errs, celErrors(ctx, sch, u, nil, nil, errs)...)
			}
			return invalid(r, name, errs)
		}
		// An update ratchets, as Kubernetes' CRDValidationRatcheting (on
		// by default since v1.30): a value the schema (or a CEL rule)
		// refuses is let through where it did not change from the stored
		// object, so an object the CRD's tightened schema would refuse can
		// still be updated elsewhere; list-type rules apply once the
		// stored object keeps them.
		oldU, err := customToMap(old)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if oldU, _, err = atRequestVersion(ctx, r, oldU); err != nil {
			return err
		}
		correlated := common.NewCorrelatedObject(u, oldU, &celmodel.Structural{Structural: sch.structural})
		errs = append(errs, apiextvalidation.ValidateCustomResourceUpdate(nil, u, oldU, sch.validator, apiextvalidation.WithRatcheting(correlated))...)
		errs = append(errs, validateScaleReplicas(u, sch.scale)...)
		errs = append(errs, schemaobjectmeta.Validate(nil, u, sch.structural, false)...)
		if oldErrs := structurallisttype.ValidateListSetsAndMaps(nil, sch.structural, oldU); len(oldErrs) == 0 {
			errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, sch.structural, u)...)
		}
		if sch.cel != nil {
			errs = append(errs, celErrors(ctx, sch, u, oldU, correlated, errs)...)
		}
	}
	return invalid(r, name, errs)
}

// validateScaleReplicas checks, for a version with a scale subresource,
// the replica counts at its spec and status paths and its label selector,
// as Kubernetes' custom resource validator does: integers (a string there
// is invalid), not negative, at most MaxInt32, the selector a string.
func validateScaleReplicas(u map[string]any, scale *kubeapiextv1.CustomResourceSubresourceScale) field.ErrorList {
	if scale == nil {
		return nil
	}
	var errs field.ErrorList
	replicas := func(path string) {
		v, _, err := unstructured.NestedInt64(u, jsonPathFields(path)...)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(field.NewPath(path), v, err.Error()))
		case v < 0:
			errs = append(errs, field.Invalid(field.NewPath(path), v, "should be a non-negative integer"))
		case v > math.MaxInt32:
			errs = append(errs, field.Invalid(field.NewPath(path), v, fmt.Sprintf("should be less than or equal to %v", math.MaxInt32)))
		}
	}
	replicas(scale.SpecReplicasPath)
	replicas(scale.StatusReplicasPath)
	if p := scale.LabelSelectorPath; p != nil && *p != "" {
		v, _, err := unstructured.NestedString(u, jsonPathFields(*p)...)
		if err != nil {
			errs = append(errs, field.Invalid(field.NewPath(*p), v, err.Error()))
		}
	}
	return errs
}

// celErrors evaluates the x-kubernetes-validations rules on document u
// (oldU: the stored object, for transition rules and ratcheting through
// correlated; nil on create) within
// Kubernetes' runtime cost budget. As on Kubernetes, the rules are not
// evaluated when the schema checks found errors the rules could trip on
// (wrong types, missing or unsupported values, too long or too many): one
// error then says they were skipped.
func celErrors(ctx context.Context, sch *crSchema, u, oldU map[string]any, correlated *common.CorrelatedObject, errs field.ErrorList) field.ErrorList {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return field.ErrorList{field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")}
		}
	}
	var old any
	var opts []apiextcel.Option
	if oldU != nil {
		old = oldU
		opts = append(opts, apiextcel.WithRatcheting(correlated))
	}
	out, _ := sch.cel.Validate(ctx, nil, sch.structural, u, old, celconfig.RuntimeCELCostBudget, opts...)
	return out
}

// jsonPathFields are the fields of a scale subresource's path
// (".spec.replicas"): CRD validation allows only such dotted paths.
func jsonPathFields(p string) []string {
	return strings.Split(strings.TrimPrefix(p, "."), ".")
}

// customScale fills sc from a custom object, as Kubernetes' scale of a
// custom resource: the replicas at specReplicasPath and statusReplicasPath
// (0 where absent), the selector at labelSelectorPath, by the scale
// subresource of the request's version, on the object at that version.
func customScale(ctx context.Context, r *resourceInfo, o *dynamicv1.Object, sc *autoscalingv1.Scale) error {
	sch := requestSchema(ctx, r)
	if sch == nil || sch.scale == nil {
		return nil
	}
	u, err := customToMap(o)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if u, _, err = atRequestVersion(ctx, r, u); err != nil {
		return err
	}
	if v, ok, _ := unstructured.NestedInt64(u, jsonPathFields(sch.scale.SpecReplicasPath)...); ok {
		sc.Spec.Replicas = int32(v)
	}
	if v, ok, _ := unstructured.NestedInt64(u, jsonPathFields(sch.scale.StatusReplicasPath)...); ok {
		sc.Status.Replicas = int32(v)
	}
	if p := sch.scale.LabelSelectorPath; p != nil && *p != "" {
		sc.Status.Selector, _, _ = unstructured.NestedString(u, jsonPathFields(*p)...)
	}
	return nil
}

// setCustomReplicas writes replicas at the specReplicasPath of the
// request version's scale subresource, on o seen at that version.
func setCustomReplicas(ctx context.Context, r *resourceInfo, o *dynamicv1.Object, replicas int32) error {
	sch := requestSchema(ctx, r)
	if sch == nil || sch.scale == nil {
		return apierrors.NewNotFound(r.Group, r.Resource+"/scale", meta(o).GetName())
	}
	u, err := customToMap(o)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	u, back, err := atRequestVersion(ctx, r, u)
	if err != nil {
		return err
	}
	if err := unstructured.SetNestedField(u, int64(replicas), jsonPathFields(sch.scale.SpecReplicasPath)...); err != nil {
		return apierrors.NewInternalError(err)
	}
	if u, err = back(u); err != nil {
		return apierrors.NewInternalError(err)
	}
	n, _, err := customFromMap(r, u)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	o.Content, o.Status = n.Content, n.Status
	return nil
}

// deprecationWarning is the warning a request at a deprecated version of
// crd gets, as kube-apiserver words it: the version's deprecationWarning,
// else "<group>/<version> <Kind> is deprecated", naming the newest served
// version that is not deprecated and newer, if there is one.
func deprecationWarning(crd *kubeapiextv1.CustomResourceDefinition, version string) string {
	var newer []string
	for _, v := range crd.Spec.Versions {
		if v.Name == version {
			if !v.Deprecated {
				return ""
			}
			if v.DeprecationWarning != nil {
				return *v.DeprecationWarning
			}
		}
	}
	for _, v := range crd.Spec.Versions {
		if v.Served && !v.Deprecated && kubeversion.CompareKubeAwareVersionStrings(version, v.Name) < 0 {
			newer = append(newer, v.Name)
		}
	}
	msg := fmt.Sprintf("%s/%s %s is deprecated", crd.Spec.Group, version, crd.Spec.Names.Kind)
	if len(newer) == 0 {
		return msg
	}
	slices.SortFunc(newer, func(a, b string) int { return -kubeversion.CompareKubeAwareVersionStrings(a, b) })
	return msg + fmt.Sprintf("; use %s/%s %s", crd.Spec.Group, newer[0], crd.Spec.Names.Kind)
}
