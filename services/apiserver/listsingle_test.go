// This file holds the test of a list from the watch cache that names one
// object by a metadata.name field selector (looked up by its key).

package apiserver

import (
	"slices"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func TestCachedListOfOneName(t *testing.T) {
	e := newEnv(t, nil)
	if _, err := e.ns.CreateNamespace(admin(t), &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "other"}}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct{ ns, name string }{{"default", "a"}, {"default", "b"}, {"other", "a"}} {
		m := om(o.ns, o.name)
		m.Labels = map[string]string{"app": o.ns}
		if _, err := e.cms.CreateConfigMap(admin(t), &corev1.CreateConfigMapRequest{Namespace: o.ns, ConfigMap: &corev1.ConfigMap{Metadata: m}}); err != nil {
			t.Fatal(err)
		}
		waitCached(t, e, "configmaps", o.ns, o.name)
	}
	tests := []struct {
		name, ns, fields, labels string
		want                     []string // namespace/name
	}{
		{name: "one name in a namespace", ns: "default", fields: "metadata.name=a", want: []string{"default/a"}},
		{name: "the other namespace", ns: "other", fields: "metadata.name=a", want: []string{"other/a"}},
		{name: "a name not there", ns: "default", fields: "metadata.name=c"},
		{name: "one name, labels not matching", ns: "default", fields: "metadata.name=a", labels: "app=other"},
		{name: "one name, labels matching", ns: "default", fields: "metadata.name=a", labels: "app=default", want: []string{"default/a"}},
		{name: "one name and another field", ns: "default", fields: "metadata.name=a,metadata.namespace!=default"},
		{name: "one name across namespaces", fields: "metadata.name=a", want: []string{"default/a", "other/a"}},
		{name: "not that name", ns: "default", fields: "metadata.name!=a", want: []string{"default/b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := e.cms.ListConfigMaps(admin(t), &corev1.ListConfigMapsRequest{Namespace: tt.ns, ResourceVersion: "0", FieldSelector: tt.fields, LabelSelector: tt.labels})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, cm := range l.GetList().GetItems() {
				got = append(got, cm.GetMetadata().GetNamespace()+"/"+cm.GetMetadata().GetName())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if l.GetList().GetMetadata().GetResourceVersion() == "" {
				t.Error("no resourceVersion on the list")
			}
		})
	}
}
