// This file holds field management for custom resources: server-side
// apply (PATCH application/apply-patch+yaml) of a custom object or its
// status, and the record of every other write's manager in
// metadata.managedFields, with Kubernetes' field manager over a type
// built from the CRD's schemas as kube-apiserver builds it.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"

	"github.com/kplane/kplane/proto/apierrors"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

// maxCustomManagers bounds the field managers kept: past it, the cache
// starts again (a CRD's managers are rebuilt on its next write).
const maxCustomManagers = 256

// customManagers are the field managers of custom resources, one per CRD
// revision, served version and subresource.
type customManagers struct {
	static map[string]*spec.Schema // the meta types CR schemas refer to

	mu    sync.Mutex
	byKey map[customManagerKey]*managedfields.FieldManager
}

type customManagerKey struct {
	crd, crdRV, version, sub string
}

func newCustomManagers() *customManagers {
	return &customManagers{static: apiextensionsModels(), byKey: map[customManagerKey]*managedfields.FieldManager{}}
}

// get returns the field manager of cr's writes through sub, building it
// from the CRD (asked of the API service) when the CRD changed.
func (g *Gateway) customManager(ctx context.Context, cr *dynamicv1.ServedResource, sub string) (*managedfields.FieldManager, error) {
	m := g.crManagers
	key := customManagerKey{cr.GetCrdName(), cr.GetCrdResourceVersion(), cr.GetVersion(), sub}
	m.mu.Lock()
	fm := m.byKey[key]
	m.mu.Unlock()
	if fm != nil {
		return fm, nil
	}
	raw := cr.GetCrd()
	if len(raw) == 0 {
		resp, err := g.dyn.Discover(ctx, &dynamicv1.DiscoverRequest{WithCrds: true})
		if err != nil {
			return nil, err
		}
		for _, r := range resp.GetResources() {
			if r.GetCrdName() == cr.GetCrdName() && r.GetVersion() == cr.GetVersion() {
				raw = r.GetCrd()
				break
			}
		}
	}
	crd := &kubeapiextv1.CustomResourceDefinition{}
	if err := json.Unmarshal(raw, crd); err != nil || len(raw) == 0 {
		return nil, fmt.Errorf("gateway: the CRD of %s.%s: %v", cr.GetResource(), cr.GetGroup(), err)
	}
	fm, err := m.build(crd, cr, sub)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if len(m.byKey) >= maxCustomManagers {
		clear(m.byKey)
	}
	m.byKey[key] = fm
	m.mu.Unlock()
	return fm, nil
}

// build makes the field manager kube-apiserver makes for a CRD's version:
// a type from every version's structural schema merged with the meta
// types; a structural schema that does not build leaves the type deduced
// from the objects, as kube-apiserver does.
func (m *customManagers) build(crd *kubeapiextv1.CustomResourceDefinition, cr *dynamicv1.ServedResource, sub string) (*managedfields.FieldManager, error) {
	specs := []*spec3.OpenAPI{{Version: "3.0.0", Components: &spec3.Components{Schemas: m.static}}}
	var buildErr error
	for _, v := range crd.Spec.Versions {
		s, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{})
		if err != nil {
			buildErr = err
			break
		}
		specs = append(specs, s)
	}
	tc := managedfields.NewDeducedTypeConverter()
	if buildErr == nil {
		merged, err := builder.MergeSpecsV3(specs...)
		if err == nil {
			if tc, err = managedfields.NewTypeConverter(merged.Components.Schemas, crd.Spec.PreserveUnknownFields); err != nil {
				return nil, fmt.Errorf("gateway: the schema of %s: %w", crd.Name, err)
			}
		}
	}
	gvk := schema.GroupVersionKind{Group: cr.GetGroup(), Version: cr.GetVersion(), Kind: cr.GetKind()}
	// Kubernetes' custom resource strategies' reset fields: the status
	// through the main resource (with a status subresource), the spec
	// through status.
	reset := map[fieldpath.APIVersion]fieldpath.Filter{}
	switch {
	case sub == "" && cr.GetStatus():
		reset[fieldpath.APIVersion(gvk.GroupVersion().String())] = fieldpath.NewExcludeSetFilter(fieldpath.NewSet(fieldpath.MakePathOrDie("status")))
	case sub == "status":
		reset[fieldpath.APIVersion(gvk.GroupVersion().String())] = fieldpath.NewExcludeSetFilter(fieldpath.NewSet(fieldpath.MakePathOrDie("spec")))
	}
	fm, err := managedfields.NewDefaultCRDFieldManager(tc, unstructuredConverter{}, noDefaults{}, unstructuredCreater{}, gvk, gvk.GroupVersion(), sub, reset)
	if err != nil {
		return nil, fmt.Errorf("gateway: field manager of %s: %w", gvk, err)
	}
	return fm, nil
}

// unstructuredCreater makes the empty custom objects the field manager
// starts from.
type unstructuredCreater struct{}

func (unstructuredCreater) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kind)
	return u, nil
}

// unstructuredConverter converts a custom object between the served
// versions of a CRD whose conversion is None, as kube-apiserver's: the
// object with its apiVersion rewritten (a CRD with webhook conversion is
// served at its storage version only).
type unstructuredConverter struct{}

func (unstructuredConverter) Convert(in, out, _ any) error {
	src, ok1 := in.(*unstructured.Unstructured)
	dst, ok2 := out.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return fmt.Errorf("gateway: cannot convert %T to %T", in, out)
	}
	src.DeepCopyInto(dst)
	return nil
}

func (unstructuredConverter) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("gateway: cannot convert %T", in)
	}
	out := u.DeepCopy()
	if target, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()}); ok {
		out.SetGroupVersionKind(target)
	}
	return out, nil
}

func (unstructuredConverter) ConvertFieldLabel(schema.GroupVersionKind, string, string) (string, string, error) {
	return "", "", errors.New("gateway: field labels of custom resources are not converted")
}

// applyCustom serves server-side apply of a custom object or its status:
// the field manager merges the applied configuration into the live object
// (an empty one when absent: the apply creates it; the status of an absent
// object is NotFound), records the fields manager owns, and refuses with
// 409 Conflict the fields another manager owns unless force; the result
// is written with the live resourceVersion (or created), again on
// Conflict.
func (g *Gateway) applyCustom(ctx context.Context, r *http.Request, cr *dynamicv1.ServedResource, tgt *dynamicv1.Target, sub string, body []byte, wo *dynamicv1.WriteOptions, hdr *metadata.MD) ([]byte, int, error) {
	q := r.URL.Query()
	manager, force := q.Get("fieldManager"), isTrue(q.Get("force"))
	if manager == "" {
		return nil, 0, badRequest("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
	}
	fm, err := g.customManager(ctx, cr, sub)
	if err != nil {
		return nil, 0, err
	}
	gvk := schema.GroupVersionKind{Group: cr.GetGroup(), Version: cr.GetVersion(), Kind: cr.GetKind()}
	applied := &unstructured.Unstructured{}
	if err := json.Unmarshal(body, &applied.Object); err != nil || applied.Object == nil {
		return nil, 0, badRequest(fmt.Sprintf("the applied configuration is not a JSON or YAML object: %v", err))
	}
	if applied.GetAPIVersion() == "" || applied.GetKind() == "" {
		return nil, 0, badRequest("the applied configuration must set apiVersion and kind")
	}
	if applied.GroupVersionKind() != gvk {
		return nil, 0, badRequest(fmt.Sprintf("the applied configuration is a %s, the path serves %s", applied.GroupVersionKind(), gvk))
	}
	if n := applied.GetName(); n != "" && n != tgt.GetName() {
		return nil, 0, badRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", n, tgt.GetName()))
	}
	if ns := applied.GetNamespace(); ns != "" && ns != tgt.GetNamespace() {
		return nil, 0, badRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if len(applied.GetManagedFields()) > 0 {
		return nil, 0, badRequest("metadata.managedFields must be nil in an applied configuration")
	}
	applied.SetName(tgt.GetName())
	if tgt.GetNamespace() != "" {
		applied.SetNamespace(tgt.GetNamespace())
	}
	var opts []grpc.CallOption
	if hdr != nil {
		opts = append(opts, grpc.Header(hdr))
	}
	for attempt := 1; ; attempt++ {
		live := &unstructured.Unstructured{}
		cur, err := g.dyn.Get(ctx, &dynamicv1.GetRequest{Target: tgt})
		exists := err == nil
		switch {
		case exists:
			if err := json.Unmarshal(cur.GetObject(), &live.Object); err != nil {
				return nil, 0, fmt.Errorf("gateway: reading the live %s: %w", gvk.Kind, err)
			}
		case apierrors.IsNotFound(err) && sub == "":
			live.SetGroupVersionKind(gvk)
		default:
			return nil, 0, err
		}
		merged, err := fm.Apply(live, applied, manager, force)
		if err != nil {
			return nil, 0, fromKubeError(err)
		}
		b, err := json.Marshal(merged)
		if err != nil {
			return nil, 0, err
		}
		if exists {
			out, err := g.putCustom(ctx, tgt, sub, b, wo, hdr)
			if apierrors.ReasonOf(err) == apierrors.ReasonConflict && attempt < maxPatchAttempts {
				continue
			}
			return out, http.StatusOK, err
		}
		resp, err := g.dyn.Create(ctx, &dynamicv1.CreateRequest{Target: tgt, Object: b, Options: wo}, opts...)
		if apierrors.ReasonOf(err) == apierrors.ReasonAlreadyExists && attempt < maxPatchAttempts {
			continue
		}
		return resp.GetObject(), http.StatusCreated, err
	}
}

// recordCustomUpdate records manager's write of obj (a create when live is
// nil) in its metadata.managedFields (operation Update), as
// kube-apiserver does for every write of a custom object. A body the
// field manager cannot type (an undeclared field the API service will
// prune, a value of the wrong type) is written as sent: kube-apiserver
// prunes before it records, so such a write's manager is not recorded
// here.
func (g *Gateway) recordCustomUpdate(ctx context.Context, cr *dynamicv1.ServedResource, sub string, live, obj []byte, manager string) []byte {
	fm, err := g.customManager(ctx, cr, sub)
	if err != nil {
		g.log.WarnContext(ctx, "managedFields not recorded", "resource", cr.GetResource()+"."+cr.GetGroup(), "err", err)
		return obj
	}
	newObj := &unstructured.Unstructured{}
	if err := json.Unmarshal(obj, &newObj.Object); err != nil || newObj.Object == nil {
		return obj // the API service words the refusal
	}
	oldObj := &unstructured.Unstructured{}
	if live != nil {
		if err := json.Unmarshal(live, &oldObj.Object); err != nil {
			return obj
		}
	} else {
		oldObj.SetGroupVersionKind(schema.GroupVersionKind{Group: cr.GetGroup(), Version: cr.GetVersion(), Kind: cr.GetKind()})
	}
	merged, err := fm.Update(oldObj, newObj, manager)
	if err != nil {
		// A field the schema does not declare (the API service prunes it,
		// with a warning) or a value of the wrong type: written as sent.
		return obj
	}
	b, err := json.Marshal(merged)
	if err != nil {
		return obj
	}
	return b
}
