// This file holds the simulated node the kubectl tests run their pods on: a
// node agent on the built-in runtime, for as long as the test runs.
package kubectltest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kplane/kplane/nodeagent"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/simruntime"
	"github.com/kplane/kplane/nodeagent/simruntime/simruntimetest"
	"github.com/kplane/kplane/services/client/clienttest"
)

// startSimNode runs a node agent for node name on the built-in runtime
// until the test ends; images, when given, are the images its runtime
// holds already.
func startSimNode(t *testing.T, env *clienttest.Env, name string, images ...string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "simnode")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt, err := simruntime.New(simruntime.Config{Name: name, Images: images})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cri.New(cri.Config{Socket: simruntimetest.Serve(t, rt)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := nodeagent.New(nodeagent.Config{
		NodeName:       name,
		Conn:           env.DialCert(t, "system:node:"+name, "system:nodes"),
		Runtime:        rc,
		Capacity:       map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"},
		LogDir:         filepath.Join(dir, "logs"),
		StatusInterval: time.Second,
		RelistInterval: 100 * time.Millisecond,
		Backoff:        nodeagent.Backoff{Base: 200 * time.Millisecond, Max: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent %s: %v", name, err)
		}
		rc.Close()
	})
}
