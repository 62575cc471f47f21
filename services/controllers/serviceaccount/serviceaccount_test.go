// This file holds the ServiceAccount controller's reconcile tests over fixed
// informer caches: which namespaces get a default ServiceAccount.
package serviceaccount

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/fakeapi"
)

func TestReconcile(t *testing.T) {
	ns := func(name, phase string, deleting bool) *corev1.Namespace {
		n := &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: name}, Status: &corev1.NamespaceStatus{Phase: phase}}
		if deleting {
			n.Metadata.DeletionTimestamp = timestamppb.Now()
		}
		return n
	}
	nsInf := fakeapi.Informer([]*corev1.Namespace{
		ns("fresh", "Active", false), ns("has", "Active", false), ns("ending", "Terminating", true), ns("racing", "Active", false),
	}, client.InformerOptions[*corev1.Namespace]{})
	saInf := fakeapi.Informer([]*corev1.ServiceAccount{
		{Metadata: &metav1.ObjectMeta{Namespace: "has", Name: Default}},
		{Metadata: &metav1.ObjectMeta{Namespace: "fresh", Name: "other"}},
	}, client.InformerOptions[*corev1.ServiceAccount]{})
	sw := &swapClient{}
	c := New(Config{ServiceAccounts: sw, NamespaceInformer: nsInf, ServiceAccountInformer: saInf})
	t.Cleanup(c.queue.ShutDown) // New starts the queue; only Run would stop it
	fakeapi.Start(t, nsInf, saInf)

	for _, tc := range []struct {
		name, ns  string
		fail      error
		wantVerbs []string
		wantErr   bool
	}{
		{name: "active namespace without it: created", ns: "fresh", wantVerbs: []string{"create fresh/default"}},
		{name: "active namespace with it: nothing", ns: "has"},
		{name: "terminating namespace: nothing", ns: "ending"},
		{name: "gone namespace: nothing", ns: "gone"},
		{name: "created meanwhile: fine", ns: "racing", fail: apierrors.NewAlreadyExists("", "serviceaccounts", Default)},
		{name: "other errors are retried", ns: "racing", fail: apierrors.NewInternalError(context.DeadlineExceeded), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sas := &fakeapi.Client[*corev1.ServiceAccount]{}
			if tc.fail != nil {
				sas.Fail = func(string, string) error { return tc.fail }
			}
			sw.c = sas
			_, err := c.Reconcile(t.Context(), tc.ns)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err: %v, want error %v", err, tc.wantErr)
			}
			if got := sas.Verbs(); !slices.Equal(got, tc.wantVerbs) {
				t.Errorf("writes: got %v, want %v", got, tc.wantVerbs)
			}
			if len(sas.Actions) == 1 {
				if got, ok := sas.Actions[0].Obj.(*corev1.ServiceAccount); !ok || got.GetKind() != "ServiceAccount" || got.GetApiVersion() != "v1" {
					t.Errorf("created %v", got)
				}
			}
		})
	}
}

// swapClient hands the controller the client of the case being run.
type swapClient struct {
	c *fakeapi.Client[*corev1.ServiceAccount]
}

func (s *swapClient) Create(ctx context.Context, obj *corev1.ServiceAccount) (*corev1.ServiceAccount, error) {
	return s.c.Create(ctx, obj)
}
