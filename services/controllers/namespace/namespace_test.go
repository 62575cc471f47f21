package namespace

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/fakeapi"
)

type countDeleter struct {
	left  int
	calls int
}

func (d *countDeleter) DeleteAll(context.Context, string) (int, error) {
	d.calls++
	n := d.left
	d.left = 0
	return n, nil
}

func TestReconcile(t *testing.T) {
	terminating := &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "t", DeletionTimestamp: timestamppb.Now(), Finalizers: []string{Finalizer}},
		Spec: &corev1.NamespaceSpec{Finalizers: []string{Finalizer}}}
	live := &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "live"}}
	for _, tc := range []struct {
		name        string
		key         string
		left        int
		wantCalls   int
		wantUpdates int
	}{
		{name: "live namespace: nothing deleted", key: "live", wantCalls: 0},
		{name: "gone namespace: contents deleted", key: "gone", wantCalls: 1},
		{name: "terminating, objects left: no finalizer removal yet", key: "t", left: 3, wantCalls: 1},
		{name: "terminating and empty: finalizer removed", key: "t", wantCalls: 1, wantUpdates: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nss := &fakeapi.Client[*corev1.Namespace]{}
			inf := fakeapi.Informer([]*corev1.Namespace{terminating, live}, client.InformerOptions[*corev1.Namespace]{})
			d := &countDeleter{left: tc.left}
			c := New(Config{Namespaces: nss, Informer: inf, Deleters: []Deleter{d}, Recheck: time.Hour})
			fakeapi.Start(t, inf)
			if err := c.Reconcile(context.Background(), tc.key); err != nil {
				t.Fatal(err)
			}
			if d.calls != tc.wantCalls {
				t.Errorf("got %d DeleteAll calls, want %d", d.calls, tc.wantCalls)
			}
			if got := len(nss.Actions); got != tc.wantUpdates {
				t.Errorf("got %d namespace updates, want %d", got, tc.wantUpdates)
			}
			for _, a := range nss.Actions {
				ns := a.Obj.(*corev1.Namespace)
				if len(ns.GetMetadata().GetFinalizers()) != 0 || len(ns.GetSpec().GetFinalizers()) != 0 {
					t.Errorf("got finalizers %v / %v after removal, want none", ns.GetMetadata().GetFinalizers(), ns.GetSpec().GetFinalizers())
				}
			}
		})
	}
}
