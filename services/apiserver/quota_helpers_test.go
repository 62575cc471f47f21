// This file holds helpers the quota, limit range and priority tests share.
package apiserver

import (
	"context"
	"testing"
	"time"
)

// waitCached waits until the watch cache of resource holds ns/name: the
// admission plugins read classes, limit ranges and quotas from it, as
// Kubernetes' read theirs from informers.
func waitCached(t *testing.T, e *env, resource, ns, name string) {
	t.Helper()
	r := e.srv.resources[resource]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rev, err := e.srv.store.lastModRevision(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.cachers[resource].waitFor(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if e.srv.cachedCopy(r, ns, name) == nil {
		t.Fatalf("%s %s/%s is not in the watch cache at revision %d", resource, ns, name, rev)
	}
}
