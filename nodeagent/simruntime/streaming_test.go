// This file holds the test of the built-in runtime's streaming server: exec
// answers with a URL where nothing is run, and unknown containers and
// sandboxes are NotFound.

package simruntime_test

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/nodeagent/simruntime"
)

// TestStreaming: CRI Exec answers with a URL of the runtime's streaming
// server, where the command is not run: it says so on stderr and exits
// ExecExitCode; unknown containers and sandboxes are NotFound.
func TestStreaming(t *testing.T) {
	e := start(t, simruntime.Config{})
	ctx := context.Background()
	rt := e.client.Runtime()
	if _, err := rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "nosuch", Cmd: []string{"true"}, Stdout: true}); status.Code(err) != codes.NotFound {
		t.Errorf("Exec in an unknown container: got %v, want NotFound", err)
	}
	if _, err := rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "nosuch"}); status.Code(err) != codes.NotFound {
		t.Errorf("PortForward to an unknown sandbox: got %v, want NotFound", err)
	}
	id := runContainer(t, e, "web", nil)
	resp, err := rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"cat", "/etc/hostname"}, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(resp.GetUrl())
	if err != nil {
		t.Fatal(err)
	}
	ex, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	var ce exec.CodeExitError
	if !errors.As(err, &ce) || ce.Code != simruntime.ExecExitCode {
		t.Errorf("exec: got %v, want exit code %d", err, simruntime.ExecExitCode)
	}
	if want := "kplane-sim: the built-in runtime runs no processes: \"cat /etc/hostname\" was not run\n"; stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("exec: got stdout %q, stderr %q; want stderr %q", stdout.String(), stderr.String(), want)
	}
}
