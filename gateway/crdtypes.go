// This file holds the schema the field managers use for
// CustomResourceDefinition, and the meta types custom resources' schemas
// refer to: apiextensions-apiserver's generated OpenAPI definitions, as
// kube-apiserver builds its own from them.
package gateway

import (
	"fmt"

	apiextensionsopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// crdTypeConverter returns the TypeConverter of apiextensions.k8s.io/v1's
// kinds: the generated definitions under their REST-friendly names, with
// the group-version-kind extension that ties the two kinds to them.
func crdTypeConverter() (managedfields.TypeConverter, error) {
	tc, err := managedfields.NewTypeConverter(apiextensionsModels(), false)
	if err != nil {
		return nil, fmt.Errorf("gateway: CustomResourceDefinition schema: %w", err)
	}
	return tc, nil
}

// apiextensionsModels are apiextensions-apiserver's generated definitions
// (its kinds and the meta types they use: ObjectMeta, ManagedFieldsEntry,
// Time...) under their REST-friendly names, the two CRD kinds tagged with
// their group-version-kind. Custom resources' schemas refer to the meta
// types among them.
func apiextensionsModels() map[string]*spec.Schema {
	ref := func(path string) spec.Ref {
		return spec.MustCreateRef("#/definitions/" + util.ToRESTFriendlyName(path))
	}
	const pkg = "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1."
	models := map[string]*spec.Schema{}
	for path, def := range apiextensionsopenapi.GetOpenAPIDefinitions(common.ReferenceCallback(ref)) {
		s := def.Schema
		switch path {
		case pkg + "CustomResourceDefinition", pkg + "CustomResourceDefinitionList":
			s.AddExtension("x-kubernetes-group-version-kind", []any{map[string]any{
				"group": "apiextensions.k8s.io", "version": "v1", "kind": path[len(pkg):]}})
		}
		models[util.ToRESTFriendlyName(path)] = &s
	}
	return models
}
