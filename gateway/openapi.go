// This file serves the OpenAPI v3 documents, one per group version, built
// once from the resource messages and Kubernetes' documentation of their
// fields.

package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	authorizationv1 "github.com/kplane/kplane/proto/kplane/authorization/v1"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	coordinationv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	flowcontrolv1 "github.com/kplane/kplane/proto/kplane/flowcontrol/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	networkingv1 "github.com/kplane/kplane/proto/kplane/networking/v1"
	nodev1 "github.com/kplane/kplane/proto/kplane/node/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	schedulingv1 "github.com/kplane/kplane/proto/kplane/scheduling/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// openAPI holds the OpenAPI v3 documents, built once from the resource
// table and the proto schema: per group version, the resource paths (the
// PATCH and POST operations carry x-kubernetes-group-version-kind and a
// fieldValidation parameter, which is what makes kubectl's default strict
// apply send fieldValidation=Strict) and a schema per message.
type openAPI struct {
	docs map[string][]byte // "api/v1", "apis/apps/v1"
	root []byte
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of strings, numbers and slices
	}
	return b
}

func newOpenAPI(tab *table) *openAPI {
	o := &openAPI{docs: map[string][]byte{}}
	docs := kubeDocs()
	paths := map[string]any{}
	for _, gv := range tab.groupVersions() {
		key := "apis/" + gv
		if gv == "v1" {
			key = "api/v1"
		}
		doc := gvDocument(tab, gv, docs)
		b := mustJSON(doc)
		sum := sha256.Sum256(b)
		o.docs[key] = b
		paths[key] = map[string]any{"serverRelativeURL": "/openapi/v3/" + key + "?hash=" + strings.ToUpper(hex.EncodeToString(sum[:16]))}
	}
	o.root = mustJSON(map[string]any{"paths": paths})
	return o
}

func gvDocument(tab *table, gv string, docs map[string]string) map[string]any {
	paths := map[string]any{}
	schemas := map[string]any{}
	query := func(names ...string) []any {
		var ps []any
		for _, n := range names {
			ps = append(ps, map[string]any{"name": n, "in": "query", "schema": map[string]any{"type": "string"}, "uniqueItems": true})
		}
		return ps
	}
	for _, res := range tab.resources(gv) {
		prefix := "/api/" + res.Version
		if res.Group != "" {
			prefix = "/apis/" + res.Group + "/" + res.Version
		}
		if res.Namespaced {
			prefix += "/namespaces/{namespace}"
		}
		gvk := map[string]any{"group": res.Group, "version": res.Version, "kind": res.Kind}
		ref := map[string]any{"$ref": "#/components/schemas/" + schemaName(res.Object.Descriptor())}
		body := map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": ref}}}
		resp := map[string]any{"200": map[string]any{"description": "OK", "content": map[string]any{"application/json": map[string]any{"schema": ref}}}}
		op := func(id string, params []any, withBody bool) map[string]any {
			m := map[string]any{"operationId": id + res.Kind, "x-kubernetes-group-version-kind": gvk, "responses": resp}
			if params != nil {
				m["parameters"] = params
			}
			if withBody {
				m["requestBody"] = body
			}
			return m
		}
		collection := map[string]any{"post": op("create", query("dryRun", "fieldManager", "fieldValidation"), true)}
		paths[prefix+"/"+res.Resource] = collection
		if res.Methods["get"] != nil { // not a create-only review
			collection["get"] = op("list", query("labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch"), false)
			paths[prefix+"/"+res.Resource+"/{name}"] = map[string]any{
				"get":    op("read", nil, false),
				"put":    op("replace", query("dryRun", "fieldManager", "fieldValidation"), true),
				"patch":  op("patch", query("dryRun", "fieldManager", "fieldValidation", "force"), true),
				"delete": op("delete", query("dryRun", "gracePeriodSeconds", "propagationPolicy"), false),
			}
		}
		addSchema(schemas, docs, res.Object.Descriptor(), gvk)
	}
	return map[string]any{
		"openapi":    "3.0.0",
		"info":       map[string]any{"title": "Kubernetes (kplane)", "version": "v1.32.0"},
		"paths":      paths,
		"components": map[string]any{"schemas": schemas},
	}
}

// kubeDocs merges the Kubernetes documentation of every message and field
// (by full name), which the schemas carry as descriptions for kubectl
// explain.
func kubeDocs() map[string]string {
	docs := map[string]string{}
	for _, d := range []map[string]string{metav1.Docs(), corev1.Docs(), appsv1.Docs(), coordinationv1.Docs(), rbacv1.Docs(),
		admissionregistrationv1.Docs(), authorizationv1.Docs(), autoscalingv1.Docs(), policyv1.Docs(), batchv1.Docs(), discoveryv1.Docs(),
		networkingv1.Docs(), nodev1.Docs(), storagev1.Docs(), schedulingv1.Docs(), flowcontrolv1.Docs()} {
		maps.Copy(docs, d)
	}
	return docs
}

func schemaName(md protoreflect.MessageDescriptor) string {
	return strings.TrimPrefix(string(md.FullName()), "kplane.")
}

// addSchema adds md's schema and those of the messages it references.
func addSchema(schemas map[string]any, docs map[string]string, md protoreflect.MessageDescriptor, gvk map[string]any) {
	name := schemaName(md)
	if _, ok := schemas[name]; ok {
		return
	}
	s := map[string]any{"type": "object"}
	if d := docs[string(md.FullName())]; d != "" {
		s["description"] = d
	}
	schemas[name] = s
	props := map[string]any{}
	addProperties(schemas, props, docs, md)
	s["properties"] = props
	if gvk != nil {
		s["x-kubernetes-group-version-kind"] = []any{gvk}
	} else if av, kind, ok := kubejson.TypeMeta(md); ok {
		group, version, found := strings.Cut(av, "/")
		if !found {
			group, version = "", av
		}
		s["x-kubernetes-group-version-kind"] = []any{map[string]any{"group": group, "version": version, "kind": kind}}
	}
}

// addProperties adds the properties of md's fields to props, those of a
// field written inline (Volume's VolumeSource) as md's own.
func addProperties(schemas, props map[string]any, docs map[string]string, md protoreflect.MessageDescriptor) {
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		var p map[string]any
		switch {
		case fd.Message() != nil && kubejson.IsInline(fd):
			addProperties(schemas, props, docs, fd.Message())
			continue
		case fd.IsMap():
			p = map[string]any{"type": "object", "additionalProperties": valueSchema(schemas, docs, fd.MapValue())}
		case fd.IsList():
			p = map[string]any{"type": "array", "items": valueSchema(schemas, docs, fd)}
		default:
			p = valueSchema(schemas, docs, fd)
		}
		if d := docs[string(fd.FullName())]; d != "" {
			p["description"] = d
		}
		props[fd.JSONName()] = p
	}
}

func valueSchema(schemas map[string]any, docs map[string]string, fd protoreflect.FieldDescriptor) map[string]any {
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.EnumKind:
		return map[string]any{"type": "string"}
	case protoreflect.BytesKind:
		return map[string]any{"type": "string", "format": "byte"}
	case protoreflect.BoolKind:
		return map[string]any{"type": "boolean"}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return map[string]any{"type": "integer", "format": "int32"}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return map[string]any{"type": "integer", "format": "int64"}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return map[string]any{"type": "number"}
	}
	md := fd.Message()
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		return map[string]any{"type": "string", "format": "date-time"}
	case "kplane.meta.v1.IntOrString":
		return map[string]any{"x-kubernetes-int-or-string": true}
	}
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return map[string]any{}
	}
	if kubejson.IsRawJSON(md) {
		return map[string]any{"type": "object"}
	}
	if kubejson.IsListWrapper(md) {
		return map[string]any{"type": "array", "items": valueSchema(schemas, docs, md.Fields().ByName("items"))}
	}
	addSchema(schemas, docs, md, nil)
	return map[string]any{"allOf": []any{map[string]any{"$ref": "#/components/schemas/" + schemaName(md)}}}
}

// serveOpenAPI serves /openapi/v3 (key "") and a group version's
// document: a built-in one, or a custom resource group version's.
func (g *Gateway) serveOpenAPI(w http.ResponseWriter, r *http.Request, key string) {
	b, ok := g.openapi.docs[key]
	if !ok {
		c, err := g.crdDocuments(r)
		if err != nil {
			writeError(w, err)
			return
		}
		if key == "" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(c.v3Root)
			return
		}
		if b, ok = c.v3[key]; !ok {
			writeError(w, notFound())
			return
		}
	}
	if r.URL.Query().Get("hash") != "" {
		w.Header().Set("Cache-Control", "public, immutable")
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
