// This file holds the test of the metadata accessors on objects and lists,
// and a benchmark of an object's key.

package client

import (
	"testing"

	"google.golang.org/protobuf/proto"

	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// TestMetaAccessors: the accessors read the same fields through the
// generated getter as through reflection, for objects, nil objects, objects
// without metadata and messages whose metadata is not an ObjectMeta (a
// list's ResourceVersion comes from its ListMeta).
func TestMetaAccessors(t *testing.T) {
	full := &coordv1.Lease{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "n", Uid: "u", ResourceVersion: "7"}}
	list := &coordv1.LeaseList{Metadata: &metav1.ListMeta{ResourceVersion: "9"}}
	for name, obj := range map[string]proto.Message{
		"object":       full,
		"cluster":      &coordv1.Lease{Metadata: &metav1.ObjectMeta{Name: "n"}},
		"no metadata":  &coordv1.Lease{},
		"nil object":   (*coordv1.Lease)(nil),
		"nil":          nil,
		"list":         list,
		"not a object": &metav1.ObjectMeta{Name: "x"},
	} {
		got := [4]string{Namespace(obj), Name(obj), UID(obj), ResourceVersion(obj)}
		want := [4]string{metaField(obj, "namespace"), metaField(obj, "name"), metaField(obj, "uid"), metaField(obj, "resource_version")}
		if got != want {
			t.Errorf("%s: got %q, reflection says %q", name, got, want)
		}
	}
	if got := [4]string{Namespace(full), Name(full), UID(full), ResourceVersion(full)}; got != [4]string{"ns", "n", "u", "7"} {
		t.Errorf("object: %q", got)
	}
	if Key(full) != "ns/n" || ResourceVersion(list) != "9" {
		t.Errorf("Key %q, list resourceVersion %q", Key(full), ResourceVersion(list))
	}
}

// BenchmarkKey: an object's key through the generated getter (Key) and
// through reflection alone, as before.
func BenchmarkKey(b *testing.B) {
	obj := &coordv1.Lease{Metadata: &metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "node-42"}}
	b.Run("getter", func(b *testing.B) {
		for b.Loop() {
			_ = Key(obj)
		}
	})
	b.Run("reflection", func(b *testing.B) {
		for b.Loop() {
			_ = KeyOf(metaField(obj, "namespace"), metaField(obj, "name"))
		}
	})
}
