// Package simruntimetest serves a built-in runtime over CRI for tests.
package simruntimetest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kplane/kplane/nodeagent/simruntime"
)

// Serve serves rt on a Unix socket until the test ends and returns the
// socket's path. The socket lives in a new directory under os.TempDir, not
// t.TempDir: a Unix socket's path must stay under about 108 bytes. Cleanups
// run last in, first out, so whatever the test starts on the socket after
// this call stops before the runtime does.
func Serve(t testing.TB, rt *simruntime.Runtime) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "simrt")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "cri.sock")
	lis, err := simruntime.Listen(sock)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.ServeListener(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("simruntime: serve: %v", err)
		}
		// Stops the streaming server, if an Exec, Attach or PortForward
		// started one.
		if err := rt.Close(); err != nil {
			t.Errorf("simruntime: close: %v", err)
		}
		os.RemoveAll(dir)
	})
	return sock
}
