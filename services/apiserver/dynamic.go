// This file holds the generic gRPC service for custom resources and every
// built-in kind (kplane.dynamic.v1.ResourceService): objects in and out as
// Kubernetes JSON, each call going through the same handlers as the typed
// services' (authentication, RBAC on the resource's group and resource,
// admission, validation, audit, spans). Discover lists custom resources
// only (the built-in kinds are in the typed services' discovery).
package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kplane/kplane/proto/apierrors"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

type dynamicService struct {
	dynamicv1.UnimplementedResourceServiceServer
	s *Server
}

var _ dynamicv1.ResourceServiceServer = (*dynamicService)(nil)

// servedAt is a resource as a request names it: the resource (a custom
// one kept at its storage version), the version asked for and that
// version's schema (nil for a built-in kind).
type servedAt struct {
	r *resourceInfo
	// sch is the schema of the version asked for (nil: a built-in kind).
	sch *crSchema
	// apiVersion is group/version as asked for.
	apiVersion string
}

// warn sends the version's deprecation warning, if it has one, with the
// call's response headers.
func (a *servedAt) warn(ctx context.Context) {
	if a.sch != nil && a.sch.warning != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(dynamicv1.WarningHeader, a.sch.warning))
	}
}

// builtin is t's resource if it names a built-in kind at its version.
func (x *dynamicService) builtin(t *dynamicv1.Target) (*servedAt, *resourceInfo) {
	r := x.s.resources[t.GetResource()]
	if r == nil || r.custom != nil || r.Group != t.GetGroup() || r.Version != t.GetVersion() {
		return nil, nil
	}
	return &servedAt{r: r, apiVersion: r.APIVersion()}, r
}

// resolve finds the served custom resource t names, at any of its served
// versions: NotFound, as a resource kube-apiserver does not serve,
// otherwise. The context returned carries the version's schema
// (crversion.go).
func (x *dynamicService) resolve(ctx context.Context, t *dynamicv1.Target) (context.Context, *servedAt, *resourceInfo, error) {
	at, r, err := x.find(ctx, t)
	if err != nil {
		return ctx, nil, nil, err
	}
	return withCRVersion(ctx, at.sch), at, r, nil
}

// find is resolve without the context.
func (x *dynamicService) find(ctx context.Context, t *dynamicv1.Target) (*servedAt, *resourceInfo, error) {
	if at, r := x.builtin(t); at != nil {
		return at, r, nil
	}
	if at, r := x.served(t); at != nil {
		at.warn(ctx)
		return at, r, nil
	}
	// Not served here (yet): a CRD another replica already serves may not
	// have reached this one's registry. Read it from the store and, if it
	// is servable at that version, wait (bounded) for the registry, so a
	// client that saw the resource in one replica's discovery is not told
	// 404 by the next.
	if x.crdServableInStore(ctx, t) {
		deadline := time.NewTimer(registryWait)
		defer deadline.Stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil, nil, storeErr(ctx.Err())
			case <-deadline.C:
				return nil, nil, apierrors.NewNotFound(t.GetGroup(), t.GetResource(), t.GetName())
			case <-tick.C:
			}
			if at, r := x.served(t); at != nil {
				at.warn(ctx)
				return at, r, nil
			}
		}
	}
	return nil, nil, apierrors.NewNotFound(t.GetGroup(), t.GetResource(), t.GetName())
}

// registryWait bounds how long a call waits for a CRD the store already
// has as servable to reach this replica's registry.
const registryWait = 5 * time.Second

// served is t's resource and version as this replica serves them now, or
// nil.
func (x *dynamicService) served(t *dynamicv1.Target) (*servedAt, *resourceInfo) {
	r := x.s.crs.lookup(t.GetGroup(), t.GetResource())
	if r == nil {
		return nil, nil
	}
	st := r.custom.schema.Load()
	if st == nil || st.served[t.GetVersion()] == nil {
		return nil, nil
	}
	return &servedAt{r: r, sch: st.served[t.GetVersion()], apiVersion: t.GetGroup() + "/" + t.GetVersion()}, r
}

// crdServableInStore reports whether the store holds a CRD for t's
// resource that serves t's version and whose names are accepted.
func (x *dynamicService) crdServableInStore(ctx context.Context, t *dynamicv1.Target) bool {
	r := x.s.resources["customresourcedefinitions"]
	if r == nil || t.GetResource() == "" || t.GetGroup() == "" {
		return false
	}
	obj, err := x.s.store.get(ctx, r, "", t.GetResource()+"."+t.GetGroup())
	if err != nil {
		return false
	}
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok || !crdServable(crd) {
		return false
	}
	for _, v := range crd.GetSpec().GetVersions() {
		if v.GetName() == t.GetVersion() && v.GetServed() {
			return true
		}
	}
	return false
}

// hasStatus reports whether the version asked for has the status
// subresource.
func (a *servedAt) hasStatus() bool {
	if a.sch == nil {
		return a.r.HasStatus
	}
	return a.sch.status
}

// hasScale reports whether the version asked for has the scale
// subresource.
func (a *servedAt) hasScale() bool {
	if a.sch == nil {
		return a.r.HasScale
	}
	return a.sch.scale != nil
}

// selectable are the selectableFields of the version asked for (never
// nil: a version without any selects on metadata alone).
func (a *servedAt) selectable() []string {
	if a.sch == nil {
		return nil // a built-in kind's own field selectors
	}
	if a.sch.selectable == nil {
		return []string{}
	}
	return a.sch.selectable
}

// json renders a custom object at the version asked for: with its
// apiVersion rewritten, as Kubernetes' conversion strategy None converts,
// or converted by the CRD's conversion webhook (or, for an error event, a
// Status). Callers answer an error with an InternalError (a failed
// conversion names the webhook's failure, as kube-apiserver's does).
func (a *servedAt) json(obj proto.Message) ([]byte, error) {
	o, ok := obj.(*dynamicv1.Object)
	if !ok || o.GetApiVersion() == a.apiVersion || a.apiVersion == "" {
		return customJSON(obj)
	}
	u, err := customToMap(o)
	if err != nil {
		return nil, err
	}
	if a.sch != nil && a.sch.conv != nil {
		if u, err = convertCustom(a.sch.conv, u, a.apiVersion); err != nil {
			return nil, err
		}
	}
	u["apiVersion"] = a.apiVersion
	b, err := json.Marshal(u)
	if err != nil {
		return nil, fmt.Errorf("custom object to json: %w", err)
	}
	return b, nil
}

// customJSON renders a custom object (or, for an error event, a Status).
func customJSON(obj proto.Message) ([]byte, error) {
	if o, ok := obj.(*dynamicv1.Object); ok {
		return customToJSON(o)
	}
	return kubejson.Marshal(obj)
}

// decodeBody decodes a write's object at the version asked for, sends its
// warnings, and converts it to the storage version (its apiVersion
// rewritten: conversion strategy None).
func (x *dynamicService) decodeBody(ctx context.Context, at *servedAt, body []byte, o *dynamicv1.WriteOptions) (proto.Message, error) {
	r := at.r
	if at.sch == nil {
		return x.decodeBuiltin(ctx, r, body, o.GetFieldValidation())
	}
	obj, warnings, err := decodeCustomRequest(r, at.sch, body, o.GetFieldValidation())
	if err != nil {
		return nil, err
	}
	if len(warnings) > 0 {
		md := metadata.MD{}
		for _, w := range warnings {
			md.Append(dynamicv1.WarningHeader, w)
		}
		_ = grpc.SetHeader(ctx, md)
	}
	if obj == nil {
		return nil, nil // the handlers answer "the request has no object"
	}
	// As kube-apiserver's decoding of a custom object: kind and apiVersion
	// are required, the apiVersion must be the URL's, and a kind other
	// than the resource's is Invalid.
	switch {
	case obj.GetKind() == "":
		return nil, apierrors.NewBadRequest(fmt.Sprintf("Object 'Kind' is missing in '%s'", body))
	case obj.GetApiVersion() == "":
		return nil, apierrors.NewBadRequest(fmt.Sprintf("Object 'apiVersion' is missing in '%s'", body))
	case obj.GetApiVersion() != at.apiVersion:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", obj.GetApiVersion(), at.apiVersion))
	case obj.GetKind() != r.Kind:
		return nil, invalid(r, meta(obj).GetName(), field.ErrorList{field.Invalid(field.NewPath("kind"), obj.GetKind(), "must be "+r.Kind)})
	}
	if at.sch.conv != nil && obj.GetApiVersion() != r.APIVersion() {
		u, err := customToMap(obj)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		if u, err = convertCustom(at.sch.conv, u, r.APIVersion()); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		if obj, _, err = customFromMap(r, u); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
	}
	obj.ApiVersion = r.APIVersion()
	return obj, nil
}

// decodeBuiltin decodes a write's object of a built-in kind from its
// Kubernetes JSON: unknown fields dropped with a warning each, or refused
// under fieldValidation=Strict (Ignore drops them silently), and the
// object's apiVersion and kind, if given, must be the resource's.
func (x *dynamicService) decodeBuiltin(ctx context.Context, r *resourceInfo, body []byte, fieldValidation string) (proto.Message, error) {
	obj := r.New()
	err := kubejson.Unmarshal(body, obj, kubejson.Options{})
	var uf *kubejson.UnknownFieldsError
	if errors.As(err, &uf) {
		if fieldValidation == "Strict" {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("strict decoding error: unknown field %q", strings.Join(uf.Paths, `", "`)))
		}
		if fieldValidation != "Ignore" {
			md := metadata.MD{}
			for _, p := range uf.Paths {
				md.Append(dynamicv1.WarningHeader, fmt.Sprintf("unknown field %q", p))
			}
			_ = grpc.SetHeader(ctx, md)
		}
		obj = r.New()
		err = kubejson.Unmarshal(body, obj, kubejson.Options{DiscardUnknown: true})
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the object does not decode as a %s: %v", r.Kind, err))
	}
	m := obj.ProtoReflect()
	fields := m.Descriptor().Fields()
	if v := m.Get(fields.ByName("api_version")).String(); v != "" && v != r.APIVersion() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", v, r.APIVersion()))
	}
	if k := m.Get(fields.ByName("kind")).String(); k != "" && k != r.Kind {
		return nil, invalid(r, meta(obj).GetName(), field.ErrorList{field.Invalid(field.NewPath("kind"), k, "must be "+r.Kind)})
	}
	setTypeMeta(r, obj)
	return obj, nil
}

// convertCustom converts custom object u to apiVersion with conv (the
// CRD's conversion webhook); callers answer a failure with an
// InternalError, as kube-apiserver does.
func convertCustom(conv runtime.ObjectConvertor, u map[string]any, apiVersion string) (map[string]any, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	out, err := conv.ConvertToVersion(&unstructured.Unstructured{Object: u}, gv)
	if err != nil {
		return nil, err
	}
	cu, ok := out.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("conversion to %s returned %T", apiVersion, out)
	}
	return cu.Object, nil
}

func writeOpts(o *dynamicv1.WriteOptions) writeOptions {
	return writeOptions{DryRun: o.GetDryRun(), FieldManager: o.GetFieldManager()}
}

// Get returns one object.
func (x *dynamicService) Get(ctx context.Context, req *dynamicv1.GetRequest) (*dynamicv1.GetResponse, error) {
	ctx, at, r, err := x.resolve(ctx, req.GetTarget())
	if err != nil {
		return nil, toGRPC(err)
	}
	obj, err := x.s.get(ctx, r, req.GetTarget().GetNamespace(), req.GetTarget().GetName(), req.GetResourceVersion())
	if err != nil {
		return nil, toGRPC(err)
	}
	b, err := at.json(obj)
	if err != nil {
		return nil, toGRPC(apierrors.NewInternalError(err))
	}
	return &dynamicv1.GetResponse{Object: b}, nil
}

// List returns the list as <Kind>List JSON.
func (x *dynamicService) List(ctx context.Context, req *dynamicv1.ListRequest) (*dynamicv1.ListResponse, error) {
	ctx, at, r, err := x.resolve(ctx, req.GetTarget())
	if err != nil {
		return nil, toGRPC(err)
	}
	items, lm, err := x.s.list(ctx, r, req.GetTarget().GetNamespace(), listOptions{
		LabelSelector: req.GetLabelSelector(), FieldSelector: req.GetFieldSelector(),
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		Limit: req.GetLimit(), Continue: req.GetContinue(), Selectable: at.selectable(),
	})
	if err != nil {
		return nil, toGRPC(err)
	}
	lmJSON, err := kubejson.Marshal(lm)
	if err != nil {
		return nil, toGRPC(apierrors.NewInternalError(err))
	}
	// The list is assembled from each item's JSON, as Kubernetes'
	// unstructured list: apiVersion, items, kind, metadata.
	buf := []byte(`{"apiVersion":`)
	buf = appendJSONString(buf, at.apiVersion)
	buf = append(buf, `,"items":[`...)
	for i, it := range items {
		b, err := at.json(it)
		if err != nil {
			return nil, toGRPC(apierrors.NewInternalError(err))
		}
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, b...)
	}
	buf = append(buf, `],"kind":`...)
	listKind := r.Kind + "List"
	if r.custom != nil {
		listKind = r.custom.listKind
	}
	buf = appendJSONString(buf, listKind)
	buf = append(buf, `,"metadata":`...)
	buf = append(buf, lmJSON...)
	buf = append(buf, '}')
	return &dynamicv1.ListResponse{List: buf}, nil
}

func appendJSONString(b []byte, s string) []byte {
	return fmt.Appendf(b, "%q", s) // names and kinds: no characters %q and JSON quote differently
}

// Watch streams the resource's events.
func (x *dynamicService) Watch(req *dynamicv1.WatchRequest, stream dynamicv1.ResourceService_WatchServer) error {
	_, at, r, err := x.resolve(stream.Context(), req.GetTarget())
	if err != nil {
		return toGRPC(err)
	}
	opts := listOptions{
		LabelSelector: req.GetLabelSelector(), FieldSelector: req.GetFieldSelector(),
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		AllowWatchBookmarks: req.GetAllowWatchBookmarks(), SendInitialEvents: req.SendInitialEvents,
		TimeoutSeconds: req.GetTimeoutSeconds(), Selectable: at.selectable(),
	}
	err = x.s.watch(stream.Context(), r, req.GetTarget().GetNamespace(), opts, func(typ string, obj proto.Message) proto.Message {
		ev := &dynamicv1.WatchResponse{Type: typ}
		if obj != nil {
			// An object that does not render is sent without its body
			// rather than ending every watcher's stream.
			ev.Object, _ = at.json(obj)
		}
		return ev
	}, stream.SendMsg)
	return toGRPC(err)
}

// Create creates the object.
func (x *dynamicService) Create(ctx context.Context, req *dynamicv1.CreateRequest) (*dynamicv1.CreateResponse, error) {
	ctx, at, r, err := x.resolve(ctx, req.GetTarget())
	if err != nil {
		return nil, toGRPC(err)
	}
	if r.custom != nil && r.custom.terminating.Load() {
		// As kube-apiserver's CRD handler, with its message.
		e := apierrors.NewMethodNotSupported(r.Group, r.Resource, "create")
		e.Message = "create not allowed while custom resource definition is terminating"
		return nil, toGRPC(e)
	}
	obj, err := x.decodeBody(ctx, at, req.GetObject(), req.GetOptions())
	if err != nil {
		return nil, toGRPC(err)
	}
	out, err := x.s.create(ctx, r, req.GetTarget().GetNamespace(), obj, writeOpts(req.GetOptions()))
	if err != nil {
		return nil, toGRPC(err)
	}
	b, err := at.json(out)
	if err != nil {
		return nil, toGRPC(apierrors.NewInternalError(err))
	}
	return &dynamicv1.CreateResponse{Object: b}, nil
}

// Update replaces the object.
func (x *dynamicService) Update(ctx context.Context, req *dynamicv1.UpdateRequest) (*dynamicv1.UpdateResponse, error) {
	ctx, at, r, err := x.resolve(ctx, req.GetTarget())
	if err != nil {
		return nil, toGRPC(err)
	}
	obj, err := x.decodeBody(ctx, at, req.GetObject(), req.GetOptions())
	if err != nil {
		return nil, toGRPC(err)
	}
	t := req.GetTarget()
	out, err := x.s.update(ctx, r, t.GetNamespace(), t.GetName(), obj, writeOpts(req.GetOptions()))
	if err != nil {
		return nil, toGRPC(err)
	}
	b, err := at.json(out)
	if err != nil {
		return nil, toGRPC(apierrors.NewInternalError(err))
	}
	return &dynamicv1.UpdateResponse{Object: b}, nil
}

// UpdateStatus writes the status subresource; NotFound when the CRD has
// none, as kube-apiserver answers.
func (x *dynamicService) UpdateStatus(ctx context.Context, req *dynamicv1.UpdateStatusRequest) (*dynamicv1.UpdateStatusResponse, error) {
	ctx, at, r, err := x.resolve(ctx, req.GetTarget())
	if err != nil {
		return nil, toGRPC(err)
	}
	t := req.GetTarget()
	if !at.hasStatus() {
		return nil, toGRPC(apierrors.NewNotFound(r.Group, r.Resource, t.GetName()))
	}
	obj, err := x.decodeBody(ctx, at, req.GetObject(), req.GetOptions())
	if err != nil {
		return nil, toGRPC(err)
	}
	out, err := x.s.updateStatus(ctx, r, t.GetNamespace(), t.GetName(), obj, writeOpts(req.GetOptions()))
	if err != nil {
		return nil, toGRPC(err)
	}
	b, err := at.json(out)
	if err != nil {
		return nil, toGRPC(apierrors.NewInternalError(err))
	}
	return &dynamicv1.UpdateStatusResponse{Object: b}, nil
}

// Delete deletes the object.
func (x *dynamicService) Delete(ctx context.Context, req *dynamicv1.DeleteRequest) (*dynamicv1.DeleteResponse, error) {
	ctx, at, r, err := x.resolve(ctx, req.GetTarget())
	if err != nil {
		return nil, toGRPC(err)
	}
	t := req.GetTarget()
	out, err := x.s.delete(ctx, r, t.GetNamespace(), t.GetName(), deleteOptions{
		GracePeriodSeconds: req.GracePeriodSeconds, PropagationPolicy: req.GetPropagationPolicy(),
		Preconditions: req.GetPreconditions(), DryRun: req.GetDryRun(),
	})
	if err != nil {
		return nil, toGRPC(err)
	}
	b, err := at.json(out)
	if err != nil {
		return nil, toGRPC(apierrors.NewInternalError(err))
	}
	return &dynamicv1.DeleteResponse{Object: b}, nil
}

// GetScale reads the scale subresource.
func (x *dynamicService) GetScale(ctx context.Context, req *dynamicv1.GetScaleRequest) (*dynamicv1.GetScaleResponse, error) {
	ctx, at, r, err := x.resolve(ctx, req.GetTarget())
	if err != nil {
		return nil, toGRPC(err)
	}
	t := req.GetTarget()
	if !at.hasScale() {
		return nil, toGRPC(apierrors.NewNotFound(r.Group, r.Resource, t.GetName()))
	}
	sc, err := x.s.getScale(ctx, r, t.GetNamespace(), t.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &dynamicv1.GetScaleResponse{Scale: sc}, nil
}

// UpdateScale writes the scale subresource.
func (x *dynamicService) UpdateScale(ctx context.Context, req *dynamicv1.UpdateScaleRequest) (*dynamicv1.UpdateScaleResponse, error) {
	ctx, at, r, err := x.resolve(ctx, req.GetTarget())
	if err != nil {
		return nil, toGRPC(err)
	}
	t := req.GetTarget()
	if !at.hasScale() {
		return nil, toGRPC(apierrors.NewNotFound(r.Group, r.Resource, t.GetName()))
	}
	sc, err := x.s.updateScale(ctx, r, t.GetNamespace(), t.GetName(), req.GetScale(), writeOpts(req.GetOptions()))
	if err != nil {
		return nil, toGRPC(err)
	}
	return &dynamicv1.UpdateScaleResponse{Scale: sc}, nil
}
