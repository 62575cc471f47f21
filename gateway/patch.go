package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/apierrors"
)

// Patch content types.
const (
	jsonPatchType      = "application/json-patch+json"
	mergePatchType     = "application/merge-patch+json"
	strategicPatchType = "application/strategic-merge-patch+json"
	applyPatchType     = "application/apply-patch+yaml"
)

// maxPatchAttempts bounds the get → patch → update loop on Conflict.
const maxPatchAttempts = 5

// patch serves PATCH on an object, its status or its scale: get, apply the
// patch to the JSON, update with the read resourceVersion (compare-and-swap),
// retrying on Conflict unless the patch itself pins a resourceVersion.
//
// apply-patch (server-side apply) is a subset: the applied configuration is
// merged into the live object with strategic-merge semantics and the object
// is created when absent; field ownership (managedFields) and conflict
// detection between managers are NOT implemented.
func (g *Gateway) patch(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target) error {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case jsonPatchType, mergePatchType, strategicPatchType, applyPatchType:
	default:
		return &apierrors.StatusError{Reason: "UnsupportedMediaType", Code: http.StatusUnsupportedMediaType,
			Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s, %s",
				jsonPatchType, mergePatchType, strategicPatchType, applyPatchType)}
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return badRequest("the patch is empty")
	}
	q := r.URL.Query()
	if ct == applyPatchType && q.Get("fieldManager") == "" {
		return badRequest("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
	}
	getVerb, updateVerb := "get", "update"
	switch t.sub {
	case "status":
		updateVerb = "updateStatus"
	case "scale":
		getVerb, updateVerb = "getScale", "updateScale"
	}
	objType := t.res.Object
	gvk := schema.GroupVersionKind{Group: t.res.Group, Version: t.res.Version, Kind: t.res.Kind}
	if t.sub == "scale" {
		md := t.res.method("updateScale")
		if md == nil {
			return notFound()
		}
		objType, err = protoregistry.GlobalTypes.FindMessageByName(scaleMessage(md))
		if err != nil {
			return err
		}
		gvk = schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
	}
	pinsRV := strings.Contains(string(body), `"resourceVersion"`)
	validation := q.Get("fieldValidation")
	for attempt := 1; ; attempt++ {
		resp, err := g.call(ctx, t, getVerb, nil)
		if apierrors.IsNotFound(err) && ct == applyPatchType && t.sub == "" {
			return g.applyCreate(ctx, w, r, t, body)
		}
		if err != nil {
			return err
		}
		cur := onlyMessage(resp)
		if cur == nil {
			return apierrors.NewNotFound(t.res.Group, t.res.Resource, t.name)
		}
		curJSON, err := kubejson.Marshal(cur)
		if err != nil {
			return err
		}
		patched, err := applyPatch(ct, curJSON, body, gvk)
		if err != nil {
			return err
		}
		obj, warnings, err := decodeObject(patched, objType, validation)
		if err != nil {
			return err
		}
		if err := checkNames(t, obj); err != nil {
			return err
		}
		if om := objectMeta(obj); om.ResourceVersion == "" {
			om.ResourceVersion = objectMeta(cur).ResourceVersion
		}
		resp, err = g.call(ctx, t, updateVerb, func(req proto.Message) error {
			setMessage(req, obj)
			return setQuery(req, q)
		})
		if apierrors.IsConflict(err) && !pinsRV && attempt < maxPatchAttempts {
			continue
		}
		if err != nil {
			return err
		}
		addWarnings(w, warnings)
		if t.sub == "scale" {
			return writeMessage(w, http.StatusOK, onlyMessage(resp))
		}
		return g.respondObject(w, r, t.res, http.StatusOK, onlyMessage(resp))
	}
}

// applyCreate creates the object a server-side apply names.
func (g *Gateway) applyCreate(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target, body []byte) error {
	if err := checkKind(t.res, body); err != nil {
		return err
	}
	obj, warnings, err := decodeObject(body, t.res.Object, r.URL.Query().Get("fieldValidation"))
	if err != nil {
		return err
	}
	if err := checkNames(t, obj); err != nil {
		return err
	}
	ct := &target{res: t.res, namespace: t.namespace}
	resp, err := g.call(ctx, ct, "create", func(req proto.Message) error {
		setMessage(req, obj)
		return setQuery(req, r.URL.Query())
	})
	if err != nil {
		return err
	}
	addWarnings(w, warnings)
	return g.respondObject(w, r, t.res, http.StatusCreated, onlyMessage(resp))
}

// applyPatch applies a patch of content type ct to the JSON document cur.
func applyPatch(ct string, cur, patch []byte, gvk schema.GroupVersionKind) ([]byte, error) {
	switch ct {
	case jsonPatchType:
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, badRequest("invalid JSON patch: " + err.Error())
		}
		out, err := p.Apply(cur)
		if err != nil {
			return nil, &apierrors.StatusError{Reason: apierrors.ReasonInvalid, Code: http.StatusUnprocessableEntity,
				Message: "the JSON patch could not be applied: " + err.Error()}
		}
		return out, nil
	case mergePatchType:
		if err := wantObject(patch); err != nil {
			return nil, err
		}
		out, err := jsonpatch.MergePatch(cur, patch)
		if err != nil {
			return nil, badRequest("invalid merge patch: " + err.Error())
		}
		return out, nil
	default: // strategic merge, and apply as strategic merge
		if err := wantObject(patch); err != nil {
			return nil, err
		}
		if ct == applyPatchType {
			patch = stripManagedFields(patch)
		}
		typed, err := scheme.Scheme.New(gvk)
		if err != nil {
			// Not a Kubernetes built-in: merge patch semantics.
			out, err := jsonpatch.MergePatch(cur, patch)
			if err != nil {
				return nil, badRequest("invalid merge patch: " + err.Error())
			}
			return out, nil
		}
		out, err := strategicpatch.StrategicMergePatch(cur, patch, typed)
		if err != nil {
			return nil, badRequest("invalid strategic merge patch: " + err.Error())
		}
		return out, nil
	}
}

func wantObject(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return badRequest("the patch is not valid JSON: " + err.Error())
	}
	if _, ok := v.(map[string]any); !ok {
		return badRequest("the patch must be a JSON object")
	}
	return nil
}

// stripManagedFields drops metadata.managedFields and resourceVersion from
// an applied configuration.
func stripManagedFields(b []byte) []byte {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return b
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	out, err := json.Marshal(m)
	if err != nil {
		return b
	}
	return out
}
