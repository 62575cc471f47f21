// This file holds DELETE on a collection (kubectl delete --all): every
// object the selectors match, deleted one by one through the API service.

package gateway

import (
	"encoding/json"
	"net/http"
	"net/url"
)

// deleteCollection serves DELETE on a collection (kubectl delete --all, or
// -l with a selector), which no API-service method does in one call: it
// lists the collection with the request's label and field selectors, then
// deletes each object through the generated DELETE handler with the
// request's delete options, as Kubernetes' deletecollection does. It
// answers with the list of what it deleted (the objects as the deletes
// returned them); the first failure stops it and is the answer.
func (g *Gateway) deleteCollection(w http.ResponseWriter, r *http.Request, t *target, info *requestInfo) {
	q := r.URL.Query()
	lq := url.Values{}
	for _, k := range []string{"labelSelector", "fieldSelector"} {
		if v := q.Get(k); v != "" {
			lq.Set(k, v)
		}
	}
	plain := *info
	plain.table = false
	list := g.loopback(withInfo(r.Context(), &plain), r, http.MethodGet, t.collectionPath(), lq.Encode(), nil)
	if list.code != http.StatusOK {
		list.copyTo(w)
		return
	}
	var l struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Items      []struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(list.body.Bytes(), &l); err != nil {
		writeError(w, err)
		return
	}
	var options []byte
	if rb, ok := r.Body.(*requestBody); ok {
		options = rb.data
	}
	dq := url.Values{}
	for k, v := range q {
		if k != "labelSelector" && k != "fieldSelector" {
			dq[k] = v
		}
	}
	items := []json.RawMessage{}
	for _, it := range l.Items {
		one := *t
		one.name = it.Metadata.Name
		if it.Metadata.Namespace != "" && t.res.Namespaced {
			one.namespace = it.Metadata.Namespace
		}
		resp := g.loopback(withInfo(r.Context(), &plain), r, http.MethodDelete, one.itemPath(""), dq.Encode(), options)
		switch {
		case resp.code == http.StatusNotFound:
			continue // deleted meanwhile
		case resp.code >= 300:
			resp.copyTo(w)
			return
		}
		items = append(items, json.RawMessage(resp.body.Bytes()))
	}
	writeJSON(w, http.StatusOK, map[string]any{"apiVersion": l.APIVersion, "kind": l.Kind, "metadata": map[string]any{}, "items": items})
}
