// This file holds the test of the API service on a store that loses its
// quorum and gets it back.

package apiserver

import (
	"context"
	"testing"
	"time"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/internal/storetest"
)

// TestQuorumLoss: with 2 of 3 kplane store members stopped, a write fails
// with a server error (the service answers; the caller is not left to its
// own deadline), lists from the watch cache keep answering, and once a
// member is back writes succeed again and nothing written before is lost.
func TestQuorumLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member store")
	}
	cl := storetest.StartCluster(t, 3)
	e := newEnvOn(t, cl.Endpoints(), nil)
	ctx := admin(t)
	before, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("before", nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.cachers["configmaps"].waitFor(ctx, rvOf(before.GetConfigMap())); err != nil {
		t.Fatal(err)
	}

	cl.Stop(0)
	cl.Stop(1)
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	_, err = e.cms.CreateConfigMap(wctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("during", nil)})
	clientGaveUp := wctx.Err() != nil
	cancel()
	se := apierrors.FromError(err)
	switch {
	case err == nil:
		t.Fatal("a write without a quorum succeeded")
	case clientGaveUp:
		t.Fatalf("a write without a quorum hung until the client's deadline: %v", err)
	case se.Code < 500:
		t.Fatalf("a write without a quorum: got %d %s %q, want a 5xx Status", se.Code, se.Reason, se.Message)
	}
	t.Logf("write without a quorum: %d %s: %s", se.Code, se.Reason, se.Message)

	l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default", ResourceVersion: "0"})
	if err != nil || len(l.GetList().GetItems()) != 1 {
		t.Fatalf("a cached list without a quorum: %v, %d items, want the one configmap", err, len(l.GetList().GetItems()))
	}

	cl.Start(1)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := e.cms.CreateConfigMap(cctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("after", nil)})
		cancel()
		if err == nil || apierrors.IsAlreadyExists(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes did not recover within 60 s of a member's return: %v", err)
		}
	}
	got, err := e.cms.GetConfigMap(ctx, &corev1.GetConfigMapRequest{Namespace: "default", Name: "before"})
	if err != nil || got.GetConfigMap().GetMetadata().GetUid() != before.GetConfigMap().GetMetadata().GetUid() {
		t.Fatalf("the configmap written before the loss: %v %v", got, err)
	}
}
