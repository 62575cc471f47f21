// This file holds the tests that drive the CRI lifecycle of a pod through
// both runtimes, the built-in one and a real containerd, and check they
// answer alike.

package cri_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/crilog"
	"github.com/kplane/kplane/nodeagent/internal/containerdtest"
	"github.com/kplane/kplane/nodeagent/simruntime"
	"github.com/kplane/kplane/nodeagent/simruntime/simruntimetest"
)

// containerd is started at most once for the package, by the first test
// that needs it, and stopped by TestMain.
var containerd struct {
	once sync.Once
	env  *containerdtest.Env
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if containerd.env != nil {
		if err := containerd.env.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "containerd clean-up:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(testutil.CheckLeaks(code))
}

// sharedContainerd returns the package's containerd, starting it on first
// use; it skips the test (fails it under CI) when root or containerd is
// missing.
func sharedContainerd(t *testing.T) *containerdtest.Env {
	t.Helper()
	testutil.RequireRoot(t, "a real containerd runs as root")
	for _, b := range containerdtest.Binaries {
		testutil.RequireBinary(t, b, containerdtest.InstallHint)
	}
	containerd.once.Do(func() {
		var log *slog.Logger
		if testing.Verbose() {
			log = slog.New(slog.NewTextHandler(os.Stderr, nil))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		containerd.env, containerd.err = containerdtest.Start(ctx, containerdtest.Options{Logger: log})
	})
	if containerd.err != nil {
		t.Fatalf("start containerd: %v", containerd.err)
	}
	return containerd.env
}

// runtimeCase is one runtime the lifecycle runs against.
type runtimeCase struct {
	name string
	// start returns the client's configuration (the runtime's socket, or
	// the runtime itself when in process) and the cgroup parent to use.
	start func(t *testing.T) (cfg cri.Config, cgroupParent string)
	// realProcess: the container really runs, so its HTTP server answers
	// and its process can be seen to go away.
	realProcess bool
	// wantRuntimeName is what Version reports.
	wantRuntimeName string
	// wantStopExit is the exit code after a graceful stop: the hello
	// server exits 0 on SIGTERM; the simulation reports 143.
	wantStopExit int32
}

func newSimRuntime(t *testing.T) *simruntime.Runtime {
	rt, err := simruntime.New(simruntime.Config{Name: "lifecycle", Images: []string{containerdtest.HelloImage}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

var runtimes = []runtimeCase{
	{name: "simruntime", start: func(t *testing.T) (cri.Config, string) {
		return cri.Config{Socket: simruntimetest.Serve(t, newSimRuntime(t))}, ""
	}, wantRuntimeName: simruntime.RuntimeName, wantStopExit: 143},
	// The node agent's own built-in runtimes are called in process.
	{name: "simruntime-in-process", start: func(t *testing.T) (cri.Config, string) {
		return cri.Config{Server: newSimRuntime(t)}, ""
	}, wantRuntimeName: simruntime.RuntimeName, wantStopExit: 143},
	{name: "containerd", start: func(t *testing.T) (cri.Config, string) {
		e := sharedContainerd(t)
		return cri.Config{Socket: e.Socket}, e.CgroupParent
	}, realProcess: true, wantRuntimeName: "containerd", wantStopExit: 0},
}

// TestLifecycle drives one pod through the whole CRI lifecycle, the way the
// node agent will, against the built-in runtime and a real containerd.
func TestLifecycle(t *testing.T) {
	for _, rc := range runtimes {
		t.Run(rc.name, func(t *testing.T) {
			cfg, cgroupParent := rc.start(t)
			cfg.Timeout = 30 * time.Second
			c, err := cri.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			if err := c.WaitReady(ctx, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			v, err := c.Version(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if v.GetRuntimeName() != rc.wantRuntimeName || v.GetRuntimeApiVersion() != "v1" {
				t.Fatalf("version: got %s %s, want %s v1", v.GetRuntimeName(), v.GetRuntimeApiVersion(), rc.wantRuntimeName)
			}
			lifecycle(ctx, t, c, rc, cgroupParent)
		})
	}
}

func lifecycle(ctx context.Context, t *testing.T, c *cri.Client, rc runtimeCase, cgroupParent string) {
	last := time.Now()
	step := func(name string) { // timings for the reader of -v output, not asserted
		t.Logf("%-28s %v", name, time.Since(last).Round(time.Millisecond))
		last = time.Now()
	}
	logDir := t.TempDir()
	uid := fmt.Sprintf("uid-%d", time.Now().UnixNano())
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "hello", Namespace: "default", Uid: uid},
		LogDirectory: logDir,
		Labels:       map[string]string{"io.kubernetes.pod.uid": uid},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: cgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}

	// Sandbox.
	sb, err := c.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	sbRemoved := false
	defer func() {
		if !sbRemoved { // leave nothing behind on failure
			c.StopPodSandbox(context.Background(), sb)
			c.RemovePodSandbox(context.Background(), sb)
		}
	}()
	step("RunPodSandbox")
	sbSt, err := c.PodSandboxStatus(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if sbSt.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandbox state: got %v, want READY", sbSt.GetState())
	}

	// Images: the hello image is present (imported, or preloaded in the
	// simulation), so no pull is needed; a missing one fails to pull.
	img, err := c.ImageStatus(ctx, containerdtest.HelloImage)
	if err != nil {
		t.Fatal(err)
	}
	if img == nil {
		t.Fatalf("image %s: not present", containerdtest.HelloImage)
	}
	const missing = "kplane.test/notfound:1"
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = c.PullImage(pctx, missing, nil, sbCfg)
	pcancel()
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("PullImage(%s): got %v, want an error naming the image", missing, err)
	}
	step("PullImage (missing image)")
	if im, err := c.ImageStatus(ctx, missing); err != nil || im != nil {
		t.Fatalf("ImageStatus(%s) after a failed pull: got %v, %v; want absent", missing, im, err)
	}

	// Container.
	port := testutil.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := os.MkdirAll(filepath.Join(logDir, "hello"), 0o755); err != nil { // the kubelet's job
		t.Fatal(err)
	}
	ctrCfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "hello"},
		Image:    &runtimeapi.ImageSpec{Image: containerdtest.HelloImage},
		Envs: []*runtimeapi.KeyValue{
			{Key: containerdtest.HelloAddrEnv, Value: addr},
			// The simulation's stand-in for what hello prints.
			{Key: simruntime.EnvLog, Value: "hello: listening on " + addr},
		},
		LogPath: "hello/0.log",
		Labels:  map[string]string{"io.kubernetes.container.name": "hello"},
	}
	id, err := c.CreateContainer(ctx, sb, ctrCfg, sbCfg)
	if err != nil {
		t.Fatal(err)
	}
	step("CreateContainer")
	st, err := c.ContainerStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Fatalf("after create: got %v, want CREATED", st.GetState())
	}
	if err := c.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}

	step("StartContainer")
	var pid int
	if rc.realProcess {
		body, err := httpGet(ctx, "http://"+addr+"/")
		if err != nil {
			t.Fatalf("hello server: %v", err)
		}
		if body != "hello from kplane\n" {
			t.Fatalf("hello server: got %q, want %q", body, "hello from kplane\n")
		}
		pid = containerPID(ctx, t, c, id)
	}
	step("running checked")
	probe, err := c.ExecSync(ctx, id, containerdtest.HelloProbe, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if probe.GetExitCode() != 0 {
		t.Fatalf("exec probe: got exit %d (stderr %q), want 0", probe.GetExitCode(), probe.GetStderr())
	}
	step("ExecSync probe")
	st, err = c.ContainerStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING || st.GetStartedAt() == 0 {
		t.Fatalf("after start: got %v startedAt %d, want RUNNING with a start time", st.GetState(), st.GetStartedAt())
	}
	if st.GetImageRef() == "" {
		t.Errorf("imageRef: got empty, want the image's reference")
	}
	list, err := c.ListContainers(ctx, &runtimeapi.ContainerFilter{
		PodSandboxId: sb,
		State:        &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].GetId() != id {
		t.Fatalf("running containers in the sandbox: got %d, want exactly %s", len(list), id)
	}

	// Logs in the CRI format.
	logPath := filepath.Join(logDir, "hello", "0.log")
	if st.GetLogPath() != logPath {
		t.Errorf("log path: got %q, want %q", st.GetLogPath(), logPath)
	}
	want := "hello: listening on " + addr + "\n"
	if got := readLog(ctx, t, logPath, want); got != want {
		t.Fatalf("log: got %q, want %q", got, want)
	}

	// Stop with a grace period: the process goes away.
	if err := c.StopContainer(ctx, id, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	step("StopContainer")
	st, err = c.ContainerStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED || st.GetExitCode() != rc.wantStopExit {
		t.Fatalf("after stop: got %v exit %d, want EXITED exit %d", st.GetState(), st.GetExitCode(), rc.wantStopExit)
	}
	if st.GetFinishedAt() < st.GetStartedAt() {
		t.Errorf("finishedAt %d before startedAt %d", st.GetFinishedAt(), st.GetStartedAt())
	}
	if rc.realProcess {
		if err := processGone(ctx, pid); err != nil {
			t.Fatal(err)
		}
		if resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
			t.Fatal("hello server still answers after StopContainer")
		}
	}

	// Remove.
	if err := c.RemoveContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	step("RemoveContainer")
	if _, err := c.ContainerStatus(ctx, id); !cri.IsNotFound(err) {
		t.Fatalf("status of removed container: got %v, want NotFound", err)
	}
	if err := c.StopPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	step("StopPodSandbox")
	sbSt, err = c.PodSandboxStatus(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if sbSt.GetState() != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("stopped sandbox: got %v, want NOTREADY", sbSt.GetState())
	}
	if err := c.RemovePodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	sbRemoved = true
	step("RemovePodSandbox")
	if _, err := c.PodSandboxStatus(ctx, sb); !cri.IsNotFound(err) {
		t.Fatalf("status of removed sandbox: got %v, want NotFound", err)
	}
}

// httpGet polls url until it answers (bounded by 10s and ctx).
func httpGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	var last error
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(b), err
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("GET %s: %w", url, last)
}

// containerPID reads the container's process ID from containerd's verbose
// status.
func containerPID(ctx context.Context, t *testing.T, c *cri.Client, id string) int {
	t.Helper()
	resp, err := c.Runtime().ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		t.Fatalf("container pid from verbose status: got %d (%v)", info.Pid, err)
	}
	return info.Pid
}

// processGone waits (bounded) until pid no longer exists or is a zombie.
func processGone(ctx context.Context, pid int) error {
	for range 100 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err == nil {
			if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("process %d still exists after StopContainer", pid)
}

// readLog reads the log file until it holds want (a real process writes
// it asynchronously), bounded by 10s.
func readLog(ctx context.Context, t *testing.T, path, want string) string {
	t.Helper()
	var got string
	for range 200 {
		var b strings.Builder
		if err := crilog.Read(ctx, path, crilog.ReadOptions{Stream: crilog.Stdout}, &b); err == nil {
			got = b.String()
			if got == want {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	raw, _ := os.ReadFile(path)
	for _, line := range strings.SplitAfter(string(raw), "\n") {
		if line == "" {
			continue
		}
		if _, err := crilog.Parse([]byte(line)); err != nil {
			t.Errorf("log line %q is not in the CRI format: %v", line, err)
		}
	}
	return got
}

// TestContainerExits runs a container that exits by itself (the hello
// image told to exit, the simulation told by its rules) and checks both
// runtimes report it the same way.
func TestContainerExits(t *testing.T) {
	tests := []struct {
		name       string
		exitCode   int32
		wantReason string
	}{
		{name: "exits non-zero", exitCode: 3, wantReason: "Error"},
		{name: "exits zero", exitCode: 0, wantReason: "Completed"},
	}
	for _, rc := range runtimes {
		t.Run(rc.name, func(t *testing.T) {
			cfg, cgroupParent := rc.start(t)
			cfg.Timeout = 30 * time.Second
			c, err := cri.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					logDir := t.TempDir()
					uid := fmt.Sprintf("uid-%d", time.Now().UnixNano())
					sbCfg := &runtimeapi.PodSandboxConfig{
						Metadata:     &runtimeapi.PodSandboxMetadata{Name: "exits", Namespace: "default", Uid: uid},
						LogDirectory: logDir,
						Linux: &runtimeapi.LinuxPodSandboxConfig{
							CgroupParent: cgroupParent,
							SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
								NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
							},
						},
					}
					sb, err := c.RunPodSandbox(ctx, sbCfg, "")
					if err != nil {
						t.Fatal(err)
					}
					defer func() {
						c.StopPodSandbox(context.Background(), sb)
						c.RemovePodSandbox(context.Background(), sb)
					}()
					if err := os.MkdirAll(filepath.Join(logDir, "hello"), 0o755); err != nil {
						t.Fatal(err)
					}
					code := fmt.Sprint(tt.exitCode)
					line := "hello: exiting with " + code + " as told"
					// runOnce creates, starts and waits for one instance;
					// a restart is a new container with the next attempt.
					runOnce := func(attempt uint32) string {
						logPath := fmt.Sprintf("hello/%d.log", attempt)
						id, err := c.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
							Metadata: &runtimeapi.ContainerMetadata{Name: "hello", Attempt: attempt},
							Image:    &runtimeapi.ImageSpec{Image: containerdtest.HelloImage},
							Envs: []*runtimeapi.KeyValue{
								{Key: containerdtest.HelloExitCodeEnv, Value: code},
								{Key: simruntime.EnvExitCode, Value: code},
								{Key: simruntime.EnvLog, Value: line},
							},
							LogPath: logPath,
						}, sbCfg)
						if err != nil {
							t.Fatal(err)
						}
						if err := c.StartContainer(ctx, id); err != nil {
							t.Fatal(err)
						}
						var st *runtimeapi.ContainerStatus
						for range 200 {
							if st, err = c.ContainerStatus(ctx, id); err != nil {
								t.Fatal(err)
							}
							if st.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
								break
							}
							time.Sleep(50 * time.Millisecond)
						}
						if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
							t.Fatalf("attempt %d: state: got %v, want EXITED", attempt, st.GetState())
						}
						if st.GetExitCode() != tt.exitCode || st.GetReason() != tt.wantReason {
							t.Errorf("attempt %d: exit: got %d %q, want %d %q", attempt, st.GetExitCode(), st.GetReason(), tt.exitCode, tt.wantReason)
						}
						// Both times are set. containerd may report a finish a
						// little before the start for a process that exits at
						// once (it stamps the start after the task started), so
						// their order is not checked: the node agent must not
						// rely on it either.
						if st.GetStartedAt() == 0 || st.GetFinishedAt() == 0 {
							t.Errorf("attempt %d: times: started %d finished %d, want both set", attempt, st.GetStartedAt(), st.GetFinishedAt())
						}
						if got := readLog(ctx, t, filepath.Join(logDir, logPath), line+"\n"); got != line+"\n" {
							t.Errorf("attempt %d: log: got %q, want %q", attempt, got, line+"\n")
						}
						return id
					}
					first := runOnce(0)
					if _, err := c.ExecSync(ctx, first, containerdtest.HelloProbe, time.Second); err == nil {
						t.Errorf("exec in an exited container: got success, want an error")
					}
					second := runOnce(1)
					if second == first {
						t.Fatal("the restart reused the container ID")
					}
					list, err := c.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: sb})
					if err != nil {
						t.Fatal(err)
					}
					if len(list) != 2 {
						t.Errorf("containers in the sandbox after a restart: got %d, want 2", len(list))
					}
				})
			}
		})
	}
}
