// This file holds the built-in runtime's streaming side: CRI Exec, Attach
// and PortForward answer with a URL of the runtime's own streaming server
// (Kubernetes' k8s.io/kubelet/pkg/cri/streaming, the library containerd's
// is built from), whose handlers follow the rules below, since a simulated
// container has no process to run a command in, no output to attach to and
// no socket to forward to.

package simruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubelet/pkg/cri/streaming"
	"k8s.io/utils/exec"
)

// ExecExitCode is the exit code of every command exec'd (kubectl exec) in a
// simulated container: 126, the shell's "command found but cannot be
// executed", because none is run.
const ExecExitCode = 126

// streamer is the runtime's streaming server, started by the first Exec,
// Attach or PortForward and stopped by Close.
type streamer struct {
	srv  streaming.Server
	http *http.Server
	done chan struct{}
}

// streamServer starts the streaming server on loopback if it is not
// running yet.
func (r *Runtime) streamServer() (streaming.Server, error) {
	r.streamMu.Lock()
	defer r.streamMu.Unlock()
	if r.stream != nil {
		return r.stream.srv, nil
	}
	if r.closed {
		return nil, status.Error(codes.Unavailable, "simruntime: closed")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, status.Errorf(codes.Internal, "simruntime: streaming server: %v", err)
	}
	cfg := streaming.DefaultConfig
	cfg.Addr = lis.Addr().String()
	cfg.BaseURL = &url.URL{Scheme: "http", Host: lis.Addr().String()}
	srv, err := streaming.NewServer(cfg, streamRuntime{r})
	if err != nil {
		lis.Close()
		return nil, status.Errorf(codes.Internal, "simruntime: streaming server: %v", err)
	}
	s := &streamer{srv: srv, http: &http.Server{Handler: srv}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.http.Serve(lis)
	}()
	r.stream = s
	r.log.Info("serving CRI streaming", "address", lis.Addr().String())
	return srv, nil
}

// Close ends the scripted containers' shells, stops the streaming server
// (if one was started) and closes the connections it holds. The runtime answers no Exec, Attach or PortForward
// afterwards.
func (r *Runtime) Close() error {
	r.stopScripts()
	r.streamMu.Lock()
	s := r.stream
	r.stream, r.closed = nil, true
	r.streamMu.Unlock()
	if s == nil {
		return nil
	}
	err := s.http.Close()
	<-s.done
	return err
}

// checkContainer checks that id is a running container.
func (r *Runtime) checkContainer(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.findContainerLocked(id)
	if err != nil {
		return err
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return status.Errorf(codes.FailedPrecondition, "container %q is not running", c.id)
	}
	return nil
}

// Exec answers with the URL at which the command "runs": see streamRuntime.
func (r *Runtime) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if len(req.GetCmd()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "exec: empty command")
	}
	if err := r.checkContainer(req.GetContainerId()); err != nil {
		return nil, err
	}
	srv, err := r.streamServer()
	if err != nil {
		return nil, err
	}
	return srv.GetExec(req)
}

// Attach answers with the URL at which the attach fails: see streamRuntime.
func (r *Runtime) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if err := r.checkContainer(req.GetContainerId()); err != nil {
		return nil, err
	}
	srv, err := r.streamServer()
	if err != nil {
		return nil, err
	}
	return srv.GetAttach(req)
}

// PortForward answers with the URL at which every forwarded connection is
// refused: see streamRuntime.
func (r *Runtime) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	r.mu.Lock()
	sb, ok := r.sandboxes[req.GetPodSandboxId()]
	ready := ok && sb.state == runtimeapi.PodSandboxState_SANDBOX_READY
	r.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found", req.GetPodSandboxId())
	}
	if !ready {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %q is not ready", req.GetPodSandboxId())
	}
	srv, err := r.streamServer()
	if err != nil {
		return nil, err
	}
	return srv.GetPortForward(req)
}

// streamRuntime is what the streaming server does once a client is
// connected, by the built-in runtime's rules: nothing pretends to run.
//
//   - exec writes "kplane-sim: the built-in runtime runs no processes: <cmd>
//     was not run" to stderr (to stdout with a TTY, which has no stderr)
//     and exits ExecExitCode (126), so `kubectl exec` exits 126;
//   - attach fails: there is no process whose output could be attached to;
//   - port-forward refuses every connection: nothing listens in a
//     simulated pod.
type streamRuntime struct{ r *Runtime }

// Exec implements streaming.Runtime.
func (s streamRuntime) Exec(ctx context.Context, containerID string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	w := errw
	if tty || w == nil {
		w = out
	}
	if code, ok := s.r.execScript(ctx, containerID, cmd, in, out, w); ok {
		if code != 0 {
			return exec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: int(code)}
		}
		return nil
	}
	if w != nil {
		fmt.Fprintf(w, "kplane-sim: the built-in runtime runs no processes: %q was not run\n", strings.Join(cmd, " "))
	}
	return exec.CodeExitError{Err: fmt.Errorf("kplane-sim: %q was not run", strings.Join(cmd, " ")), Code: ExecExitCode}
}

// Attach implements streaming.Runtime.
func (s streamRuntime) Attach(ctx context.Context, containerID string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	return errors.New("kplane-sim: the built-in runtime runs no processes: there is nothing to attach to")
}

// PortForward implements streaming.Runtime.
func (s streamRuntime) PortForward(ctx context.Context, podSandboxID string, port int32, stream io.ReadWriteCloser) error {
	return fmt.Errorf("kplane-sim: the built-in runtime runs no processes: nothing listens on port %d", port)
}
