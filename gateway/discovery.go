// This file serves discovery: /api, /apis, each group and group version, in
// both the legacy documents and the aggregated (apidiscovery.k8s.io/v2) form
// kubectl asks for first.

package gateway

import (
	"net/http"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/version"

	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

// aggregatedType is the content type kubectl needs to read aggregated
// discovery; the same body under another type is read as legacy discovery.
const aggregatedType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

func wantsAggregated(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		var g, v, as bool
		for _, p := range strings.Split(part, ";") {
			switch strings.TrimSpace(p) {
			case "g=apidiscovery.k8s.io":
				g = true
			case "v=v2":
				v = true
			case "as=APIGroupDiscoveryList":
				as = true
			}
		}
		if g && v && as {
			return true
		}
	}
	return false
}

func gvOf(group, version string) map[string]any {
	gv := version
	if group != "" {
		gv = group + "/" + version
	}
	return map[string]any{"groupVersion": gv, "version": version}
}

// groups returns the served API groups (without the core group) and their
// versions: the built-in ones, then those of the custom resources crs.
func (g *Gateway) groups(crs []*dynamicv1.ServedResource) (names []string, versions map[string][]string) {
	versions = map[string][]string{}
	gvs := g.tab.groupVersions()
	for _, cr := range crs {
		if gv := cr.GetGroup() + "/" + cr.GetVersion(); !slices.Contains(gvs, gv) {
			gvs = append(gvs, gv)
		}
	}
	for _, gv := range gvs {
		grp, ver, ok := strings.Cut(gv, "/")
		if !ok {
			continue
		}
		if versions[grp] == nil {
			names = append(names, grp)
		}
		versions[grp] = append(versions[grp], ver)
	}
	for _, vs := range versions {
		// A group's versions by Kubernetes' version priority, the preferred
		// first, as kube-apiserver orders them: a custom group's (of one CRD
		// or several), and autoscaling's v2 before v1.
		slices.SortStableFunc(vs, func(a, b string) int { return -version.CompareKubeAwareVersionStrings(a, b) })
	}
	return names, versions
}

func (g *Gateway) serveDiscovery(w http.ResponseWriter, r *http.Request, path string) {
	if wantsAggregated(r) {
		var items []any
		if path == "/api" {
			items = append(items, g.aggregatedGroup("", []string{"v1"}, nil))
		} else {
			crs := g.customResources(r)
			names, versions := g.groups(crs)
			for _, n := range names {
				items = append(items, g.aggregatedGroup(n, versions[n], crs))
			}
		}
		if items == nil {
			items = []any{}
		}
		w.Header().Set("Vary", "Accept")
		w.Header().Set("Content-Type", aggregatedType)
		b := mustJSON(map[string]any{"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": map[string]any{}, "items": items})
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Vary", "Accept")
	if path == "/api" {
		writeJSON(w, http.StatusOK, map[string]any{"kind": "APIVersions", "versions": []string{"v1"},
			"serverAddressByClientCIDRs": []any{map[string]any{"clientCIDR": "0.0.0.0/0", "serverAddress": r.Host}}})
		return
	}
	names, versions := g.groups(g.customResources(r))
	groups := []any{}
	for _, n := range names {
		groups = append(groups, g.apiGroup(n, versions[n]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

func (g *Gateway) apiGroup(name string, versions []string) map[string]any {
	var vs []any
	for _, v := range versions {
		vs = append(vs, gvOf(name, v))
	}
	return map[string]any{"name": name, "versions": vs, "preferredVersion": gvOf(name, versions[0])}
}

func (g *Gateway) serveGroup(w http.ResponseWriter, r *http.Request, name string) {
	_, versions := g.groups(g.customResources(r))
	if versions[name] == nil {
		writeError(w, notFound())
		return
	}
	m := g.apiGroup(name, versions[name])
	m["kind"], m["apiVersion"] = "APIGroup", "v1"
	writeJSON(w, http.StatusOK, m)
}

func (g *Gateway) aggregatedGroup(group string, versions []string, crs []*dynamicv1.ServedResource) map[string]any {
	var vs []any
	for _, v := range versions {
		gv := v
		if group != "" {
			gv = group + "/" + v
		}
		var rs []any
		for _, res := range g.tab.resources(gv) {
			scope := "Cluster"
			if res.Namespaced {
				scope = "Namespaced"
			}
			entry := map[string]any{
				"resource":         res.Resource,
				"responseKind":     map[string]any{"group": res.Group, "version": res.Version, "kind": res.Kind},
				"scope":            scope,
				"singularResource": strings.ToLower(res.Kind),
				"verbs":            res.verbs(),
			}
			if sn := res.shortNames(); sn != nil {
				entry["shortNames"] = sn
			}
			if cs := res.categories(); cs != nil {
				entry["categories"] = cs
			}
			var subs []any
			for _, s := range res.subresources() {
				subs = append(subs, map[string]any{"subresource": s.name,
					"responseKind": map[string]any{"group": s.group, "version": s.version, "kind": s.kind}, "verbs": s.verbs})
			}
			if subs != nil {
				entry["subresources"] = subs
			}
			rs = append(rs, entry)
		}
		for _, cr := range crs {
			if cr.GetGroup() == group && cr.GetVersion() == v {
				rs = append(rs, aggregatedCustom(cr))
			}
		}
		vs = append(vs, map[string]any{"version": v, "resources": rs})
	}
	return map[string]any{"metadata": map[string]any{"name": group}, "versions": vs}
}

type subresource struct {
	name, group, version, kind string
	verbs                      []string
}

func (r *resource) subresources() []subresource {
	var out []subresource
	if r.Methods["updateStatus"] != nil {
		out = append(out, subresource{"status", r.Group, r.Version, r.Kind, []string{"get", "patch", "update"}})
	}
	if r.Methods["updateApproval"] != nil {
		out = append(out, subresource{"approval", r.Group, r.Version, r.Kind, []string{"get", "patch", "update"}})
	}
	if r.Methods["updateEphemeralContainers"] != nil {
		out = append(out, subresource{"ephemeralcontainers", r.Group, r.Version, r.Kind, []string{"get", "patch", "update"}})
	}
	if r.Methods["getScale"] != nil {
		out = append(out, subresource{"scale", "autoscaling", "v1", "Scale", []string{"get", "patch", "update"}})
	}
	if r.Methods["bind"] != nil {
		out = append(out, subresource{"binding", "", "v1", "Binding", []string{"create"}})
	}
	if r.Group == "" && r.Resource == "serviceaccounts" {
		// Served by the AuthenticationService (TokenRequest).
		out = append(out, subresource{"token", "authentication.k8s.io", "v1", "TokenRequest", []string{"create"}})
	}
	if r.Methods["evict"] != nil {
		out = append(out, subresource{"eviction", "policy", "v1", "Eviction", []string{"create"}})
	}
	return out
}

func (g *Gateway) serveResourceList(w http.ResponseWriter, r *http.Request, group, version string) {
	gv := version
	if group != "" {
		gv = group + "/" + version
	}
	rs := []any{}
	if g.tab.byGV[gv] == nil {
		for _, cr := range g.customResources(r) {
			if cr.GetGroup() == group && cr.GetVersion() == version {
				rs = append(rs, legacyCustom(cr)...)
			}
		}
		if len(rs) == 0 {
			writeError(w, notFound())
			return
		}
	}
	for _, res := range g.tab.resources(gv) {
		entry := map[string]any{"name": res.Resource, "singularName": strings.ToLower(res.Kind),
			"namespaced": res.Namespaced, "kind": res.Kind, "verbs": res.verbs()}
		if sn := res.shortNames(); sn != nil {
			entry["shortNames"] = sn
		}
		if cs := res.categories(); cs != nil {
			entry["categories"] = cs
		}
		rs = append(rs, entry)
		for _, s := range res.subresources() {
			sub := map[string]any{"name": res.Resource + "/" + s.name, "singularName": "", "namespaced": res.Namespaced,
				"kind": s.kind, "verbs": s.verbs}
			if s.group != res.Group || s.version != res.Version {
				sub["group"], sub["version"] = s.group, s.version
			}
			rs = append(rs, sub)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": rs})
}

// aggregatedCustom is a custom resource's aggregated discovery entry.
func aggregatedCustom(cr *dynamicv1.ServedResource) map[string]any {
	entry := map[string]any{
		"resource":         cr.GetResource(),
		"responseKind":     map[string]any{"group": cr.GetGroup(), "version": cr.GetVersion(), "kind": cr.GetKind()},
		"scope":            customScope(cr),
		"singularResource": cr.GetSingular(),
		"verbs":            customVerbs,
	}
	if len(cr.GetShortNames()) > 0 {
		entry["shortNames"] = cr.GetShortNames()
	}
	if len(cr.GetCategories()) > 0 {
		entry["categories"] = cr.GetCategories()
	}
	var subs []any
	if cr.GetStatus() {
		subs = append(subs, map[string]any{"subresource": "status",
			"responseKind": map[string]any{"group": cr.GetGroup(), "version": cr.GetVersion(), "kind": cr.GetKind()},
			"verbs":        []string{"get", "patch", "update"}})
	}
	if cr.GetScale() {
		subs = append(subs, map[string]any{"subresource": "scale",
			"responseKind": map[string]any{"group": "autoscaling", "version": "v1", "kind": "Scale"},
			"verbs":        []string{"get", "patch", "update"}})
	}
	if subs != nil {
		entry["subresources"] = subs
	}
	return entry
}

// legacyCustom is a custom resource's APIResourceList entries (the
// resource, then its status subresource).
func legacyCustom(cr *dynamicv1.ServedResource) []any {
	entry := map[string]any{"name": cr.GetResource(), "singularName": cr.GetSingular(),
		"namespaced": cr.GetNamespaced(), "kind": cr.GetKind(), "verbs": customVerbs}
	if len(cr.GetShortNames()) > 0 {
		entry["shortNames"] = cr.GetShortNames()
	}
	if len(cr.GetCategories()) > 0 {
		entry["categories"] = cr.GetCategories()
	}
	out := []any{entry}
	if cr.GetStatus() {
		out = append(out, map[string]any{"name": cr.GetResource() + "/status", "singularName": "", "namespaced": cr.GetNamespaced(),
			"kind": cr.GetKind(), "verbs": []string{"get", "patch", "update"}})
	}
	if cr.GetScale() {
		out = append(out, map[string]any{"name": cr.GetResource() + "/scale", "singularName": "", "namespaced": cr.GetNamespaced(),
			"group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": []string{"get", "patch", "update"}})
	}
	return out
}
