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
// test ends, and writes a kubeconfig with token. The test is skipped
// (failed under CI) when kubectl is not installed.
func Start(t testing.TB, conn grpc.ClientConnInterface, token string) *Kubectl {
	t.Helper()
	bin := testutil.RequireBinary(t, "kubectl", "the Google Cloud SDK kubectl component")
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
	k := &Kubectl{bin: bin, kubeconfig: filepath.Join(dir, "kubeconfig"), dir: dir}
	if err := os.WriteFile(k.kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

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
