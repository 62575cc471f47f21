// This file holds the namespace controller's reconcile tests: live, gone and
// finalized namespaces left alone, a terminating one emptied, its conditions
// saying what is left or failed, and finalized once empty.

package namespace

import (
	"context"
	"errors"
	"maps"
	"slices"
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
	err   error
	calls int
}

func (d *countDeleter) Resource() string { return "pods" }

func (d *countDeleter) DeleteAll(context.Context, string) (int, error) {
	d.calls++
	n := d.left
	d.left = 0
	return n, d.err
}

func TestReconcile(t *testing.T) {
	terminating := &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "t", DeletionTimestamp: timestamppb.Now()},
		Spec: &corev1.NamespaceSpec{Finalizers: []string{"example.com/other", Finalizer}}}
	finalized := &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "done", DeletionTimestamp: timestamppb.Now()},
		Spec: &corev1.NamespaceSpec{Finalizers: []string{"example.com/other"}}}
	live := &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "live"}, Spec: &corev1.NamespaceSpec{Finalizers: []string{Finalizer}}}
	for _, tc := range []struct {
		name       string
		key        string
		left       int
		err        error
		wantErr    bool
		wantCalls  int
		wantVerbs  []string
		wantStatus map[string]string // condition type → status, in the status write
		// wantRequeue is the wait the reconcile asks for (Recheck with
		// objects left).
		wantRequeue time.Duration
	}{
		{name: "live namespace: nothing deleted", key: "live"},
		{name: "gone namespace: nothing to do", key: "gone"},
		{name: "terminating, finalized already: nothing to do", key: "done"},
		{name: "terminating, objects left: conditions say so, no finalize, looked at again", key: "t", left: 3, wantCalls: 1, wantRequeue: time.Hour,
			wantVerbs: []string{"updateStatus t"}, wantStatus: map[string]string{ContentRemaining: "True", ContentFailure: "False"}},
		{name: "terminating, a delete failed: conditions say so, no finalize", key: "t", left: 1, err: errors.New("boom"), wantErr: true, wantCalls: 1,
			wantVerbs: []string{"updateStatus t"}, wantStatus: map[string]string{ContentRemaining: "True", ContentFailure: "True"}},
		{name: "terminating and empty: finalized", key: "t", wantCalls: 1,
			wantVerbs: []string{"updateStatus t", "finalize t"}, wantStatus: map[string]string{ContentRemaining: "False", ContentFailure: "False"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nss := &fakeapi.Client[*corev1.Namespace]{}
			inf := fakeapi.Informer([]*corev1.Namespace{terminating, finalized, live}, client.InformerOptions[*corev1.Namespace]{})
			d := &countDeleter{left: tc.left, err: tc.err}
			c := New(Config{Namespaces: nss, Informer: inf, Deleters: []Deleter{d}, Recheck: time.Hour})
			t.Cleanup(c.queue.ShutDown) // New starts the queue; only Run would stop it
			fakeapi.Start(t, inf)
			res, err := c.Reconcile(context.Background(), tc.key)
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error: %v", err, tc.wantErr)
			}
			if want := tc.wantRequeue; res.RequeueAfter != want {
				t.Errorf("asked to run again after %v, want %v", res.RequeueAfter, want)
			}
			if d.calls != tc.wantCalls {
				t.Errorf("got %d DeleteAll calls, want %d", d.calls, tc.wantCalls)
			}
			if got := nss.Verbs(); !slices.Equal(got, tc.wantVerbs) {
				t.Fatalf("got writes %v, want %v", got, tc.wantVerbs)
			}
			for _, a := range nss.Actions {
				ns := a.Obj.(*corev1.Namespace)
				switch a.Verb {
				case "updateStatus":
					got := map[string]string{}
					for _, c := range ns.GetStatus().GetConditions() {
						got[c.GetType()] = c.GetStatus()
					}
					if !maps.Equal(got, tc.wantStatus) {
						t.Errorf("got conditions %v, want %v", got, tc.wantStatus)
					}
				case "finalize":
					if got := ns.GetSpec().GetFinalizers(); !slices.Equal(got, []string{"example.com/other"}) {
						t.Errorf("finalize wrote spec.finalizers %v, want [example.com/other]", got)
					}
				}
			}
		})
	}
}
