// This file holds what a custom resource request does by the version it was
// made at: Kubernetes serves each version of a CRD with that version's
// schema and subresources, so validation, the status subresource and the
// scale subresource's paths follow the request's version, not the storage
// version's, while the object is stored at the storage version.
package apiserver

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

// crVersionKey is the context key under which the resource service puts
// the schema of the version a custom resource request was made at.
type crVersionKey struct{}

// withCRVersion returns ctx carrying sch, the schema of the version the
// request names.
func withCRVersion(ctx context.Context, sch *crSchema) context.Context {
	if sch == nil {
		return ctx
	}
	return context.WithValue(ctx, crVersionKey{}, sch)
}

// requestSchema is the schema of the version r's request was made at: the
// one the resource service put in ctx when it is one of r's current
// versions, otherwise r's storage version's (a request made by the service
// itself, or one that raced a CRD update). Nil when r's CRD has no schema
// (yet).
func requestSchema(ctx context.Context, r *resourceInfo) *crSchema {
	st := r.custom.schema.Load()
	if st == nil {
		return nil
	}
	if sch, ok := ctx.Value(crVersionKey{}).(*crSchema); ok && st.served[sch.version] == sch {
		return sch
	}
	return st
}

// statusServedAt reports whether the status subresource is served at the
// version of r's request.
func statusServedAt(ctx context.Context, r *resourceInfo) bool {
	if r.custom == nil {
		return r.HasStatus
	}
	if sch := requestSchema(ctx, r); sch != nil {
		return sch.status
	}
	return r.HasStatus
}

// writeStatusAtVersion finishes prepareForUpdate for a custom object
// written at a version without the status subresource while another of
// its CRD's versions has one (so the object keeps its status apart): as
// Kubernetes' custom resource strategy for that version, the request's
// status is written like any other field, and a change of it bumps
// generation. req is the request's object, n the object to store.
func writeStatusAtVersion(ctx context.Context, r *resourceInfo, n, req, old proto.Message) {
	o, ok := n.(*dynamicv1.Object)
	if !ok || !r.HasStatus || statusServedAt(ctx, r) {
		return
	}
	o.Status = nil
	if st := req.(*dynamicv1.Object).GetStatus(); st != nil {
		o.Status = proto.Clone(st).(*dynamicv1.JSON)
	}
	om, m := meta(old), meta(n)
	if m.GetGeneration() != 0 && m.GetGeneration() == om.GetGeneration() && !proto.Equal(o.GetStatus(), old.(*dynamicv1.Object).GetStatus()) {
		m.Generation++
	}
}

// atRequestVersion returns u (a custom object's document at r's storage
// version) at the version of the request, converted by the CRD's webhook
// when it has one (strategy None: the same document), and a function
// taking a document at the request version back to the storage version.
func atRequestVersion(ctx context.Context, r *resourceInfo, u map[string]any) (map[string]any, func(map[string]any) (map[string]any, error), error) {
	sch := requestSchema(ctx, r)
	same := func(v map[string]any) (map[string]any, error) { return v, nil }
	if sch == nil || sch.conv == nil || sch.version == r.Version || u == nil {
		return u, same, nil
	}
	back := func(v map[string]any) (map[string]any, error) {
		out, err := convertCustom(sch.conv, v, r.APIVersion())
		if err != nil {
			return nil, fmt.Errorf("converting to %s: %w", r.APIVersion(), err)
		}
		return out, nil
	}
	out, err := convertCustom(sch.conv, u, r.Group+"/"+sch.version)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(fmt.Errorf("converting to %s/%s: %w", r.Group, sch.version, err))
	}
	return out, back, nil
}
