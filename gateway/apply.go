// This file holds server-side apply and the managedFields of every write:
// Kubernetes' own field managers per kind and subresource, the fields a
// subresource may not change, and the carrying of a field manager's result
// back onto the gateway's JSON.

package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	jsonpatch "github.com/evanphx/json-patch/v5"
	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v4/typed"

	"github.com/kplane/kplane/proto/apierrors"
)

// fieldManagers hands out Kubernetes' own field managers
// (k8s.io/apimachinery/pkg/util/managedfields: structured-merge-diff over
// the built-in types' schemas that client-go carries), one per kind and
// subresource ("" or "status").
type fieldManagers struct {
	// scheme holds the Go types of every kind the gateway serves that has
	// one: client-go's and apiextensions' CustomResourceDefinition.
	scheme *runtime.Scheme
	tc     managedfields.TypeConverter
	mu     sync.Mutex
	byGK   map[managerKey]*managedfields.FieldManager
}

type managerKey struct {
	gvk         schema.GroupVersionKind
	subresource string
}

func newFieldManagers() (*fieldManagers, error) {
	s, err := kubeScheme()
	if err != nil {
		return nil, err
	}
	crds, err := crdTypeConverter()
	if err != nil {
		return nil, err
	}
	return &fieldManagers{scheme: s, byGK: map[managerKey]*managedfields.FieldManager{},
		tc: typeConverters{core: applyconfigurations.NewTypeConverter(s), apiextensions: crds}}, nil
}

// kubeScheme returns a scheme of client-go's types and apiextensions.k8s.io/v1.
func kubeScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("gateway: scheme: %w", err)
	}
	if err := kubeapiextv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("gateway: scheme: %w", err)
	}
	return s, nil
}

// typeConverters is the field managers' TypeConverter: client-go's
// schemas for its kinds, apiextensions' for CustomResourceDefinition
// (each library carries the schemas of its own types only).
type typeConverters struct{ core, apiextensions managedfields.TypeConverter }

var _ managedfields.TypeConverter = typeConverters{}

func (t typeConverters) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	if obj.GetObjectKind().GroupVersionKind().Group == kubeapiextv1.GroupName {
		return t.apiextensions.ObjectToTyped(obj, opts...)
	}
	return t.core.ObjectToTyped(obj, opts...)
}

// TypedToObject does not depend on the schema: either converter does.
func (t typeConverters) TypedToObject(v *typed.TypedValue) (runtime.Object, error) {
	return t.core.TypedToObject(v)
}

// get returns the field manager of writes of res's objects through
// subresource; hasStatus says res has a status subresource.
func (f *fieldManagers) get(gvk schema.GroupVersionKind, subresource string, hasStatus bool) (*managedfields.FieldManager, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := managerKey{gvk, subresource}
	if m := f.byGK[key]; m != nil {
		return m, nil
	}
	var reset map[fieldpath.APIVersion]fieldpath.Filter
	if paths := resetFields(gvk.Kind, subresource, hasStatus); len(paths) > 0 {
		reset = map[fieldpath.APIVersion]fieldpath.Filter{
			fieldpath.APIVersion(gvk.GroupVersion().String()): fieldpath.NewExcludeSetFilter(fieldpath.NewSet(paths...)),
		}
	}
	m, err := managedfields.NewDefaultFieldManager(f.tc, hpaConverter{f.scheme}, noDefaults{}, f.scheme, gvk, gvk.GroupVersion(), subresource, reset)
	if err != nil {
		return nil, fmt.Errorf("gateway: field manager for %s: %w", gvk, err)
	}
	f.byGK[key] = m
	return m, nil
}

// resetFields are the fields a write through subresource cannot change
// (Kubernetes' strategies' reset fields), which its manager therefore
// never owns: the status through the main resource of a kind with a status
// subresource; the spec through status (and a Deployment's labels, a Pod's
// deletionTimestamp and ownerReferences).
func resetFields(kind, subresource string, hasStatus bool) []fieldpath.Path {
	switch {
	case subresource == "" && hasStatus:
		return []fieldpath.Path{fieldpath.MakePathOrDie("status")}
	case subresource != "status":
		return nil
	}
	paths := []fieldpath.Path{fieldpath.MakePathOrDie("spec")}
	switch kind {
	case "Deployment":
		paths = append(paths, fieldpath.MakePathOrDie("metadata", "labels"))
	case "Pod":
		paths = append(paths, fieldpath.MakePathOrDie("metadata", "deletionTimestamp"), fieldpath.MakePathOrDie("metadata", "ownerReferences"))
	}
	return paths
}

// noDefaults is the defaulter: the API service applies defaults itself.
type noDefaults struct{}

func (noDefaults) Default(runtime.Object) {}

// serverSideApply serves an apply patch on an object or its status:
// Kubernetes' field manager merges the applied configuration into the live
// object (or an empty one when absent; the status of an absent object is
// NotFound), records the fields the manager owns in metadata.managedFields
// (for the status subresource, apart), and refuses with a 409 Conflict
// Status listing the fields another manager owns unless ?force=true; the
// result is then written with a compare-and-swap update (of the status
// through the status subresource) or a create, retried on Conflict.
func (g *Gateway) serverSideApply(w http.ResponseWriter, r *http.Request, t *target, info *requestInfo, body []byte) error {
	q := r.URL.Query()
	manager := q.Get("fieldManager")
	force := isTrue(q.Get("force"))
	gvk := schema.GroupVersionKind{Group: t.res.Group, Version: t.res.Version, Kind: t.res.Kind}
	fm, err := g.managers.get(gvk, t.sub, t.hasStatus())
	if err != nil {
		return err
	}
	applied := &unstructured.Unstructured{}
	if err := json.Unmarshal(body, &applied.Object); err != nil {
		return badRequest("the applied configuration is not a JSON or YAML object: " + err.Error())
	}
	if applied.GetAPIVersion() == "" || applied.GetKind() == "" {
		return badRequest("the applied configuration must set apiVersion and kind")
	}
	if applied.GroupVersionKind() != gvk {
		return badRequest(fmt.Sprintf("the applied configuration is a %s, the path serves %s", applied.GroupVersionKind(), gvk))
	}
	if n := applied.GetName(); n != "" && n != t.name {
		return badRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", n, t.name))
	}
	applied.SetName(t.name)
	if len(applied.GetManagedFields()) > 0 {
		return badRequest("metadata.managedFields must be nil in an applied configuration")
	}
	// A value of the wrong type fails as the field manager words it, before
	// anything else (kube-apiserver applies before it validates fields).
	if kubeTypeError(body, applied.Object) != nil {
		empty, err := g.managers.scheme.New(gvk)
		if err != nil {
			return err
		}
		empty.GetObjectKind().SetGroupVersionKind(gvk)
		if _, err := fm.Apply(empty, applied, manager, force); err != nil {
			return fromKubeError(err)
		}
	}
	// The applied configuration itself is checked as fieldValidation says;
	// the merged object is Kubernetes' typed form and is written leniently.
	_, warnings, err := decodeObject(body, t.res.Object, info.fieldValidation)
	if err != nil {
		return err
	}
	write := *info
	write.fieldValidation = "Ignore"
	write.warnings = append(write.warnings, warnings...)
	plain := write
	plain.table, plain.warnings = false, nil
	for attempt := 1; ; attempt++ {
		cur := g.loopback(withInfo(r.Context(), &plain), r, http.MethodGet, t.itemPath(""), "", nil)
		live, err := g.managers.scheme.New(gvk)
		if err != nil {
			return err
		}
		exists := cur.code == http.StatusOK
		switch {
		case exists:
			if err := json.Unmarshal(cur.body.Bytes(), live); err != nil {
				return fmt.Errorf("gateway: reading the live %s: %w", gvk.Kind, err)
			}
		case cur.code == http.StatusNotFound && t.sub == "":
			live.GetObjectKind().SetGroupVersionKind(gvk)
		default:
			cur.copyTo(w)
			return nil
		}
		liveTyped, err := json.Marshal(live)
		if err != nil {
			return err
		}
		merged, err := fm.Apply(live, applied, manager, force)
		if err != nil {
			return fromKubeError(err)
		}
		b, err := json.Marshal(merged)
		if err != nil {
			return err
		}
		if exists {
			if b, err = carryChanges(cur.body.Bytes(), liveTyped, b); err != nil {
				return err
			}
		}
		method, path := http.MethodPut, t.itemPath(t.sub)
		if !exists {
			method, path = http.MethodPost, t.collectionPath()
		}
		resp := g.loopback(withInfo(r.Context(), &write), r, method, path, r.URL.RawQuery, b)
		// Conflict: the object changed (or was created) since it was read.
		if resp.code == http.StatusConflict && attempt < maxPatchAttempts {
			continue
		}
		resp.copyTo(w)
		return nil
	}
}

// fromKubeError turns an error of Kubernetes' own libraries (the field
// manager's 409 Conflict listing the contested fields, its 400s) into the
// gateway's Status error; an error without a Status (the field manager's
// "failed to create typed patch object") is a 500 without a reason, as
// kube-apiserver answers it.
func fromKubeError(err error) error {
	var ks kerrors.APIStatus
	if !errors.As(err, &ks) {
		return &apierrors.StatusError{Code: http.StatusInternalServerError, Message: err.Error()}
	}
	st := ks.Status()
	out := &apierrors.StatusError{Reason: apierrors.Reason(st.Reason), Code: st.Code, Message: st.Message}
	if d := st.Details; d != nil {
		out.Name, out.Group, out.Kind = d.Name, d.Group, d.Kind
		for _, c := range d.Causes {
			out.Causes = append(out.Causes, apierrors.Cause{Type: string(c.Type), Message: c.Message, Field: c.Field})
		}
	}
	if out.Code == 0 {
		out.Code = http.StatusInternalServerError
	}
	return out
}

// updateManager is the field manager of a write that is not an apply: the
// fieldManager parameter, else the client's User-Agent up to its first "/"
// (as Kubernetes names it).
func updateManager(r *http.Request) string {
	if m := r.URL.Query().Get("fieldManager"); m != "" {
		return m
	}
	ua, _, _ := strings.Cut(r.UserAgent(), "/")
	if ua == "" {
		return "unknown"
	}
	return ua
}

// recordUpdate checks the patched object as fieldValidation says, then lets
// Kubernetes' field manager record the fields manager changed from live to
// patched (operation Update) in its metadata.managedFields. It returns the
// object to write (Kubernetes' typed form: write it leniently) and the
// decoding warnings. wholeBody says the patched object is the client's
// body (a create or a replace): its decoding errors are then worded as
// kube-apiserver words a body's.
func (g *Gateway) recordUpdate(t *target, info *requestInfo, live, patched []byte, manager string, wholeBody bool) ([]byte, []string, error) {
	_, warnings, err := decodeObject(patched, t.res.Object, info.fieldValidation)
	if err != nil {
		if wholeBody {
			err = cannotBeHandled(t.res.Object.New().Interface(), err)
		}
		return nil, nil, err
	}
	gvk := schema.GroupVersionKind{Group: t.res.Group, Version: t.res.Version, Kind: t.res.Kind}
	fm, err := g.managers.get(gvk, t.sub, t.hasStatus())
	if err != nil {
		return nil, nil, err
	}
	oldObj, err := g.managers.scheme.New(gvk)
	if err != nil {
		return nil, nil, err
	}
	newObj, err := g.managers.scheme.New(gvk)
	if err != nil {
		return nil, nil, err
	}
	if err := json.Unmarshal(live, oldObj); err != nil {
		return nil, nil, fmt.Errorf("gateway: reading the live %s: %w", gvk.Kind, err)
	}
	if err := json.Unmarshal(patched, newObj); err != nil {
		return nil, nil, badRequest("the patched object does not decode: " + err.Error())
	}
	newTyped, err := json.Marshal(newObj)
	if err != nil {
		return nil, nil, err
	}
	merged, err := fm.Update(oldObj, newObj, manager)
	if err != nil {
		return nil, nil, fromKubeError(err)
	}
	b, err := json.Marshal(merged)
	if err != nil {
		return nil, nil, err
	}
	if b, err = carryChanges(patched, newTyped, b); err != nil {
		return nil, nil, err
	}
	return b, warnings, nil
}

// carryChanges applies to base (the gateway's JSON of an object) what the
// field manager changed between before and after (Kubernetes' typed JSON of
// the same object, before and after). Writing the typed JSON itself would
// add the empty structs typed Go writes (resources: {} ...), which the API
// service would see as changes (a Pod's spec is immutable).
func carryChanges(base, before, after []byte) ([]byte, error) {
	p, err := jsonpatch.CreateMergePatch(before, after)
	if err != nil {
		return nil, fmt.Errorf("gateway: diffing the merged object: %w", err)
	}
	out, err := jsonpatch.MergePatch(base, p)
	if err != nil {
		return nil, fmt.Errorf("gateway: applying the merged object: %w", err)
	}
	return out, nil
}
