// This file holds the test of kplane up without its scheduler, controller
// manager and node agent (negative counts), the shape scripts/components.sh
// starts so that Kubernetes' own kube-scheduler, kube-controller-manager or
// KWOK can stand in.

package localcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/localcluster"
)

// With negative counts, Up starts no scheduler, no controller manager and no
// node agent, and is up (kubeconfig written) without waiting for any node.
func TestUpWithoutSchedulerControllersNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kplane up")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cp, err := localcluster.Up(ctx, localcluster.UpConfig{Binary: kplaneBin, DataDir: dir,
		StoreMembers: 1, APIServers: 1, Schedulers: -1, ControllerManagers: -1, Nodes: -1})
	if err != nil {
		t.Fatalf("kplane up: %v", err)
	}
	t.Cleanup(cp.Stop)
	st, err := localcluster.GetStatus(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		got  int
		want int
	}{
		{name: "store members", got: len(st.Store), want: 1},
		{name: "API services", got: len(st.APIServer), want: 1},
		{name: "gateways", got: len(st.Gateway), want: 1},
		{name: "schedulers", got: len(st.Scheduler), want: 0},
		{name: "controller managers", got: len(st.Controllers), want: 0},
		{name: "node agents", got: len(st.NodeAgent), want: 0},
		{name: "nodes", got: len(st.Nodes), want: 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, c.got, c.want)
		}
	}
}
