// This file holds the tests of the built-in runtime's CRI calls: containers,
// exec and images following their rules, sandboxes, pod addresses, logs,
// version and status, and the calls it does not implement.

package simruntime_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/crilog"
	"github.com/kplane/kplane/nodeagent/simruntime"
	"github.com/kplane/kplane/nodeagent/simruntime/simruntimetest"
)

var epoch = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// env is a running simulated runtime behind a real gRPC socket.
type env struct {
	client *cri.Client
	clock  *testclock.FakeClock
	logDir string
}

// start serves a runtime with a fake clock on a unix socket until the test
// ends.
func start(t *testing.T, cfg simruntime.Config) *env {
	t.Helper()
	dir, err := os.MkdirTemp("", "simrt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	clk := testclock.NewFakeClock(epoch)
	if cfg.Clock == nil {
		cfg.Clock = clk
	}
	rt, err := simruntime.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c, err := cri.New(cri.Config{Socket: simruntimetest.Serve(t, rt), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := c.WaitReady(wctx, 20*time.Millisecond); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	return &env{client: c, clock: clk, logDir: filepath.Join(dir, "logs")}
}

func sandboxConfig(e *env, name string, attempt uint32) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: "uid-" + name, Attempt: attempt},
		LogDirectory: filepath.Join(e.logDir, "default_"+name),
		Labels:       map[string]string{"io.kubernetes.pod.name": name},
	}
}

func envs(m map[string]string) []*runtimeapi.KeyValue {
	var out []*runtimeapi.KeyValue
	for k, v := range m {
		out = append(out, &runtimeapi.KeyValue{Key: k, Value: v})
	}
	return out
}

// runContainer pulls image, runs a sandbox and starts one container with
// the given environment; it returns the container's ID.
func runContainer(t *testing.T, e *env, name string, envm map[string]string) string {
	t.Helper()
	ctx := context.Background()
	const image = "example.com/app:1"
	if _, err := e.client.PullImage(ctx, image, nil, nil); err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	sbCfg := sandboxConfig(e, name, 0)
	sb, err := e.client.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	id, err := e.client.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Envs:     envs(envm),
		LogPath:  "app/0.log",
	}, sbCfg)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if err := e.client.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return id
}

func TestContainerRules(t *testing.T) {
	tests := []struct {
		name         string
		env          map[string]string
		advance      time.Duration
		wantState    runtimeapi.ContainerState
		wantExitCode int32
		wantReason   string
		wantRanFor   time.Duration // finishedAt - startedAt, when exited
	}{
		{name: "no rule runs until stopped", advance: 24 * time.Hour,
			wantState: runtimeapi.ContainerState_CONTAINER_RUNNING},
		{name: "run seconds not yet over", env: map[string]string{simruntime.EnvRunSeconds: "2"}, advance: 1999 * time.Millisecond,
			wantState: runtimeapi.ContainerState_CONTAINER_RUNNING},
		{name: "run seconds over exits zero", env: map[string]string{simruntime.EnvRunSeconds: "2"}, advance: 2 * time.Second,
			wantState: runtimeapi.ContainerState_CONTAINER_EXITED, wantReason: "Completed", wantRanFor: 2 * time.Second},
		{name: "exit code alone exits at once", env: map[string]string{simruntime.EnvExitCode: "3"},
			wantState: runtimeapi.ContainerState_CONTAINER_EXITED, wantExitCode: 3, wantReason: "Error"},
		{name: "exit code after run seconds", env: map[string]string{simruntime.EnvExitCode: "1", simruntime.EnvRunSeconds: "0.5"}, advance: time.Minute,
			wantState: runtimeapi.ContainerState_CONTAINER_EXITED, wantExitCode: 1, wantReason: "Error", wantRanFor: 500 * time.Millisecond},
		{name: "exit code zero", env: map[string]string{simruntime.EnvExitCode: "0", simruntime.EnvRunSeconds: "1"}, advance: time.Second,
			wantState: runtimeapi.ContainerState_CONTAINER_EXITED, wantReason: "Completed", wantRanFor: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, simruntime.Config{})
			id := runContainer(t, e, "pod", tt.env)
			e.clock.Step(tt.advance)
			st, err := e.client.ContainerStatus(context.Background(), id)
			if err != nil {
				t.Fatalf("ContainerStatus: %v", err)
			}
			if st.GetState() != tt.wantState {
				t.Fatalf("state: got %v, want %v", st.GetState(), tt.wantState)
			}
			if got := time.Unix(0, st.GetStartedAt()); !got.Equal(epoch) {
				t.Errorf("startedAt: got %v, want %v", got, epoch)
			}
			if tt.wantState != runtimeapi.ContainerState_CONTAINER_EXITED {
				if st.GetFinishedAt() != 0 {
					t.Errorf("finishedAt: got %d, want 0 while running", st.GetFinishedAt())
				}
				return
			}
			if st.GetExitCode() != tt.wantExitCode || st.GetReason() != tt.wantReason {
				t.Errorf("exit: got %d %q, want %d %q", st.GetExitCode(), st.GetReason(), tt.wantExitCode, tt.wantReason)
			}
			if got := time.Unix(0, st.GetFinishedAt()).Sub(epoch); got != tt.wantRanFor {
				t.Errorf("ran for: got %v, want %v", got, tt.wantRanFor)
			}
		})
	}
}

func TestInvalidRulesFailCreate(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
	}{
		{name: "exit code not a number", env: map[string]string{simruntime.EnvExitCode: "one"}},
		{name: "exit code out of range", env: map[string]string{simruntime.EnvExitCode: "256"}},
		{name: "negative run seconds", env: map[string]string{simruntime.EnvRunSeconds: "-1"}},
		{name: "ignore sigterm not a bool", env: map[string]string{simruntime.EnvIgnoreSIGTERM: "sometimes"}},
		{name: "ready after not a number", env: map[string]string{simruntime.EnvReadyAfterSeconds: "soon"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, simruntime.Config{Images: []string{"app:1"}})
			ctx := context.Background()
			sbCfg := sandboxConfig(e, "pod", 0)
			sb, err := e.client.RunPodSandbox(ctx, sbCfg, "")
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.client.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
				Image:    &runtimeapi.ImageSpec{Image: "app:1"},
				Envs:     envs(tt.env),
			}, sbCfg)
			if got := status.Code(err); got != codes.InvalidArgument {
				t.Fatalf("CreateContainer: got %v (%v), want InvalidArgument", got, err)
			}
		})
	}
}

func TestExecRules(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		advance  time.Duration
		wantExit int32
	}{
		{name: "default exec succeeds", wantExit: 0},
		{name: "exec exit code", env: map[string]string{simruntime.EnvExecExitCode: "2"}, advance: time.Hour, wantExit: 2},
		{name: "not ready yet", env: map[string]string{simruntime.EnvReadyAfterSeconds: "5"}, advance: 4 * time.Second, wantExit: 1},
		{name: "ready after", env: map[string]string{simruntime.EnvReadyAfterSeconds: "5"}, advance: 5 * time.Second, wantExit: 0},
		{name: "ready after then failing", env: map[string]string{simruntime.EnvReadyAfterSeconds: "5", simruntime.EnvExecExitCode: "7"}, advance: 6 * time.Second, wantExit: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, simruntime.Config{})
			id := runContainer(t, e, "pod", tt.env)
			e.clock.Step(tt.advance)
			resp, err := e.client.ExecSync(context.Background(), id, []string{"cat", "/tmp/healthy"}, time.Second)
			if err != nil {
				t.Fatalf("ExecSync: %v", err)
			}
			if resp.GetExitCode() != tt.wantExit {
				t.Fatalf("exit code: got %d (stderr %q), want %d", resp.GetExitCode(), resp.GetStderr(), tt.wantExit)
			}
			if tt.wantExit != 0 && len(resp.GetStderr()) == 0 {
				t.Errorf("stderr: got nothing, want an explanation")
			}
		})
	}
}

func TestExecInExitedContainerFails(t *testing.T) {
	e := start(t, simruntime.Config{})
	id := runContainer(t, e, "pod", map[string]string{simruntime.EnvExitCode: "0"})
	_, err := e.client.ExecSync(context.Background(), id, []string{"true"}, 0)
	if got := status.Code(err); got != codes.FailedPrecondition {
		t.Fatalf("ExecSync: got %v (%v), want FailedPrecondition", got, err)
	}
}

func TestImageRules(t *testing.T) {
	tests := []struct {
		name        string
		image       string
		pullLatency time.Duration
		wantWait    time.Duration // fake time the pull waits for
		wantCode    codes.Code
	}{
		{name: "plain image", image: "nginx", wantCode: codes.OK},
		{name: "notfound repository", image: "example.com/notfound/web:1", wantCode: codes.NotFound},
		{name: "notfound short name", image: "notfound", wantCode: codes.NotFound},
		{name: "configured latency", image: "web:1", pullLatency: 2 * time.Second, wantWait: 2 * time.Second, wantCode: codes.OK},
		{name: "latency from tag", image: "web:v1-pull-3s", pullLatency: time.Second, wantWait: 3 * time.Second, wantCode: codes.OK},
		{name: "latency from tag then not found", image: "notfound:pull-250ms", wantWait: 250 * time.Millisecond, wantCode: codes.NotFound},
		{name: "invalid reference", image: "bad//name:1", wantCode: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, simruntime.Config{PullLatency: tt.pullLatency})
			ctx := context.Background()
			errc := make(chan error, 1)
			go func() {
				_, err := e.client.PullImage(ctx, tt.image, nil, nil)
				errc <- err
			}()
			if tt.wantWait > 0 {
				waitForWaiter(t, e.clock)
				e.clock.Step(tt.wantWait - time.Nanosecond)
				select {
				case err := <-errc:
					t.Fatalf("pull returned before its latency: %v", err)
				case <-time.After(20 * time.Millisecond):
				}
				e.clock.Step(time.Nanosecond)
			}
			var err error
			select {
			case err = <-errc:
			case <-time.After(10 * time.Second):
				t.Fatal("pull did not return")
			}
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("PullImage: got %v (%v), want %v", got, err, tt.wantCode)
			}
			img, err := e.client.ImageStatus(ctx, tt.image)
			if tt.wantCode == codes.InvalidArgument {
				return
			}
			if err != nil {
				t.Fatalf("ImageStatus: %v", err)
			}
			if present := img != nil; present != (tt.wantCode == codes.OK) {
				t.Fatalf("image present: got %v, want %v", present, tt.wantCode == codes.OK)
			}
			if img != nil && (img.GetSize_() == 0 || len(img.GetRepoDigests()) != 1 || !strings.HasPrefix(img.GetId(), "sha256:")) {
				t.Errorf("image: got %+v, want an ID, a digest and a size", img)
			}
		})
	}
}

// waitForWaiter waits (bounded) until something waits on the fake clock.
func waitForWaiter(t *testing.T, clk *testclock.FakeClock) {
	t.Helper()
	for range 1000 {
		if clk.HasWaiters() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("nothing waits on the clock")
}

func TestImageStore(t *testing.T) {
	e := start(t, simruntime.Config{Images: []string{"registry.local/pause:1"}})
	ctx := context.Background()
	ref, err := e.client.PullImage(ctx, "nginx", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := e.client.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, im := range imgs {
		tags = append(tags, im.GetRepoTags()...)
	}
	if got, want := strings.Join(tags, ","), 2; len(imgs) != want {
		t.Fatalf("images: got %s, want %d images", got, want)
	}
	for _, name := range []string{"nginx", "docker.io/library/nginx:latest", ref} {
		im, err := e.client.ImageStatus(ctx, name)
		if err != nil || im == nil || im.GetId() != ref {
			t.Errorf("ImageStatus(%q): got %v, %v; want image %s", name, im, err, ref)
		}
	}
	if err := e.client.RemoveImage(ctx, "nginx"); err != nil {
		t.Fatal(err)
	}
	if err := e.client.RemoveImage(ctx, "nginx"); err != nil {
		t.Fatalf("second RemoveImage: got %v, want success (idempotent)", err)
	}
	if im, _ := e.client.ImageStatus(ctx, "nginx"); im != nil {
		t.Fatalf("ImageStatus after remove: got %v, want nil", im)
	}
}

func TestCreateWithoutImageFails(t *testing.T) {
	e := start(t, simruntime.Config{})
	ctx := context.Background()
	sbCfg := sandboxConfig(e, "pod", 0)
	sb, err := e.client.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.client.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: "never-pulled:1"},
	}, sbCfg)
	if !cri.IsNotFound(err) {
		t.Fatalf("CreateContainer: got %v, want NotFound", err)
	}
}

func TestStopContainer(t *testing.T) {
	tests := []struct {
		name       string
		env        map[string]string
		grace      time.Duration
		wantWait   time.Duration
		wantExit   int32
		wantRanFor time.Duration
	}{
		{name: "honours SIGTERM", grace: 30 * time.Second, wantExit: 143},
		{name: "ignores SIGTERM takes the grace period", env: map[string]string{simruntime.EnvIgnoreSIGTERM: "true"},
			grace: 30 * time.Second, wantWait: 30 * time.Second, wantExit: 137, wantRanFor: 30 * time.Second},
		{name: "ignores SIGTERM with no grace", env: map[string]string{simruntime.EnvIgnoreSIGTERM: "true"}, wantExit: 137},
		{name: "ignores SIGTERM but exits by itself first",
			env:   map[string]string{simruntime.EnvIgnoreSIGTERM: "true", simruntime.EnvRunSeconds: "10", simruntime.EnvExitCode: "4"},
			grace: 30 * time.Second, wantWait: 10 * time.Second, wantExit: 4, wantRanFor: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, simruntime.Config{})
			id := runContainer(t, e, "pod", tt.env)
			errc := make(chan error, 1)
			go func() { errc <- e.client.StopContainer(context.Background(), id, tt.grace) }()
			if tt.wantWait > 0 {
				waitForWaiter(t, e.clock)
				e.clock.Step(tt.wantWait - time.Nanosecond)
				select {
				case err := <-errc:
					t.Fatalf("stop returned before the grace period: %v", err)
				case <-time.After(20 * time.Millisecond):
				}
				e.clock.Step(time.Nanosecond)
			}
			select {
			case err := <-errc:
				if err != nil {
					t.Fatalf("StopContainer: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("StopContainer did not return")
			}
			st, err := e.client.ContainerStatus(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED || st.GetExitCode() != tt.wantExit {
				t.Fatalf("after stop: got %v exit %d, want EXITED exit %d", st.GetState(), st.GetExitCode(), tt.wantExit)
			}
			if got := time.Unix(0, st.GetFinishedAt()).Sub(epoch); got != tt.wantRanFor {
				t.Errorf("ran for: got %v, want %v", got, tt.wantRanFor)
			}
			if err := e.client.StopContainer(context.Background(), id, time.Second); err != nil {
				t.Errorf("second StopContainer: got %v, want success", err)
			}
		})
	}
}

func TestRestartIsANewContainer(t *testing.T) {
	e := start(t, simruntime.Config{Images: []string{"app:1"}})
	ctx := context.Background()
	sbCfg := sandboxConfig(e, "pod", 0)
	sb, err := e.client.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	create := func(attempt uint32) (string, error) {
		return e.client.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: attempt},
			Image:    &runtimeapi.ImageSpec{Image: "app:1"},
			Envs:     envs(map[string]string{simruntime.EnvExitCode: "1"}),
		}, sbCfg)
	}
	first, err := create(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.client.StartContainer(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := e.client.StartContainer(ctx, first); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("restarting an exited container: got %v, want FailedPrecondition", err)
	}
	if _, err := create(0); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("same attempt again: got %v, want AlreadyExists", err)
	}
	second, err := create(1)
	if err != nil {
		t.Fatalf("next attempt: %v", err)
	}
	if second == first {
		t.Fatal("next attempt reused the container ID")
	}
	list, err := e.client.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: sb})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("containers: got %d, want 2", len(list))
	}
	exited, err := e.client.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(exited) != 1 || exited[0].GetId() != first {
		t.Fatalf("exited containers: got %v, want only %s", exited, first)
	}
}

func TestSandboxes(t *testing.T) {
	e := start(t, simruntime.Config{PodCIDR: "10.244.1.0/24"})
	ctx := context.Background()
	ip := func(id string) string {
		t.Helper()
		st, err := e.client.PodSandboxStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return st.GetNetwork().GetIp()
	}
	a, err := e.client.RunPodSandbox(ctx, sandboxConfig(e, "a", 0), "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.client.RunPodSandbox(ctx, sandboxConfig(e, "b", 0), "")
	if err != nil {
		t.Fatal(err)
	}
	hostCfg := sandboxConfig(e, "host", 0)
	hostCfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
	}}
	host, err := e.client.RunPodSandbox(ctx, hostCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, id, want string }{
		{"first pod", a, "10.244.1.2"}, {"second pod", b, "10.244.1.3"}, {"host network", host, ""},
	} {
		if got := ip(c.id); got != c.want {
			t.Errorf("%s: pod IP got %q, want %q", c.name, got, c.want)
		}
	}
	if _, err := e.client.RunPodSandbox(ctx, sandboxConfig(e, "a", 0), ""); status.Code(err) != codes.AlreadyExists {
		t.Errorf("same sandbox metadata again: got %v, want AlreadyExists", err)
	}
	if err := e.client.StopPodSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
	st, err := e.client.PodSandboxStatus(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.GetNetwork().GetIp() != "" {
		t.Errorf("stopped sandbox: got %v ip %q, want NOTREADY without IP", st.GetState(), st.GetNetwork().GetIp())
	}
	ready, err := e.client.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 2 {
		t.Errorf("ready sandboxes: got %d, want 2", len(ready))
	}
	byLabel, err := e.client.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.name": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(byLabel) != 1 || byLabel[0].GetId() != b {
		t.Errorf("sandboxes labelled b: got %v, want only %s", byLabel, b)
	}
	for range 2 { // idempotent
		if err := e.client.RemovePodSandbox(ctx, a); err != nil {
			t.Fatalf("RemovePodSandbox: %v", err)
		}
		if err := e.client.StopPodSandbox(ctx, a); err != nil {
			t.Fatalf("StopPodSandbox of a removed sandbox: %v", err)
		}
	}
	if _, err := e.client.PodSandboxStatus(ctx, a); !cri.IsNotFound(err) {
		t.Errorf("status of removed sandbox: got %v, want NotFound", err)
	}
}

func TestSandboxRules(t *testing.T) {
	tests := []struct {
		name     string
		cfg      simruntime.Config
		annot    map[string]string
		podCIDR  string // given through UpdateRuntimeConfig
		wantCode codes.Code
		wantIP   string
	}{
		{name: "no pod CIDR gives no IP", wantCode: codes.OK},
		{name: "pod CIDR from UpdateRuntimeConfig", podCIDR: "10.9.0.0/16", wantCode: codes.OK, wantIP: "10.9.0.2"},
		{name: "sandbox error annotation", annot: map[string]string{simruntime.AnnotationSandboxError: "no space left on device"}, wantCode: codes.Unknown},
		{name: "smallest pod CIDR", cfg: simruntime.Config{PodCIDR: "10.0.0.0/30"}, wantCode: codes.OK, wantIP: "10.0.0.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, tt.cfg)
			ctx := context.Background()
			if tt.podCIDR != "" {
				if err := e.client.UpdatePodCIDR(ctx, tt.podCIDR); err != nil {
					t.Fatal(err)
				}
			}
			cfg := sandboxConfig(e, "pod", 0)
			cfg.Annotations = tt.annot
			id, err := e.client.RunPodSandbox(ctx, cfg, "")
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("RunPodSandbox: got %v (%v), want %v", got, err, tt.wantCode)
			}
			if err != nil {
				if msg := tt.annot[simruntime.AnnotationSandboxError]; !strings.Contains(err.Error(), msg) {
					t.Errorf("error: got %v, want it to say %q", err, msg)
				}
				return
			}
			st, err := e.client.PodSandboxStatus(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.GetNetwork().GetIp(); got != tt.wantIP {
				t.Errorf("pod IP: got %q, want %q", got, tt.wantIP)
			}
		})
	}
}

func TestPodCIDRExhausted(t *testing.T) {
	e := start(t, simruntime.Config{PodCIDR: "10.0.0.0/29"}) // .2 to .6
	ctx := context.Background()
	var got []string
	for i := range 6 {
		id, err := e.client.RunPodSandbox(ctx, sandboxConfig(e, string(rune('a'+i)), 0), "")
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted || i != 5 {
				t.Fatalf("sandbox %d: got %v, want ResourceExhausted only for the sixth", i, err)
			}
			break
		}
		st, _ := e.client.PodSandboxStatus(ctx, id)
		got = append(got, st.GetNetwork().GetIp())
		if i == 5 {
			t.Fatalf("sixth sandbox got %s, want ResourceExhausted", st.GetNetwork().GetIp())
		}
	}
	if want := "10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5,10.0.0.6"; strings.Join(got, ",") != want {
		t.Fatalf("IPs: got %v, want %s", got, want)
	}
}

func TestLogs(t *testing.T) {
	e := start(t, simruntime.Config{})
	id := runContainer(t, e, "pod", map[string]string{simruntime.EnvLog: "starting\nlistening on :8080\n"})
	st, err := e.client.ContainerStatus(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(e.logDir, "default_pod", "app/0.log"); st.GetLogPath() != want {
		t.Fatalf("log path: got %q, want %q", st.GetLogPath(), want)
	}
	raw, err := os.ReadFile(st.GetLogPath())
	if err != nil {
		t.Fatal(err)
	}
	want := "2026-11-22T12:00:00Z stdout F starting\n2026-11-22T12:00:00Z stdout F listening on :8080\n"
	if string(raw) != want {
		t.Fatalf("log file: got %q, want %q", raw, want)
	}
	var out bytes.Buffer
	if err := crilog.Read(context.Background(), st.GetLogPath(), crilog.ReadOptions{Tail: 1}, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "listening on :8080\n" {
		t.Fatalf("tail 1: got %q", out.String())
	}
	if err := e.client.ReopenContainerLog(context.Background(), id); err != nil {
		t.Errorf("ReopenContainerLog: %v", err)
	}
}

func TestVersionAndStatus(t *testing.T) {
	e := start(t, simruntime.Config{Version: "1.2.3"})
	v, err := e.client.Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.GetRuntimeName() != "kplane-sim" || v.GetRuntimeVersion() != "1.2.3" || v.GetRuntimeApiVersion() != "v1" {
		t.Fatalf("version: got %+v", v)
	}
	st, err := e.client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := cri.Ready(st); !ok {
		t.Fatalf("status: not ready: %s", why)
	}
}

func TestUnimplementedCallsSaySo(t *testing.T) {
	e := start(t, simruntime.Config{})
	_, err := e.client.Runtime().CheckpointContainer(context.Background(), &runtimeapi.CheckpointContainerRequest{ContainerId: "x"})
	if got := status.Code(err); got != codes.Unimplemented {
		t.Fatalf("CheckpointContainer: got %v, want Unimplemented", got)
	}
}

func TestRuntimesAreIndependent(t *testing.T) {
	a := start(t, simruntime.Config{Name: "node-a", Images: []string{"app:1"}})
	b := start(t, simruntime.Config{Name: "node-b"})
	ctx := context.Background()
	if _, err := a.client.RunPodSandbox(ctx, sandboxConfig(a, "pod", 0), ""); err != nil {
		t.Fatal(err)
	}
	sbs, err := b.client.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := b.client.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 0 || len(imgs) != 0 {
		t.Fatalf("runtime b: got %d sandboxes and %d images, want none", len(sbs), len(imgs))
	}
}

func TestRunNeedsASocket(t *testing.T) {
	rt, err := simruntime.New(simruntime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Run(context.Background()); err == nil {
		t.Fatal("Run without a socket: got nil, want an error")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  simruntime.Config
	}{
		{name: "bad pod CIDR", cfg: simruntime.Config{PodCIDR: "10.0.0.0/33"}},
		{name: "pod CIDR too small", cfg: simruntime.Config{PodCIDR: "10.0.0.1/32"}},
		{name: "negative pull latency", cfg: simruntime.Config{PullLatency: -time.Second}},
		{name: "bad preloaded image", cfg: simruntime.Config{Images: []string{"bad//name"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := simruntime.New(tt.cfg); err == nil {
				t.Fatal("got nil error, want one")
			}
		})
	}
}
