// This file holds the test of DELETE on a collection through client-go: what
// the selectors match is deleted, and nothing else.

package gateway_test

import (
	"context"
	"net/http/httptest"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
)

// clientset returns client-go's typed clientset talking to a gateway in
// front of an in-process API service, as admin.
func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	env := apiservertest.Start(t, apiservertest.Options{})
	gw, err := gateway.New(gateway.Config{Conn: env.Dial(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: apiservertest.AdminToken})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// DELETE on a collection deletes what the selectors match, and only that.
func TestDeleteCollection(t *testing.T) {
	cs := clientset(t)
	ctx := context.Background()
	cms := cs.CoreV1().ConfigMaps("default")
	for _, c := range []struct{ name, tier string }{{"a1", "a"}, {"a2", "a"}, {"b1", "b"}} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: c.name, Labels: map[string]string{"tier": c.tier}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	names := func() []string {
		l, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range l.Items {
			out = append(out, it.Name)
		}
		sort.Strings(out)
		return out
	}
	// A dry run deletes nothing.
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}, metav1.ListOptions{LabelSelector: "tier=a"}); err != nil {
		t.Fatal(err)
	}
	if got := names(); len(got) != 3 {
		t.Fatalf("after a dry-run deletecollection: %v, want all three", got)
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "tier=a"}); err != nil {
		t.Fatal(err)
	}
	if got := names(); len(got) != 1 || got[0] != "b1" {
		t.Fatalf("after deletecollection tier=a: %v, want [b1]", got)
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "metadata.name=b1"}); err != nil {
		t.Fatal(err)
	}
	if got := names(); len(got) != 0 {
		t.Fatalf("after deletecollection metadata.name=b1: %v, want none", got)
	}
	// A bad selector is a 400 Status and deletes nothing.
	err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "tier in (("})
	if err == nil {
		t.Fatal("deletecollection with a malformed selector succeeded")
	}
}
