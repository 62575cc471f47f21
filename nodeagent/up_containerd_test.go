// This file holds the test of a whole `kplane up` with its node agent on a
// real containerd: a pod is scheduled, really runs, and answers.

package nodeagent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/nodeagent/internal/containerdtest"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// TestUpContainerd runs the whole `kplane up` control plane (separate
// processes, mTLS) with its node agent on a real containerd (what `kplane
// up --runtime containerd --cri-socket PATH` starts): a pod created without
// a node is scheduled to node-1, really runs, and its server answers. Root
// and containerd are needed (skipped otherwise; failed under CI=true).
func TestUpContainerd(t *testing.T) {
	testutil.RequireRoot(t, "a real containerd runs as root")
	for _, b := range containerdtest.Binaries {
		testutil.RequireBinary(t, b, containerdtest.InstallHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cp := upOnContainerd(ctx, t)
	conn, err := cp.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pods := client.Must[*corev1.Pod](conn)

	port := testutil.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	grace := int64(5)
	if _, err := pods.Create(ctx, &corev1.Pod{
		Metadata: &metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: &corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []*corev1.Container{{
				Name:  "hello",
				Image: containerdtest.HelloImage,
				Env:   []*corev1.EnvVar{{Name: containerdtest.HelloAddrEnv, Value: addr}},
			}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	var p *corev1.Pod
	for deadline := time.Now().Add(2 * time.Minute); ; {
		p, err = pods.Get(ctx, "default", "hello")
		if err == nil && p.GetStatus().GetPhase() == "Running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod not Running within 2 minutes: %v %v", err, p.GetStatus())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if got := p.GetSpec().GetNodeName(); got != "node-1" {
		t.Errorf("pod on node %q, want node-1", got)
	}
	if id := p.GetStatus().GetContainerStatuses()[0].GetContainerId(); !strings.HasPrefix(id, "containerd://") {
		t.Errorf("container ID %q, want a containerd:// one", id)
	}
	var body []byte
	for range 50 {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(string(body), "hello from kplane") {
		t.Errorf("the pod's hello server: got %q, want its greeting", body)
	}
	if err := pods.Delete(ctx, "default", "hello", client.DeleteOptions{}); err != nil {
		t.Errorf("delete pod: %v", err)
	}
}

// upOnContainerd starts a containerd for the test (with a loopback-only CNI
// network) and `kplane up --runtime containerd` on it, both stopped when the
// test ends (kplane first); the node agent's log is shown if the test
// failed.
func upOnContainerd(ctx context.Context, t *testing.T) *localcluster.ControlPlane {
	t.Helper()
	env, err := containerdtest.Start(ctx, containerdtest.Options{})
	if err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Errorf("containerd clean-up: %v", err)
		}
	})

	// A node is Ready only when the runtime reports NetworkReady, which
	// containerd does once its CNI directory holds a network: a
	// loopback-only one (every pod runs on the host network, so no CNI
	// plugin is ever called for a pod).
	cni := `{"cniVersion": "1.0.0", "name": "kplane-up", "plugins": [{"type": "loopback"}]}`
	if err := os.WriteFile(filepath.Join(env.Dir, "cni", "net.d", "10-kplane-up.conflist"), []byte(cni), 0o644); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "kplane")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/kplane/kplane/cmd/kplane").CombinedOutput(); err != nil {
		t.Fatalf("build kplane: %v\n%s", err, out)
	}
	cp, err := localcluster.Up(ctx, localcluster.UpConfig{
		Binary: bin, DataDir: filepath.Join(dir, "up"),
		Runtime: "containerd", CRISocket: env.Socket, CgroupParent: env.CgroupParent,
	})
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "up", "nodeagent.log"))
		t.Fatalf("kplane up --runtime containerd: %v\n--- nodeagent.log ---\n%s", err, b)
	}
	// Registered after containerd's clean-up, so it runs first.
	t.Cleanup(func() {
		cp.Stop()
		// The pods' tmpfs volumes outlive the agent, as the kubelet's.
		if err := containerdtest.UnmountAll(filepath.Join(dir, "up")); err != nil {
			t.Errorf("unmount the pods' volumes: %v", err)
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "up", "nodeagent.log"))
			t.Logf("--- nodeagent.log ---\n%s", b)
		}
	})
	return cp
}
