// This file holds the cluster pieces the kubectl tests share: the
// controllers and the scheduler on an in-process API service, a simulated
// node (a node agent on the built-in runtime) for their pods, and a kubectl
// runner, each for as long as the test runs.
package kubectltest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/nodeagent"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/simruntime"
	"github.com/kplane/kplane/nodeagent/simruntime/simruntimetest"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/controllers"
	"github.com/kplane/kplane/services/scheduler"
)

// startControlPlane runs, until the test ends, the controllers named (as
// the admin) and, when withScheduler, the scheduler (as itself) against
// env; it returns the admin's connection.
func startControlPlane(t *testing.T, env *apiservertest.Env, withScheduler bool, which ...string) *grpc.ClientConn {
	t.Helper()
	admin := env.Dial(t, apiservertest.AdminToken)
	m, err := controllers.New(controllers.Config{Conn: admin, Controllers: which, LocalVolumeDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	runs := []func(context.Context) error{m.Run}
	if withScheduler {
		s, err := scheduler.New(scheduler.Config{Conn: env.Dial(t, apiservertest.SchedulerToken)})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, s.Run)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, len(runs))
	for _, run := range runs {
		go func() { _ = run(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		for range runs {
			<-done
		}
	})
	return admin
}

// kubectlRunner runs k with stdin, each call bounded by timeout, and
// returns what it printed (stdout and stderr together).
func kubectlRunner(k *kubectltest.Kubectl, timeout time.Duration) func(stdin string, args ...string) (string, error) {
	return func(stdin string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := k.Command(ctx, args...)
		cmd.Stdin = strings.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
}

// startSimNode runs a node agent for node name on the built-in runtime
// until the test ends; images, when given, are the images its runtime
// holds already.
func startSimNode(t *testing.T, env *apiservertest.Env, name string, images ...string) {
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
		RootDir:        filepath.Join(dir, "root"),
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
