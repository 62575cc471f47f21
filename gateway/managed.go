// This file holds the writes that record managedFields without being an
// apply: a create's field manager, and PUT, which reads the live object and
// lets the field manager compare.

package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// managesFields says whether writes of t's objects record
// metadata.managedFields: stored kinds (not the create-only reviews) that
// Kubernetes' field manager knows, through the object itself or its status
// subresource.
func (g *Gateway) managesFields(t *target) bool {
	gvk := schema.GroupVersionKind{Group: t.res.Group, Version: t.res.Version, Kind: t.res.Kind}
	return (t.sub == "" || (t.sub == "status" && t.hasStatus())) && t.res.Methods["get"] != nil && g.managers.scheme.Recognizes(gvk)
}

// recordCreate records the request's field manager (operation Update, as
// Kubernetes does on a create) in the metadata.managedFields of a POST's
// body, which the generated create handler then sends on. The body is
// checked as fieldValidation says first; the rewritten body is Kubernetes'
// typed form, so it is decoded leniently (the warnings are kept).
func (g *Gateway) recordCreate(r *http.Request, t *target, info *requestInfo) error {
	rb, ok := r.Body.(*requestBody)
	if !ok || len(bytes.TrimSpace(rb.data)) == 0 {
		return nil // the create handler reports the missing body
	}
	if err := g.checkBodyKind(t, rb.data); err != nil {
		return err
	}
	empty, err := json.Marshal(map[string]string{"apiVersion": t.res.GroupVersion(), "kind": t.res.Kind})
	if err != nil {
		return err
	}
	managed, warnings, err := g.recordUpdate(t, info, empty, rb.data, updateManager(r), true)
	if err != nil {
		return err
	}
	info.fieldValidation = "Ignore"
	info.warnings = append(info.warnings, warnings...)
	r.Body = &requestBody{Reader: bytes.NewReader(managed), data: managed, info: info}
	r.ContentLength = int64(len(managed))
	return nil
}

// replace serves a PUT of an object: it reads the live object, lets
// Kubernetes' field manager record the request's manager (operation
// Update) for the fields the new object changes, and writes the result with
// the client's resourceVersion (a compare-and-swap). A PUT without a
// resourceVersion is pinned to the one read and retried on Conflict, so that
// the recorded owners match the object replaced.
func (g *Gateway) replace(w http.ResponseWriter, r *http.Request, t *target, info *requestInfo) error {
	var body []byte
	if rb, ok := r.Body.(*requestBody); ok {
		body = rb.data
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("the request body is empty")
	}
	if err := g.checkBodyKind(t, body); err != nil {
		return err
	}
	var named struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &named); err != nil {
		return badRequest("the request body is not valid JSON: " + err.Error())
	}
	pinsRV := named.Metadata.ResourceVersion != ""
	plain := *info
	plain.table, plain.warnings = false, nil
	for attempt := 1; ; attempt++ {
		cur := g.loopback(withInfo(r.Context(), &plain), r, http.MethodGet, t.itemPath(""), "", nil)
		if cur.code != http.StatusOK {
			// NotFound and the rest: the update answers as the API service does.
			g.rest.ServeHTTP(w, r)
			return nil
		}
		obj, err := keepResourceVersion(body, cur.body.Bytes())
		if err != nil {
			return err
		}
		managed, warnings, err := g.recordUpdate(t, info, cur.body.Bytes(), obj, updateManager(r), true)
		if err != nil {
			return err
		}
		write := *info
		write.fieldValidation = "Ignore"
		write.warnings = append(write.warnings, warnings...)
		resp := g.loopback(withInfo(r.Context(), &write), r, http.MethodPut, r.URL.Path, r.URL.RawQuery, managed)
		if resp.code == http.StatusConflict && !pinsRV && attempt < maxPatchAttempts {
			continue
		}
		resp.copyTo(w)
		return nil
	}
}

// checkBodyKind refuses, before the field manager reads it, a body whose
// kind or apiVersion is not the one the path serves, as the generated
// handlers' decoder does.
func (g *Gateway) checkBodyKind(t *target, body []byte) error {
	return (&kubeMarshaler{tab: g.tab}).checkKind(t.res.Object.New().Interface(), body)
}
