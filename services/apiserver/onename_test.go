// This file holds the tests of reads that name one object by a
// metadata.name field selector, as a node agent's single-object watches
// make them: a list from the watch cache (looked up by its key) and
// ConfigMap and Secret watches (their watchers indexed by the name).

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

// TestWatchOfOneName: a ConfigMap watch selecting one name (indexed by it)
// sees that object's events in its namespace and no other's, beside a
// watch of the whole namespace that sees them all.
func TestWatchOfOneName(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	if _, err := e.ns.CreateNamespace(ctx, &corev1.CreateNamespaceRequest{Namespace: &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "other"}}}); err != nil {
		t.Fatal(err)
	}
	create := func(ns, name string) {
		t.Helper()
		if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: ns, ConfigMap: &corev1.ConfigMap{Metadata: om(ns, name)}}); err != nil {
			t.Fatal(err)
		}
	}
	create("default", "a")
	waitCached(t, e, "configmaps", "default", "a")
	one, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", FieldSelector: "metadata.name=a", ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	all, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if got := recvN(t, one, 1, true); got[0].typ != eventAdded || got[0].name != "a" {
		t.Fatalf("initial event: got %v, want ADDED a", got)
	}
	recvN(t, all, 1, true)
	create("default", "b")
	create("other", "a")
	if _, err := e.cms.DeleteConfigMap(ctx, &corev1.DeleteConfigMapRequest{Namespace: "default", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range recvN(t, all, 2, true) {
		names = append(names, ev.typ+" "+ev.name)
	}
	if want := []string{eventAdded + " b", eventDeleted + " a"}; !slices.Equal(names, want) {
		t.Errorf("namespace watch: got %v, want %v", names, want)
	}
	// The one-name watch's next event is a's deletion: b, and a of the
	// other namespace, never came to it.
	if got := recvN(t, one, 1, true); got[0].typ != eventDeleted || got[0].name != "a" {
		t.Errorf("one-name watch: got %v, want DELETED a", got)
	}
	ch := e.srv.cachers["configmaps"]
	ch.mu.Lock()
	indexed := len(ch.indexed["a"])
	ch.mu.Unlock()
	if indexed != 1 {
		t.Errorf("watchers indexed under the name a: got %d, want 1", indexed)
	}
}
