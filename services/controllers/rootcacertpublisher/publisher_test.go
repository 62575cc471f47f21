// This file holds the publisher's reconcile tests over fixed informer
// caches: which namespaces get kube-root-ca.crt created or put back.
package rootcacertpublisher

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/fakeapi"
)

const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

func TestReconcile(t *testing.T) {
	ns := func(name, phase string, deleting bool) *corev1.Namespace {
		n := &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: name}, Status: &corev1.NamespaceStatus{Phase: phase}}
		if deleting {
			n.Metadata.DeletionTimestamp = timestamppb.Now()
		}
		return n
	}
	cm := func(ns, data, desc string) *corev1.ConfigMap {
		return &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: ConfigMapName, Annotations: map[string]string{DescriptionAnnotation: desc}},
			Data: map[string]string{Key: data}}
	}
	nsInf := fakeapi.Informer([]*corev1.Namespace{
		ns("fresh", "Active", false), ns("good", "Active", false), ns("stale", "Active", false), ns("bare", "Active", false), ns("ending", "Terminating", true),
	}, client.InformerOptions[*corev1.Namespace]{})
	cmInf := fakeapi.Informer([]*corev1.ConfigMap{
		cm("good", ca, Description), cm("stale", "old", Description), cm("bare", ca, ""),
	}, client.InformerOptions[*corev1.ConfigMap]{})
	sw := &swapClient{}
	c := New(Config{ConfigMaps: sw, NamespaceInformer: nsInf, ConfigMapInformer: cmInf, RootCA: []byte(ca)})
	t.Cleanup(c.queue.ShutDown) // New starts the queue; only Run would stop it
	fakeapi.Start(t, nsInf, cmInf)

	for _, tc := range []struct {
		ns        string
		wantVerbs []string
	}{
		{ns: "fresh", wantVerbs: []string{"create fresh/kube-root-ca.crt"}},
		{ns: "good"},
		{ns: "stale", wantVerbs: []string{"update stale/kube-root-ca.crt"}},
		{ns: "bare", wantVerbs: []string{"update bare/kube-root-ca.crt"}},
		{ns: "ending"},
		{ns: "gone"},
	} {
		t.Run(tc.ns, func(t *testing.T) {
			cms := &fakeapi.Client[*corev1.ConfigMap]{}
			sw.c = cms
			if _, err := c.Reconcile(t.Context(), tc.ns); err != nil {
				t.Fatal(err)
			}
			if got := cms.Verbs(); !slices.Equal(got, tc.wantVerbs) {
				t.Fatalf("writes: got %v, want %v", got, tc.wantVerbs)
			}
			if len(cms.Actions) == 1 {
				got := cms.Actions[0].Obj.(*corev1.ConfigMap)
				if got.GetData()[Key] != ca || len(got.GetData()) != 1 || got.GetMetadata().GetAnnotations()[DescriptionAnnotation] != Description {
					t.Errorf("wrote %v", got)
				}
			}
		})
	}
}

// swapClient hands the controller the client of the case being run.
type swapClient struct {
	c *fakeapi.Client[*corev1.ConfigMap]
}

func (s *swapClient) Create(ctx context.Context, obj *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	return s.c.Create(ctx, obj)
}

func (s *swapClient) Update(ctx context.Context, obj *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	return s.c.Update(ctx, obj)
}
