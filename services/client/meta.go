package client

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// metaField returns metadata.<name> of a kplane object as a string, read
// through protobuf reflection so it works for every resource type.
func metaField(obj proto.Message, name protoreflect.Name) string {
	if obj == nil {
		return ""
	}
	m := obj.ProtoReflect()
	if !m.IsValid() {
		return ""
	}
	mf := m.Descriptor().Fields().ByName("metadata")
	if mf == nil || mf.Message() == nil || !m.Has(mf) {
		return ""
	}
	meta := m.Get(mf).Message()
	f := meta.Descriptor().Fields().ByName(name)
	if f == nil || f.Kind() != protoreflect.StringKind {
		return ""
	}
	return meta.Get(f).String()
}

// Namespace is obj's metadata.namespace.
func Namespace(obj proto.Message) string { return metaField(obj, "namespace") }

// Name is obj's metadata.name.
func Name(obj proto.Message) string { return metaField(obj, "name") }

// ResourceVersion is obj's metadata.resourceVersion.
func ResourceVersion(obj proto.Message) string { return metaField(obj, "resource_version") }

// UID is obj's metadata.uid.
func UID(obj proto.Message) string { return metaField(obj, "uid") }

// Key is the cache and work-queue key of obj: "namespace/name", or "name"
// for cluster-scoped objects, as client-go's MetaNamespaceKeyFunc.
func Key(obj proto.Message) string { return KeyOf(Namespace(obj), Name(obj)) }

// KeyOf builds a key from its parts.
func KeyOf(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// SplitKey splits a key made by Key.
func SplitKey(key string) (namespace, name string) {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}
