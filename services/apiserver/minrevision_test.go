// This file holds the tests of reads a front proxy asks to reflect its
// caller's latest write (identity.MinRevisionKey): served from the store when
// the replica's watch cache has not reached that revision yet.
package apiserver

import (
	"strconv"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/kplane/kplane/proto/identity"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

func TestMinRevisionReads(t *testing.T) {
	a := newEnv(t, nil)
	b := newEnvOn(t, a.eps, nil)
	cm, err := a.cms.CreateConfigMap(admin(t), &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: &corev1.ConfigMap{Metadata: om("default", "fresh"), Data: map[string]string{"v": "1"}}})
	if err != nil {
		t.Fatal(err)
	}
	waitCached(t, b, "configmaps", "default", "fresh")
	// b's cache as it stood before the write.
	rev, _ := parseRV(cm.GetConfigMap().GetMetadata().GetResourceVersion())
	ch := b.srv.cachers["configmaps"]
	ch.mu.Lock()
	delete(ch.state, b.srv.store.key(b.srv.resources["configmaps"], "default", "fresh"))
	ch.rev = rev - 1
	ch.mu.Unlock()

	// Without the hint, resourceVersion "0" may answer from the lagging
	// cache, as in Kubernetes.
	if _, err := b.cms.GetConfigMap(admin(t), &corev1.GetConfigMapRequest{Namespace: "default", Name: "fresh", ResourceVersion: "0"}); err == nil {
		t.Fatal("the set-back cache answered with the configmap: the test does not lag it")
	}
	hinted := metadata.AppendToOutgoingContext(admin(t), identity.MinRevisionKey, strconv.FormatInt(rev, 10))
	got, err := b.cms.GetConfigMap(hinted, &corev1.GetConfigMapRequest{Namespace: "default", Name: "fresh", ResourceVersion: "0"})
	if err != nil {
		t.Fatalf("get with the caller's last write: %v", err)
	}
	if got.GetConfigMap().GetData()["v"] != "1" {
		t.Errorf("got data %v", got.GetConfigMap().GetData())
	}
	l, err := b.cms.ListConfigMaps(hinted, &corev1.ListConfigMapsRequest{Namespace: "default", ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range l.GetList().GetItems() {
		found = found || it.GetMetadata().GetName() == "fresh"
	}
	if !found {
		t.Errorf("list with the caller's last write misses it")
	}
	if lrv, _ := parseRV(l.GetList().GetMetadata().GetResourceVersion()); lrv < rev {
		t.Errorf("list at revision %d, before the write at %d", lrv, rev)
	}
}
