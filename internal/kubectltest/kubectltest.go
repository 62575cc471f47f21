// Package kubectltest runs the real kubectl of this machine against an
// in-process gateway on loopback HTTPS, for end-to-end tests of parts that
// kubectl reaches through the gateway (pods/log from a node agent, ...).
// It is for tests only.
package kubectltest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/internal/testutil"
)

// Kubectl is kubectl configured for one gateway.
type Kubectl struct {
	bin, kubeconfig, dir string
}

// Start serves a gateway in front of conn (forwarding mode: kubectl's
// bearer token goes to the API service, which authenticates it) until the
// test ends, and writes a kubeconfig with token, for the kubectl on PATH.
// The test is skipped (failed under CI) when kubectl is not installed.
func Start(t testing.TB, conn grpc.ClientConnInterface, token string) *Kubectl {
	t.Helper()
	return StartBinary(t, conn, token, "kubectl")
}

// StartBinary is Start with the kubectl named bin: "kubectl" or one of the
// versioned kubectl.1.27 … kubectl.1.33 (see Binary).
func StartBinary(t testing.TB, conn grpc.ClientConnInterface, token, bin string) *Kubectl {
	t.Helper()
	path := Binary(t, bin)
	gw, err := gateway.New(gateway.Config{Conn: conn})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(gw)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // kubectl's dispatcher drops connections mid-handshake
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kplane
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: kplane
  context: {cluster: kplane, user: admin, namespace: default}
current-context: kplane
`, srv.URL, token)
	k := &Kubectl{bin: path, kubeconfig: filepath.Join(dir, "kubeconfig"), dir: dir}
	if err := os.WriteFile(k.kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

// Binary finds the kubectl named bin on PATH or beside the kubectl
// dispatcher (the cloud SDK installs kubectl.1.27 … kubectl.1.33 there
// without linking them); the test is skipped (failed under CI) without it.
func Binary(t testing.TB, bin string) string {
	t.Helper()
	if p, err := exec.LookPath(bin); err == nil {
		return p
	}
	if d, err := exec.LookPath("kubectl"); err == nil {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			p := filepath.Join(filepath.Dir(real), bin)
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return testutil.RequireBinary(t, bin, "the Google Cloud SDK kubectl component (kubectl and kubectl.1.27 … kubectl.1.33)")
}

// WithBinary returns k running the kubectl named bin instead (same gateway,
// kubeconfig, cache and HOME).
func (k *Kubectl) WithBinary(t testing.TB, bin string) *Kubectl {
	t.Helper()
	c := *k
	c.bin = Binary(t, bin)
	return &c
}

// Dir is the directory holding the kubeconfig, the cache and HOME; tests
// may write their manifests there.
func (k *Kubectl) Dir() string { return k.dir }

// Command is kubectl with args, using this kubeconfig and a private cache
// and HOME; ctx bounds it.
func (k *Kubectl) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, k.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig,
		"KUBECACHEDIR="+filepath.Join(k.dir, "cache"), "HOME="+k.dir)
	return cmd
}

// Run runs kubectl with args and returns its standard output and, on
// failure, an error that includes its standard error (kubectl's message).
func (k *Kubectl) Run(ctx context.Context, args ...string) (string, error) {
	cmd := k.Command(ctx, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %v: %w: %s", args, err, bytes.TrimSpace(errOut.Bytes()))
	}
	return out.String(), nil
}
