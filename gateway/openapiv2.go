// This file holds the minimal protobuf OpenAPI v2 document older kubectl
// versions fetch, and when a client asks for it.

package gateway

import (
	"fmt"
	"strings"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
)

// openAPIV2Type is what clients Accept for the protobuf OpenAPI v2 document;
// it is served as application/octet-stream, as Kubernetes does (the "@" does
// not parse as a media type).
const openAPIV2Type = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"

// openAPIV2 builds the minimal protobuf OpenAPI v2 document older kubectl
// (1.27) reads before apply: each resource's PATCH operation with its
// x-kubernetes-group-version-kind and a fieldValidation query parameter,
// which is how kubectl learns that the server validates fields itself. It
// carries no definitions, so kubectl uses its compiled-in patch metadata.
func openAPIV2(tab *table) ([]byte, error) {
	doc := &openapiv2.Document{
		Swagger: "2.0",
		Info:    &openapiv2.Info{Title: "Kubernetes (kplane)", Version: "v1.32.0"},
		Paths:   &openapiv2.Paths{},
	}
	query := func(name string) *openapiv2.ParametersItem {
		return &openapiv2.ParametersItem{Oneof: &openapiv2.ParametersItem_Parameter{Parameter: &openapiv2.Parameter{
			Oneof: &openapiv2.Parameter_NonBodyParameter{NonBodyParameter: &openapiv2.NonBodyParameter{
				Oneof: &openapiv2.NonBodyParameter_QueryParameterSubSchema{QueryParameterSubSchema: &openapiv2.QueryParameterSubSchema{
					In: "query", Name: name, Type: "string", UniqueItems: true}}}}}}}
	}
	for _, gv := range tab.groupVersions() {
		for _, res := range tab.resources(gv) {
			prefix := "/api/" + res.Version
			if res.Group != "" {
				prefix = "/apis/" + res.Group + "/" + res.Version
			}
			if res.Namespaced {
				prefix += "/namespaces/{namespace}"
			}
			gvk := fmt.Sprintf("group: %q\nkind: %s\nversion: %s\n", res.Group, res.Kind, res.Version)
			ext := []*openapiv2.NamedAny{{Name: "x-kubernetes-group-version-kind", Value: &openapiv2.Any{Yaml: gvk}}}
			op := func(id string, params ...string) *openapiv2.Operation {
				o := &openapiv2.Operation{OperationId: id + res.Kind, VendorExtension: ext,
					Responses: &openapiv2.Responses{}}
				for _, p := range params {
					o.Parameters = append(o.Parameters, query(p))
				}
				return o
			}
			collection := &openapiv2.PathItem{Post: op("create", "dryRun", "fieldManager", "fieldValidation")}
			doc.Paths.Path = append(doc.Paths.Path, &openapiv2.NamedPathItem{Name: prefix + "/" + res.Resource, Value: collection})
			if res.Methods["get"] == nil { // a create-only review
				continue
			}
			collection.Get = op("list")
			doc.Paths.Path = append(doc.Paths.Path,
				&openapiv2.NamedPathItem{Name: prefix + "/" + res.Resource + "/{name}", Value: &openapiv2.PathItem{
					Get: op("read"), Put: op("replace", "dryRun", "fieldManager", "fieldValidation"),
					Patch: op("patch", "dryRun", "fieldManager", "fieldValidation", "force"), Delete: op("delete")}})
		}
	}
	b, err := proto.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("gateway: openapi v2: %w", err)
	}
	return b, nil
}

// acceptsOpenAPIV2Proto reports whether the Accept header asks for the
// protobuf document.
func acceptsOpenAPIV2Proto(accept string) bool {
	return strings.Contains(accept, strings.Split(openAPIV2Type, "@")[0])
}
