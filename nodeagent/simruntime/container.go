// This file holds the simulated containers: their lifecycle, logs, exec
// results and the CRI calls on them.

package simruntime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/nodeagent/crilog"
)

// container is one simulated container. A restart is a new container: the
// kubelet creates one with the next attempt number.
type container struct {
	id          string
	sandboxID   string
	meta        *runtimeapi.ContainerMetadata
	imageRef    string // the normalised reference it was created from
	imageID     string
	imageDigest string
	labels      map[string]string
	annotations map[string]string
	logPath     string // absolute or relative to the caller; "" means no log
	rules       containerRules
	logLines    []string  // written at start, then dropped
	sh          *scripted // nil unless its command is a script (script.go)
	// mounts are recorded as given and reported in the status; a scripted
	// container's shell reads and writes them (mounts.go), and the node
	// agent has made their host paths real already.
	mounts []*runtimeapi.Mount

	state      runtimeapi.ContainerState
	createdAt  time.Time
	startedAt  time.Time
	finishedAt time.Time
	exitCode   int32
	reason     string
}

// observe brings the container's state up to now: a running container
// whose run time is over becomes exited, at the time its rules say.
func (c *container) observe(now time.Time) {
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING || !c.rules.exits {
		return
	}
	if exitAt := c.startedAt.Add(c.rules.runFor); !now.Before(exitAt) {
		c.exit(exitAt, c.rules.exitCode)
	}
}

func (c *container) exit(at time.Time, code int32) {
	if c.sh != nil && c.sh.cancel != nil {
		c.sh.cancel()
	}
	c.state = runtimeapi.ContainerState_CONTAINER_EXITED
	c.finishedAt = at
	c.exitCode = code
	c.reason = "Completed"
	if code != 0 {
		c.reason = "Error"
	}
}

// kill ends a running container at once with code; a created one that
// never started becomes exited too, without a start time.
func (c *container) kill(now time.Time, code int32) {
	switch c.state {
	case runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_CREATED:
		c.exit(now, code)
	}
}

// containerMeta copies m (see sandboxMeta).
func containerMeta(m *runtimeapi.ContainerMetadata) *runtimeapi.ContainerMetadata {
	if m == nil {
		return nil
	}
	return &runtimeapi.ContainerMetadata{Name: m.Name, Attempt: m.Attempt}
}

func (c *container) toCRI() *runtimeapi.Container {
	return &runtimeapi.Container{
		Id:           c.id,
		PodSandboxId: c.sandboxID,
		Metadata:     containerMeta(c.meta),
		Image:        &runtimeapi.ImageSpec{Image: c.imageRef},
		ImageRef:     c.imageDigest,
		ImageId:      c.imageID,
		State:        c.state,
		CreatedAt:    c.createdAt.UnixNano(),
		Labels:       maps.Clone(c.labels),
		Annotations:  maps.Clone(c.annotations),
	}
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (c *container) status() *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{
		Id:          c.id,
		Metadata:    containerMeta(c.meta),
		State:       c.state,
		CreatedAt:   c.createdAt.UnixNano(),
		StartedAt:   unixNano(c.startedAt),
		FinishedAt:  unixNano(c.finishedAt),
		ExitCode:    c.exitCode,
		Image:       &runtimeapi.ImageSpec{Image: c.imageRef},
		ImageRef:    c.imageDigest,
		ImageId:     c.imageID,
		Reason:      c.reason,
		Labels:      maps.Clone(c.labels),
		Annotations: maps.Clone(c.annotations),
		LogPath:     c.logPath,
		Mounts:      cloneMounts(c.mounts),
	}
}

// cloneMounts copies mounts, so a caller cannot change the record.
func cloneMounts(ms []*runtimeapi.Mount) []*runtimeapi.Mount {
	if len(ms) == 0 {
		return nil
	}
	out := make([]*runtimeapi.Mount, len(ms))
	for i, m := range ms {
		out[i] = &runtimeapi.Mount{ContainerPath: m.GetContainerPath(), HostPath: m.GetHostPath(), Readonly: m.GetReadonly(),
			SelinuxRelabel: m.GetSelinuxRelabel(), Propagation: m.GetPropagation()}
	}
	return out
}

// findContainerLocked returns the container with id, brought up to date.
func (r *Runtime) findContainerLocked(id string) (*container, error) {
	c, ok := r.containers[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", id)
	}
	c.observe(r.clock.Now())
	return c, nil
}

// CreateContainer creates a container in a ready sandbox from a present
// image, with the rules its environment gives.
func (r *Runtime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	cfg := req.GetConfig()
	meta := cfg.GetMetadata()
	if meta.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "container config: metadata name is required")
	}
	rules, logLines, err := parseContainerRules(cfg.GetEnvs())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "kplane-sim: container %q: %v", meta.GetName(), err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found", req.GetPodSandboxId())
	}
	if sb.state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %q is not ready", sb.id)
	}
	im := r.lookupImageLocked(cfg.GetImage().GetImage())
	if im == nil {
		return nil, status.Errorf(codes.NotFound, "failed to get image %q: not found", cfg.GetImage().GetImage())
	}
	for _, other := range r.containers {
		if other.sandboxID == sb.id && other.meta.GetName() == meta.GetName() && other.meta.GetAttempt() == meta.GetAttempt() {
			return nil, status.Errorf(codes.AlreadyExists, "container name %s (attempt %d) in sandbox %s is reserved for %s",
				meta.GetName(), meta.GetAttempt(), sb.id, other.id)
		}
	}
	c := &container{
		id:          r.newIDLocked("container"),
		sandboxID:   sb.id,
		meta:        containerMeta(meta),
		imageRef:    im.tags[0],
		imageID:     im.id,
		imageDigest: im.digest,
		labels:      maps.Clone(cfg.GetLabels()),
		annotations: maps.Clone(cfg.GetAnnotations()),
		rules:       rules,
		logLines:    logLines,
		mounts:      cloneMounts(cfg.GetMounts()),
		state:       runtimeapi.ContainerState_CONTAINER_CREATED,
		createdAt:   r.clock.Now(),
	}
	if sb.logDir != "" && cfg.GetLogPath() != "" {
		c.logPath = filepath.Join(sb.logDir, cfg.GetLogPath())
	}
	if argv := append(slices.Clone(cfg.GetCommand()), cfg.GetArgs()...); !rules.exits && interpretable(argv) {
		c.sh = newScripted(r.clock, argv, cfg, sb)
	}
	r.containers[c.id] = c
	return &runtimeapi.CreateContainerResponse{ContainerId: c.id}, nil
}

// StartContainer starts a created container and writes its KPLANE_SIM_LOG
// lines to its log file.
func (r *Runtime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.findContainerLocked(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_CREATED {
		return nil, status.Errorf(codes.FailedPrecondition, "container %q is %s, not created", c.id, c.state)
	}
	if sb := r.sandboxes[c.sandboxID]; sb == nil || sb.state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox of container %q is not ready", c.id)
	}
	now := r.clock.Now()
	if c.logPath != "" {
		if err := writeLog(c.logPath, now, c.logLines); err != nil {
			return nil, status.Errorf(codes.Internal, "start container %q: %v", c.id, err)
		}
	}
	c.logLines = nil
	c.state = runtimeapi.ContainerState_CONTAINER_RUNNING
	c.startedAt = now
	if c.sh != nil {
		r.startScript(c)
	}
	return &runtimeapi.StartContainerResponse{}, nil
}

// writeLog creates the log file (and its directory) and appends lines.
// The directory is made only when the file cannot be created without it:
// a node agent has made it already (as the kubelet does), and with a
// hundred simulated nodes in one process the syscalls of each container
// start add up.
func writeLog(path string, t time.Time, lines []string) error {
	const flags, perm = os.O_CREATE | os.O_WRONLY | os.O_APPEND, 0o640
	f, err := os.OpenFile(path, flags, perm)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create log directory: %w", err)
		}
		f, err = os.OpenFile(path, flags, perm)
	}
	if err != nil {
		return fmt.Errorf("open log file: %w", err)
	}
	var werr error
	if len(lines) > 0 {
		werr = crilog.WriteLines(f, t, crilog.Stdout, lines)
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		return fmt.Errorf("write log file: %w", werr)
	}
	return nil
}

// StopContainer stops a running container. One that ignores SIGTERM (by
// its rule) takes the whole timeout, or until its own exit if that comes
// first, then exits 137; any other exits 143 at once. Stopping a container
// that is not running succeeds. The wait ends early, with the context's
// error, when ctx is done.
func (r *Runtime) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	id := req.GetContainerId()
	timeout := time.Duration(req.GetTimeout()) * time.Second
	r.mu.Lock()
	c, err := r.findContainerLocked(id)
	if err != nil {
		r.mu.Unlock()
		return nil, err
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		c.kill(r.clock.Now(), exitCodeSIGKILL) // a created container never runs now
		r.mu.Unlock()
		return &runtimeapi.StopContainerResponse{}, nil
	}
	if !c.rules.ignoreSIGTERM {
		c.kill(r.clock.Now(), exitCodeSIGTERM)
		r.mu.Unlock()
		return &runtimeapi.StopContainerResponse{}, nil
	}
	wait := timeout
	if c.rules.exits {
		wait = min(wait, c.startedAt.Add(c.rules.runFor).Sub(r.clock.Now()))
	}
	r.mu.Unlock()

	if wait > 0 {
		t := r.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-t.C():
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return &runtimeapi.StopContainerResponse{}, nil // removed meanwhile
	}
	c.observe(r.clock.Now())
	c.kill(r.clock.Now(), exitCodeSIGKILL)
	return &runtimeapi.StopContainerResponse{}, nil
}

// RemoveContainer removes the container, killing it first if it runs.
// Removing an unknown container succeeds (the CRI contract: idempotent).
func (r *Runtime) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[req.GetContainerId()]
	if !ok {
		return &runtimeapi.RemoveContainerResponse{}, nil
	}
	now := r.clock.Now()
	c.observe(now)
	c.kill(now, exitCodeSIGKILL)
	delete(r.containers, c.id)
	return &runtimeapi.RemoveContainerResponse{}, nil
}

// ListContainers lists containers matching the filter (ID or a unique ID
// prefix, state, sandbox ID, every label of the selector), oldest first.
func (r *Runtime) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f := req.GetFilter()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	var out []*container
	for _, c := range r.containers {
		c.observe(now)
		if f.GetId() != "" && !strings.HasPrefix(c.id, f.GetId()) {
			continue
		}
		if f.GetState() != nil && c.state != f.GetState().GetState() {
			continue
		}
		if f.GetPodSandboxId() != "" && !strings.HasPrefix(c.sandboxID, f.GetPodSandboxId()) {
			continue
		}
		if !matchLabels(c.labels, f.GetLabelSelector()) {
			continue
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *container) int {
		if n := a.createdAt.Compare(b.createdAt); n != 0 {
			return n
		}
		return strings.Compare(a.id, b.id)
	})
	resp := &runtimeapi.ListContainersResponse{}
	for _, c := range out {
		resp.Containers = append(resp.Containers, c.toCRI())
	}
	return resp, nil
}

// ContainerStatus returns the container's status, NotFound when unknown.
// Verbose adds the rules the container follows.
func (r *Runtime) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.findContainerLocked(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: c.status()}
	if req.GetVerbose() {
		resp.Info = map[string]string{
			"runtime":       RuntimeName,
			"sandboxID":     c.sandboxID,
			"exits":         strconv.FormatBool(c.rules.exits),
			"runFor":        c.rules.runFor.String(),
			"exitCode":      strconv.Itoa(int(c.rules.exitCode)),
			"execExitCode":  strconv.Itoa(int(c.rules.execExitCode)),
			"readyAfter":    c.rules.readyAfter.String(),
			"ignoreSIGTERM": strconv.FormatBool(c.rules.ignoreSIGTERM),
		}
	}
	return resp, nil
}

// UpdateContainerResources accepts the new resources of a known container
// and ignores them: no process runs whose limits could change.
func (r *Runtime) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.findContainerLocked(req.GetContainerId()); err != nil {
		return nil, err
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// ReopenContainerLog creates the running container's log file anew if it
// was moved away (log rotation); the simulation keeps no file open.
func (r *Runtime) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.findContainerLocked(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, status.Errorf(codes.FailedPrecondition, "container %q is not running", c.id)
	}
	if c.logPath != "" {
		if err := writeLog(c.logPath, r.clock.Now(), nil); err != nil {
			return nil, status.Errorf(codes.Internal, "reopen log of container %q: %v", c.id, err)
		}
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

// ExecSync runs the command in a scripted container's shell when it is
// one the shell runs (script.go). Otherwise it answers as the container's
// rules say: exit 1 before KPLANE_SIM_READY_AFTER_SECONDS of running, then
// KPLANE_SIM_EXEC_EXIT_CODE; nothing is executed, and a non-zero result
// explains itself on stderr.
func (r *Runtime) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if len(req.GetCmd()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "exec: empty command")
	}
	r.mu.Lock()
	c, err := r.findContainerLocked(req.GetContainerId())
	if err != nil {
		r.mu.Unlock()
		return nil, err
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		r.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "container %q is not running", c.id)
	}
	if c.sh != nil && interpretable(req.GetCmd()) {
		r.mu.Unlock()
		return execSyncScript(ctx, c, req)
	}
	defer r.mu.Unlock()
	if ran := r.clock.Since(c.startedAt); ran < c.rules.readyAfter {
		return &runtimeapi.ExecSyncResponse{
			ExitCode: 1,
			Stderr:   fmt.Appendf(nil, "kplane-sim: not ready: running %v of %s=%v\n", ran, EnvReadyAfterSeconds, c.rules.readyAfter),
		}, nil
	}
	resp := &runtimeapi.ExecSyncResponse{ExitCode: c.rules.execExitCode}
	if resp.ExitCode != 0 {
		resp.Stderr = fmt.Appendf(nil, "kplane-sim: exec exits %d (%s)\n", resp.ExitCode, EnvExecExitCode)
	}
	return resp, nil
}

// execSyncScript runs req's command in c's shell, within req's timeout
// (seconds; 0: none) as containerd bounds it.
func execSyncScript(ctx context.Context, c *container, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if t := req.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	var stdout, stderr limitedBuffer
	code, _ := execScript(ctx, c, req.GetCmd(), nil, &stdout, &stderr)
	if ctx.Err() != nil {
		return nil, status.Errorf(codes.DeadlineExceeded, "timeout %ds exceeded: %v", req.GetTimeout(), ctx.Err())
	}
	return &runtimeapi.ExecSyncResponse{Stdout: stdout.b, Stderr: stderr.b, ExitCode: code}, nil
}

// limitedBuffer keeps the first 16 MiB written to it, as CRI runtimes cap
// ExecSync output.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	const limit = 16 << 20
	if room := limit - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
