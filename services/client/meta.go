// This file holds the metadata accessors every kplane object shares
// (namespace, name, resourceVersion, uid, key), read through the generated
// getters.

package client

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// objectMeta is what every kplane resource's generated code has.
type objectMeta interface {
	GetMetadata() *metav1.ObjectMeta
}

// metadata returns obj's metadata through its generated getter, or nil
// and false for a message without one (read through reflection then).
// Informers, indexers and queues key every object they touch, and the
// getter costs a type assertion where reflection costs descriptor lookups
// by name.
func metadata(obj proto.Message) (*metav1.ObjectMeta, bool) {
	o, ok := obj.(objectMeta)
	if !ok {
		return nil, false
	}
	return o.GetMetadata(), true
}

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
func Namespace(obj proto.Message) string {
	if m, ok := metadata(obj); ok {
		return m.GetNamespace()
	}
	return metaField(obj, "namespace")
}

// Name is obj's metadata.name.
func Name(obj proto.Message) string {
	if m, ok := metadata(obj); ok {
		return m.GetName()
	}
	return metaField(obj, "name")
}

// ResourceVersion is obj's metadata.resourceVersion.
func ResourceVersion(obj proto.Message) string {
	if m, ok := metadata(obj); ok {
		return m.GetResourceVersion()
	}
	return metaField(obj, "resource_version")
}

// UID is obj's metadata.uid.
func UID(obj proto.Message) string {
	if m, ok := metadata(obj); ok {
		return m.GetUid()
	}
	return metaField(obj, "uid")
}

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
