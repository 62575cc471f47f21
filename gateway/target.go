// This file reads what a resource path names (resource, namespace, object,
// subresource, watch) and builds the paths of its collection and object
// back.

package gateway

import (
	"net/http"
	"strings"
)

// target is what a resource path names. The front of the gateway reads it
// only for the requests it serves itself (PATCH, DELETE on a collection,
// ?watch=true); every other request is routed by the grpc-gateway mux.
type target struct {
	res       *resource
	namespace string
	name      string
	sub       string // "", "status", "scale", "log", ...
	watch     bool   // the legacy /watch/ prefix
}

// parseTarget reads [watch/][namespaces/{ns}/]{resource}[/{name}[/{sub}]]
// under a group version; nil when no served resource matches.
func (g *Gateway) parseTarget(group, version string, parts []string) *target {
	t := &target{}
	if len(parts) > 0 && parts[0] == "watch" {
		t.watch, parts = true, parts[1:]
	}
	// namespaces/{name}/status and /finalize are a namespace's
	// subresources, not a collection in it (as Kubernetes reads them).
	if len(parts) >= 3 && parts[0] == "namespaces" && !(len(parts) == 3 && (parts[2] == "status" || parts[2] == "finalize")) {
		t.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || len(parts) > 3 {
		return nil
	}
	t.res = g.tab.lookup(group, version, parts[0])
	if t.res == nil || (t.namespace != "" && !t.res.Namespaced) {
		return nil
	}
	if len(parts) > 1 {
		t.name = parts[1]
	}
	if len(parts) > 2 {
		t.sub = parts[2]
	}
	return t
}

// hasStatus says t's resource has a status subresource.
func (t *target) hasStatus() bool { return t.res.Methods["updateStatus"] != nil }

// prefix is /api/v1 or /apis/<group>/<version>.
func (t *target) prefix() string {
	if t.res.Group == "" {
		return "/api/" + t.res.Version
	}
	return "/apis/" + t.res.Group + "/" + t.res.Version
}

// collectionPath is the path of t's collection ([namespaces/{ns}/]{resource}).
func (t *target) collectionPath() string {
	p := t.prefix()
	if t.namespace != "" {
		p += "/namespaces/" + t.namespace
	}
	return p + "/" + t.res.Resource
}

// itemPath is the path of t's object, or of its subresource sub.
func (t *target) itemPath(sub string) string {
	p := t.collectionPath() + "/" + t.name
	if sub != "" {
		p += "/" + sub
	}
	return p
}

// toWatch turns a GET with ?watch=true on a list or object path into the
// request the generated watch handler serves: the /watch/ path of the
// collection, narrowed to the named object by a field selector.
func (t *target) toWatch(r *http.Request) {
	p := t.prefix() + "/watch"
	if t.namespace != "" {
		p += "/namespaces/" + t.namespace
	}
	p += "/" + t.res.Resource
	q := r.URL.Query()
	if t.name != "" {
		fs := "metadata.name=" + t.name
		if cur := q.Get("fieldSelector"); strings.TrimSpace(cur) != "" {
			fs = cur + "," + fs
		}
		q.Set("fieldSelector", fs)
	}
	q.Del("watch")
	u := *r.URL
	u.Path, u.RawPath, u.RawQuery = p, "", q.Encode()
	r.URL = &u
	r.RequestURI = u.RequestURI()
}
