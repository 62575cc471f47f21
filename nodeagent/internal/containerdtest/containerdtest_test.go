// This file holds the test that closing a containerd test instance leaves
// nothing behind, even with a pod still running.

package containerdtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/nodeagent/cri"
)

// TestCloseLeavesNothing leaves a pod running and checks that Close still
// removes every trace: processes, mounts, cgroups, shim sockets, files.
func TestCloseLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t, "a real containerd runs as root")
	for _, b := range Binaries {
		testutil.RequireBinary(t, b, InstallHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e, err := Start(ctx, Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			e.Close()
		}
	}()
	c, err := cri.New(cri.Config{Socket: e.Socket})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "left-running", Namespace: "default", Uid: "u1"},
		LogDirectory: filepath.Join(e.Dir, "pods"),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: e.CgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}
	sb, err := c.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "hello"},
		Image:    &runtimeapi.ImageSpec{Image: HelloImage},
		Envs:     []*runtimeapi.KeyValue{{Key: HelloAddrEnv, Value: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}},
	}, sbCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	shimSocket := func() string {
		sum := sha256.Sum256([]byte(filepath.Join(e.Socket, "k8s.io", sb)))
		return filepath.Join(shimDir, hex.EncodeToString(sum[:]))
	}()
	if _, err := os.Stat(shimSocket); err != nil {
		t.Fatalf("shim socket of the running pod: %v", err)
	}
	var cgroups []string
	for _, root := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(root, e.CgroupParent)); err == nil {
			cgroups = append(cgroups, filepath.Join(root, e.CgroupParent))
		}
	}
	if len(cgroups) == 0 {
		t.Fatalf("no cgroup under %s for the running pod", e.CgroupParent)
	}

	closed = true
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(e.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work dir after Close: got %v, want it gone", err)
	}
	if _, err := os.Stat(shimSocket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("shim socket after Close: got %v, want it gone", err)
	}
	for _, cg := range cgroups {
		if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s after Close: got %v, want it gone", cg, err)
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), e.Dir) {
		t.Errorf("mounts under %s remain after Close", e.Dir)
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && slices.Contains(strings.Split(string(b), "\x00"), e.Socket) {
			t.Errorf("process %s still serves this containerd after Close", p.Name())
		}
	}
}
