// This file holds PATCH: JSON, merge and strategic merge patches applied to
// the live object (retried on Conflict), apply patches handed to server-side
// apply, and the refusals kube-apiserver gives a bad patch.

package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	sigsjson "sigs.k8s.io/json"

	"github.com/kplane/kplane/proto/apierrors"
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

// patch serves PATCH on an object, its status or its scale. No generated
// handler can: a patch is a read, the patch applied to the JSON, and a
// compare-and-swap update. Both calls go through the grpc-gateway mux (GET
// and PUT of the same paths, in-process), so decoding, identity and errors
// are the generated handlers' own; the update carries the resourceVersion
// read and is retried on Conflict unless the patch itself pins one.
//
// apply-patch (server-side apply) on an object or its status is
// apply.go's; on scale the applied configuration is merged into the live
// object with strategic-merge semantics, without field ownership. A
// status patch of a kind without a status subresource is NotFound, as in
// Kubernetes.
func (g *Gateway) patch(w http.ResponseWriter, r *http.Request, t *target, info *requestInfo) {
	if err := g.doPatch(w, r, t, info); err != nil {
		writeError(w, err)
	}
}

func (g *Gateway) doPatch(w http.ResponseWriter, r *http.Request, t *target, info *requestInfo) error {
	if err := checkMediaType(http.MethodPatch, r.Header.Get("Content-Type"), 0); err != nil {
		return err
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var body []byte
	if rb, ok := r.Body.(*requestBody); ok {
		body = rb.data
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("the patch is empty")
	}
	q := r.URL.Query()
	if ct == applyPatchType && q.Get("fieldManager") == "" {
		return badRequest("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
	}
	if t.sub == "status" && !t.hasStatus() {
		return notFound()
	}
	if ct == applyPatchType && (t.sub == "" || t.sub == "status") {
		return g.serverSideApply(w, r, t, info, body)
	}
	getPath, putPath := t.itemPath(""), t.itemPath("")
	gvk := schema.GroupVersionKind{Group: t.res.Group, Version: t.res.Version, Kind: t.res.Kind}
	switch t.sub {
	case "":
	case "status":
		putPath = t.itemPath("status")
	case "approval":
		if t.res.Methods["updateApproval"] == nil {
			return notFound()
		}
		putPath = t.itemPath("approval")
	case "ephemeralcontainers":
		if t.res.Methods["updateEphemeralContainers"] == nil {
			return notFound()
		}
		putPath = t.itemPath("ephemeralcontainers")
	case "scale":
		getPath, putPath = t.itemPath("scale"), t.itemPath("scale")
		gvk = schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
	default:
		return notFound()
	}
	pinsRV := strings.Contains(string(body), `"resourceVersion"`)
	// The read is plain JSON whatever the client asked for.
	plain := *info
	plain.table, plain.warnings = false, nil
	for attempt := 1; ; attempt++ {
		cur := g.loopback(withInfo(r.Context(), &plain), r, http.MethodGet, getPath, "", nil)
		if cur.code != http.StatusOK {
			cur.copyTo(w)
			return nil
		}
		patched, err := applyPatch(g.managers.scheme, ct, cur.body.Bytes(), body, gvk)
		if err != nil {
			return err
		}
		if err := patchTypeError(g.managers.scheme, ct, body, patched, gvk); err != nil {
			return err
		}
		if patched, err = keepResourceVersion(patched, cur.body.Bytes()); err != nil {
			return err
		}
		if err := uidUnchanged(patched, cur.body.Bytes(), t.res.Group, gvk.Kind, t.name); err != nil {
			return err
		}
		ctx := r.Context()
		if t.sub == "" || t.sub == "status" {
			// Record the patch's manager in metadata.managedFields
			// (operation Update), as Kubernetes does for every write.
			managed, warnings, err := g.recordUpdate(t, info, cur.body.Bytes(), patched, updateManager(r), false)
			if err != nil {
				return err
			}
			write := *info
			write.fieldValidation = "Ignore"
			write.warnings = append(write.warnings, warnings...)
			ctx, patched = withInfo(ctx, &write), managed
		}
		resp := g.loopback(ctx, r, http.MethodPut, putPath, r.URL.RawQuery, patched)
		if resp.code == http.StatusConflict && !pinsRV && attempt < maxPatchAttempts {
			continue
		}
		resp.copyTo(w)
		return nil
	}
}

// patchTypeError refuses a patched object holding a value of the wrong
// type (a string for an integer, ...) as kube-apiserver does: 422 Invalid
// on the field "patch", whose value is the patched object (JSON and merge
// patches: Kubernetes' decoder's error) or the patch itself (strategic
// merge patches: the unstructured converter's error). nil when the
// object's Kubernetes Go type takes it or client-go does not know gvk.
func patchTypeError(kinds *runtime.Scheme, ct string, patch, patched []byte, gvk schema.GroupVersionKind) error {
	typed, err := kinds.New(gvk)
	if err != nil {
		return nil
	}
	if ct != strategicPatchType {
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(patched, typed); err != nil {
			return invalidPatch(string(patched), err)
		}
		return nil
	}
	var m map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(patched, &m); err != nil {
		return nil // not an object: the update reports it
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, typed); err != nil {
		var pm map[string]any
		_ = sigsjson.UnmarshalCaseSensitivePreserveInts(patch, &pm)
		return invalidPatch(fmt.Sprintf("%+v", pm), err)
	}
	return nil
}

func invalidPatch(value string, err error) error {
	return apierrors.NewInvalid("", "", "", []apierrors.Cause{{Type: "FieldValueInvalid", Field: "patch",
		Message: fmt.Sprintf("Invalid value: %q: %s", value, err)}})
}

// uidUnchanged refuses a patch that changes metadata.uid as kube-apiserver
// does: 422, the field is immutable. (A PUT naming another uid is instead a
// failed precondition, 409, which the API service answers; a patch that
// removes the uid keeps the stored one.)
func uidUnchanged(patched, cur []byte, group, kind, name string) error {
	var p, c map[string]any
	if json.Unmarshal(patched, &p) != nil || json.Unmarshal(cur, &c) != nil {
		return nil
	}
	want, have := str(p, "metadata", "uid"), str(c, "metadata", "uid")
	if want == "" || want == have {
		return nil
	}
	return apierrors.NewInvalid(group, kind, name, []apierrors.Cause{{Type: "FieldValueInvalid", Field: "metadata.uid",
		Message: fmt.Sprintf("Invalid value: %q: field is immutable", want)}})
}

// keepResourceVersion sets the read object's resourceVersion on a patched
// object that has none, so that the update is a compare-and-swap.
func keepResourceVersion(patched, cur []byte) ([]byte, error) {
	var p, c map[string]any
	if err := json.Unmarshal(patched, &p); err != nil {
		return nil, badRequest("the patched object is not valid JSON: " + err.Error())
	}
	if json.Unmarshal(cur, &c) != nil {
		return patched, nil
	}
	pm, _ := p["metadata"].(map[string]any)
	if pm == nil {
		pm = map[string]any{}
		p["metadata"] = pm
	}
	if rv, _ := pm["resourceVersion"].(string); rv != "" {
		return patched, nil
	}
	pm["resourceVersion"] = str(c, "metadata", "resourceVersion")
	return json.Marshal(p)
}

// applyPatch applies a patch of content type ct to the JSON document cur.
func applyPatch(kinds *runtime.Scheme, ct string, cur, patch []byte, gvk schema.GroupVersionKind) ([]byte, error) {
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
		typed, err := kinds.New(gvk)
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
