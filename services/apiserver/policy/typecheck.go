// This file type-checks a policy's expressions against the kinds it matches,
// with k8s.io/apiserver's TypeChecker (what kube-controller-manager's policy
// status controller runs), the kinds' OpenAPI schemas built from kplane's
// proto descriptors as the gateway's OpenAPI documents are.

package policy

import (
	"fmt"

	arv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/proto/kubejson"
)

// Kind is one served kind, for type checking.
type Kind struct {
	GVK        schema.GroupVersionKind
	Resource   string // plural, lower case
	Namespaced bool
	Message    protoreflect.MessageDescriptor
}

// TypeChecker type-checks policies against a fixed set of kinds.
type TypeChecker struct {
	checker *validating.TypeChecker
}

// NewTypeChecker returns a checker over kinds.
func NewTypeChecker(kinds []Kind) *TypeChecker {
	mapper := meta.NewDefaultRESTMapper(nil)
	schemas := descriptorSchemas{}
	for _, k := range kinds {
		scope := meta.RESTScopeRoot
		if k.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		mapper.AddSpecific(k.GVK, k.GVK.GroupVersion().WithResource(k.Resource),
			k.GVK.GroupVersion().WithResource(lower(k.GVK.Kind)), scope)
		schemas[k.GVK] = k.Message
	}
	return &TypeChecker{checker: &validating.TypeChecker{SchemaResolver: schemas, RestMapper: mapper}}
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Check returns the expression warnings of a policy (kplane's proto or
// Kubernetes' type), as the status controller would write them into
// status.typeChecking.
func (t *TypeChecker) Check(obj proto.Message) ([]arv1.ExpressionWarning, error) {
	pol := &arv1.ValidatingAdmissionPolicy{}
	if err := convert(obj, pol); err != nil {
		return nil, err
	}
	return t.checker.Check(pol), nil
}

// descriptorSchemas resolves a kind's schema from its proto descriptor.
type descriptorSchemas map[schema.GroupVersionKind]protoreflect.MessageDescriptor

var _ resolver.SchemaResolver = descriptorSchemas{}

// ResolveSchema returns the kind's schema, or an error wrapping
// resolver.ErrSchemaNotFound.
func (d descriptorSchemas) ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error) {
	md, ok := d[gvk]
	if !ok {
		return nil, fmt.Errorf("cannot resolve %v: %w", gvk, resolver.ErrSchemaNotFound)
	}
	return messageSchema(md, 0), nil
}

// maxSchemaDepth bounds the schema of a recursive message.
const maxSchemaDepth = 24

// messageSchema is md's schema: an object whose properties are its fields'
// Kubernetes JSON names, inline fields merged in, as kubejson writes it.
func messageSchema(md protoreflect.MessageDescriptor, depth int) *spec.Schema {
	s := &spec.Schema{}
	s.Type = spec.StringOrArray{"object"}
	if depth > maxSchemaDepth {
		s.AddExtension("x-kubernetes-preserve-unknown-fields", true)
		return s
	}
	s.Properties = map[string]spec.Schema{}
	addFields(s.Properties, md, depth)
	return s
}

func addFields(props map[string]spec.Schema, md protoreflect.MessageDescriptor, depth int) {
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.Message() != nil && kubejson.IsInline(fd):
			addFields(props, fd.Message(), depth)
			continue
		case fd.IsMap():
			p := spec.Schema{}
			p.Type = spec.StringOrArray{"object"}
			p.AdditionalProperties = &spec.SchemaOrBool{Allows: true, Schema: valueSchema(fd.MapValue(), depth+1)}
			props[fd.JSONName()] = p
		case fd.IsList():
			p := spec.Schema{}
			p.Type = spec.StringOrArray{"array"}
			p.Items = &spec.SchemaOrArray{Schema: valueSchema(fd, depth+1)}
			props[fd.JSONName()] = p
		default:
			props[fd.JSONName()] = *valueSchema(fd, depth+1)
		}
	}
}

func valueSchema(fd protoreflect.FieldDescriptor, depth int) *spec.Schema {
	typed := func(t, format string) *spec.Schema {
		s := &spec.Schema{}
		s.Type = spec.StringOrArray{t}
		s.Format = format
		return s
	}
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.EnumKind:
		return typed("string", "")
	case protoreflect.BytesKind:
		return typed("string", "byte")
	case protoreflect.BoolKind:
		return typed("boolean", "")
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return typed("integer", "int32")
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return typed("integer", "int64")
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return typed("number", "double")
	}
	md := fd.Message()
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		return typed("string", "date-time")
	case "kplane.meta.v1.IntOrString":
		s := &spec.Schema{}
		s.AddExtension("x-kubernetes-int-or-string", true)
		return s
	}
	if kubejson.IsRawJSON(md) || md.FullName().Parent() == "google.protobuf" {
		s := typed("object", "")
		s.AddExtension("x-kubernetes-preserve-unknown-fields", true)
		return s
	}
	if kubejson.IsListWrapper(md) {
		s := typed("array", "")
		s.Items = &spec.SchemaOrArray{Schema: valueSchema(md.Fields().ByName("items"), depth+1)}
		return s
	}
	return messageSchema(md, depth)
}
