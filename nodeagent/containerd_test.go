// This file holds the test of a pod on a real containerd: it runs, its
// readiness probe passes, kubectl logs reads it, and deleting the pod stops
// it.

package nodeagent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/internal/containerdtest"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

// TestContainerd runs a pod with the hello HTTP server on a real
// containerd: it really runs, its httpGet readiness probe passes, its
// httpGet postStart and preStop hooks reach a server at a named port, its log
// reaches `kubectl logs` (through the gateway, the API service's pods/log
// and the log server over HTTPS), and deleting the pod stops the
// container (the process is gone). Root and containerd are needed (skipped
// otherwise; failed under CI=true).
func TestContainerd(t *testing.T) {
	testutil.RequireRoot(t, "a real containerd runs as root")
	for _, b := range containerdtest.Binaries {
		testutil.RequireBinary(t, b, containerdtest.InstallHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	env, err := containerdtest.Start(ctx, containerdtest.Options{Logger: log})
	if err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Errorf("containerd clean-up: %v", err)
		}
	})

	c := startCluster(t)
	dir := shortDir(t)
	rc, err := cri.New(cri.Config{Socket: env.Socket})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{
		NodeName:       "real",
		Conn:           c.env.DialCert(t, "system:node:real", "system:nodes"),
		Runtime:        rc,
		Capacity:       map[string]string{"cpu": "2", "memory": "4Gi", "pods": "10"},
		LogDir:         filepath.Join(dir, "logs"),
		LogPort:        int32(hl.Addr().(*net.TCPAddr).Port),
		StatusInterval: time.Second,
		RelistInterval: 200 * time.Millisecond,
		Backoff:        testBackoff,
		CgroupParent:   env.CgroupParent,
		HostNetwork:    true,
		Logger:         slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The log server as `kplane nodeagent` serves it: HTTPS, only for the
	// API service's kubelet client certificate.
	ca := c.env.CA()
	srv := &http.Server{Handler: NewLogServer(a).RequireClientCert(apiservertest.KubeletClientUser)}
	go srv.Serve(tls.NewListener(hl, LogServerTLS(ca.Issue(t, "kplane-nodeagent", nil, true), ca.Pool)))
	actx, acancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	// Stop the agent before containerd's clean-up (registered earlier, so run later).
	t.Cleanup(func() {
		acancel()
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	})

	port := testutil.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// The httpGet hooks' server: it records what reaches it.
	var hookMu sync.Mutex
	var hookGets []string
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hookMu.Lock()
		hookGets = append(hookGets, r.URL.RequestURI()+" "+r.UserAgent())
		hookMu.Unlock()
	}))
	defer hooks.Close()
	hookPort := hooks.Listener.Addr().(*net.TCPAddr).Port
	hookGot := func(want string) (bool, []string) {
		hookMu.Lock()
		defer hookMu.Unlock()
		return slices.Contains(hookGets, want+" "+hookUserAgent), slices.Clone(hookGets)
	}
	httpHook := func(path string) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{HttpGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Path: path,
			Port: &metav1.IntOrString{Value: &metav1.IntOrString_StrVal{StrVal: "hooks"}}}}
	}
	pod := &corev1.Pod{
		Metadata: &metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: &corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(10)),
			Containers: []*corev1.Container{{
				Name:  "hello",
				Image: containerdtest.HelloImage,
				Env:   []*corev1.EnvVar{{Name: containerdtest.HelloAddrEnv, Value: addr}},
				Ports: []*corev1.ContainerPort{{Name: "hooks", ContainerPort: int32(hookPort)}},
				Lifecycle: &corev1.Lifecycle{
					PostStart: httpHook("/echo?msg=poststart"),
					PreStop:   httpHook("/echo?msg=prestop"),
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  &corev1.ProbeHandler{HttpGet: &corev1.HTTPGetAction{Path: "/", Port: &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: int32(port)}}}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	p := c.runPod(t, pod, "real")
	got := waitReady(t, c, p, true)
	if got.GetStatus().GetPhase() != PhaseRunning {
		t.Errorf("phase: got %s, want Running", got.GetStatus().GetPhase())
	}
	cs := got.GetStatus().GetContainerStatuses()[0]
	if !strings.HasPrefix(cs.GetContainerId(), "containerd://") || cs.GetImageId() == "" {
		t.Errorf("container status: got id %q image %q, want a containerd:// ID and an image ID", cs.GetContainerId(), cs.GetImageId())
	}

	// Its postStart httpGet hook reached its server, at the port named
	// in the container's ports, before the container showed Running.
	if ok, got := hookGot("/echo?msg=poststart"); !ok {
		t.Errorf("postStart hook: got requests %q, want GET /echo?msg=poststart", got)
	}

	// It really serves.
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("the hello server does not answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "hello from kplane") {
		t.Errorf("hello answer: got %q", b)
	}

	// Its log reaches `kubectl logs`: kubectl → gateway → the API
	// service's pods/log → the log server → containerd's CRI log file.
	k := kubectltest.Start(t, c.env.Dial(t, ""), apiservertest.AdminToken)
	var out string
	for range 50 {
		if out, err = k.Run(ctx, "logs", "hello"); err == nil && strings.Contains(out, "hello: listening on") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(out, "hello: listening on "+addr) {
		t.Errorf("kubectl logs hello: got %q, %v; want the listening line", out, err)
	}

	// Deletion stops the container: the process is gone.
	id := strings.TrimPrefix(cs.GetContainerId(), "containerd://")
	pid := containerPID(ctx, t, rc, id)
	if err := c.pods.Delete(ctx, "default", "hello", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := c.pods.Get(ctx, "default", "hello")
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pod not deleted in 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := processGone(ctx, pid); err != nil {
		t.Error(err)
	}
	if ok, got := hookGot("/echo?msg=prestop"); !ok {
		t.Errorf("preStop hook: got requests %q, want GET /echo?msg=prestop", got)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("the hello server still answers after deletion")
	}
	sbs, err := rc.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 0 {
		t.Errorf("sandboxes left: got %d, want 0", len(sbs))
	}
}

func ptr[T any](v T) *T { return &v }

// containerPID reads a container's process ID from containerd's verbose status.
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
	return fmt.Errorf("process %d still exists after the pod was deleted", pid)
}
