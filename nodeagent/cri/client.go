// Package cri is the node agent's client of a container runtime: a small
// typed wrapper over the CRI v1 RuntimeService and ImageService
// (k8s.io/cri-api) on a unix socket, or on a runtime in the same process
// (Config.Server, see local.go). It speaks to a real containerd and to
// kplane's built-in runtime (nodeagent/simruntime) alike.
//
// Every call runs under the caller's ctx; when ctx has no deadline the
// client's default timeout applies (as the kubelet's runtime request
// timeout does), except for image pulls, which may take as long as ctx
// allows. Errors keep their gRPC status (status.Code works through the
// wrapping), so callers can tell NotFound from the rest.
package cri

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/internal/telemetry"
)

// DefaultTimeout bounds a call whose ctx has no deadline: the kubelet's
// default runtime request timeout.
const DefaultTimeout = 2 * time.Minute

// maxMsgSize is the largest message accepted, as the kubelet allows (a
// ListContainers answer on a busy node is large).
const maxMsgSize = 16 << 20

// Config configures a Client.
type Config struct {
	// Socket is the runtime's unix socket path (with or without the
	// "unix://" prefix).
	Socket string
	// Server, instead of Socket, is a runtime in this process, called
	// without gRPC (local.go says why and what it must not share).
	Server Server
	// Timeout bounds calls whose ctx has no deadline (default DefaultTimeout).
	Timeout time.Duration
	// DialOptions are added to the gRPC client's (with Socket).
	DialOptions []grpc.DialOption
	// TracerProvider and MeterProvider record each CRI call (a span under
	// the caller's trace, rpc.client.* latency per method); nil uses the
	// global ones.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// Client is a CRI client. It is safe for concurrent use.
type Client struct {
	conn    *grpc.ClientConn // nil for an in-process Server
	rt      runtimeapi.RuntimeServiceClient
	img     runtimeapi.ImageServiceClient
	timeout time.Duration
}

// New returns a client for the runtime at cfg.Socket, or for cfg.Server.
// It does not connect yet: the first call does (use WaitReady to wait for
// the runtime).
func New(cfg Config) (*Client, error) {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if cfg.Server != nil {
		if cfg.Socket != "" {
			return nil, errors.New("cri: both a socket and an in-process server given")
		}
		l := &local{srv: cfg.Server, stats: telemetry.ClientHandler(cfg.TracerProvider, cfg.MeterProvider)}
		return &Client{rt: l, img: l, timeout: timeout}, nil
	}
	if cfg.Socket == "" {
		return nil, errors.New("cri: no socket given")
	}
	target := cfg.Socket
	if !strings.HasPrefix(target, "unix:") {
		// "unix:PATH" takes a relative or an absolute path.
		target = "unix:" + target
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Each CRI call is a span under the caller's trace (a no-op until a
		// tracer provider is installed).
		grpc.WithStatsHandler(telemetry.ClientHandler(cfg.TracerProvider, cfg.MeterProvider)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("cri: client for %s: %w", target, err)
	}
	return &Client{
		conn:    conn,
		rt:      runtimeapi.NewRuntimeServiceClient(conn),
		img:     runtimeapi.NewImageServiceClient(conn),
		timeout: timeout,
	}, nil
}

// Close closes the connection (nothing to close for an in-process Server).
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Runtime and Images give the raw CRI clients for calls this wrapper does
// not cover.
func (c *Client) Runtime() runtimeapi.RuntimeServiceClient { return c.rt }

// Images gives the raw ImageService client.
func (c *Client) Images() runtimeapi.ImageServiceClient { return c.img }

func (c *Client) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// IsNotFound reports whether err carries codes.NotFound.
func IsNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// Version returns the runtime's name and version.
func (c *Client) Version(ctx context.Context) (*runtimeapi.VersionResponse, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.rt.Version(ctx, &runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		return nil, fmt.Errorf("cri version: %w", err)
	}
	return resp, nil
}

// Status returns the runtime's conditions.
func (c *Client) Status(ctx context.Context) (*runtimeapi.RuntimeStatus, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("cri status: %w", err)
	}
	return resp.GetStatus(), nil
}

// Ready reports whether RuntimeReady and NetworkReady are both true, and
// if not, why. A runtime without a ready network can still run host-network
// pods, as the kubelet does.
func Ready(st *runtimeapi.RuntimeStatus) (bool, string) {
	return conditions(st, runtimeapi.RuntimeReady, runtimeapi.NetworkReady)
}

func conditions(st *runtimeapi.RuntimeStatus, types ...string) (bool, string) {
	var missing []string
	for _, want := range types {
		ok := false
		for _, c := range st.GetConditions() {
			if c.GetType() == want && c.GetStatus() {
				ok = true
			}
		}
		if !ok {
			missing = append(missing, want)
		}
	}
	if len(missing) == 0 {
		return true, ""
	}
	return false, "not " + strings.Join(missing, ", ")
}

// WaitReady polls Status every interval until the runtime reports
// RuntimeReady or ctx is done; it returns the last reason with ctx's error.
// It does not wait for NetworkReady (see Ready).
func (c *Client) WaitReady(ctx context.Context, interval time.Duration) error {
	last := "no answer yet"
	for {
		callCtx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		st, err := c.Status(callCtx)
		cancel()
		if err == nil {
			ok, why := conditions(st, runtimeapi.RuntimeReady)
			if ok {
				return nil
			}
			last = why
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cri: runtime not ready (%s): %w", last, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// UpdatePodCIDR tells the runtime the node's pod CIDR.
func (c *Client) UpdatePodCIDR(ctx context.Context, cidr string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	_, err := c.rt.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{
		RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}},
	})
	if err != nil {
		return fmt.Errorf("cri update runtime config: %w", err)
	}
	return nil
}

// RunPodSandbox creates and starts a pod sandbox and returns its ID.
func (c *Client) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: runtimeHandler})
	if err != nil {
		return "", fmt.Errorf("cri run pod sandbox %s/%s: %w", cfg.GetMetadata().GetNamespace(), cfg.GetMetadata().GetName(), err)
	}
	return resp.GetPodSandboxId(), nil
}

// StopPodSandbox stops the sandbox and any container still running in it.
func (c *Client) StopPodSandbox(ctx context.Context, id string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("cri stop pod sandbox %s: %w", id, err)
	}
	return nil
}

// RemovePodSandbox removes the sandbox and its containers.
func (c *Client) RemovePodSandbox(ctx context.Context, id string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	if _, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("cri remove pod sandbox %s: %w", id, err)
	}
	return nil
}

// PodSandboxStatus returns the sandbox's status.
func (c *Client) PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatus, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		return nil, fmt.Errorf("cri pod sandbox status %s: %w", id, err)
	}
	return resp.GetStatus(), nil
}

// ListPodSandbox lists sandboxes matching filter (nil: all).
func (c *Client) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
	if err != nil {
		return nil, fmt.Errorf("cri list pod sandboxes: %w", err)
	}
	return resp.GetItems(), nil
}

// CreateContainer creates a container in the sandbox and returns its ID.
func (c *Client) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sandboxID, Config: cfg, SandboxConfig: sandboxCfg,
	})
	if err != nil {
		return "", fmt.Errorf("cri create container %s: %w", cfg.GetMetadata().GetName(), err)
	}
	return resp.GetContainerId(), nil
}

// StartContainer starts a created container.
func (c *Client) StartContainer(ctx context.Context, id string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	if _, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("cri start container %s: %w", id, err)
	}
	return nil
}

// StopContainer stops a container, giving it grace (rounded up to whole
// seconds, the CRI's unit) between SIGTERM and SIGKILL. A ctx without a
// deadline gets grace plus the default timeout.
func (c *Client) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	secs := int64((grace + time.Second - 1) / time.Second)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(secs)*time.Second+c.timeout)
		defer cancel()
	}
	if _, err := c.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: secs}); err != nil {
		return fmt.Errorf("cri stop container %s: %w", id, err)
	}
	return nil
}

// RemoveContainer removes a container, killing it if it still runs.
func (c *Client) RemoveContainer(ctx context.Context, id string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	if _, err := c.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("cri remove container %s: %w", id, err)
	}
	return nil
}

// ListContainers lists containers matching filter (nil: all).
func (c *Client) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: filter})
	if err != nil {
		return nil, fmt.Errorf("cri list containers: %w", err)
	}
	return resp.GetContainers(), nil
}

// ContainerStatus returns the container's status.
func (c *Client) ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return nil, fmt.Errorf("cri container status %s: %w", id, err)
	}
	return resp.GetStatus(), nil
}

// ExecSync runs cmd in the container and waits for it, at most timeout
// (0: no limit but ctx's); an exec probe. A non-zero exit is a result, not
// an error.
func (c *Client) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (*runtimeapi.ExecSyncResponse, error) {
	secs := int64((timeout + time.Second - 1) / time.Second)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(secs)*time.Second+c.timeout)
		defer cancel()
	}
	resp, err := c.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: secs})
	if err != nil {
		return nil, fmt.Errorf("cri exec in container %s: %w", id, err)
	}
	return resp, nil
}

// ReopenContainerLog asks the runtime to reopen the container's log file
// (after the caller rotated it).
func (c *Client) ReopenContainerLog(ctx context.Context, id string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	if _, err := c.rt.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("cri reopen container log %s: %w", id, err)
	}
	return nil
}

// PullImage pulls the image and returns its reference (an image ID). Only
// ctx bounds it: a pull may take long.
func (c *Client) PullImage(ctx context.Context, image string, auth *runtimeapi.AuthConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	resp, err := c.img.PullImage(ctx, &runtimeapi.PullImageRequest{
		Image: &runtimeapi.ImageSpec{Image: image}, Auth: auth, SandboxConfig: sandboxCfg,
	})
	if err != nil {
		return "", fmt.Errorf("cri pull image %s: %w", image, err)
	}
	return resp.GetImageRef(), nil
}

// ImageStatus returns the image, or nil (and no error) when it is absent.
func (c *Client) ImageStatus(ctx context.Context, image string) (*runtimeapi.Image, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
	if err != nil {
		return nil, fmt.Errorf("cri image status %s: %w", image, err)
	}
	return resp.GetImage(), nil
}

// ListImages lists the images present.
func (c *Client) ListImages(ctx context.Context) ([]*runtimeapi.Image, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return nil, fmt.Errorf("cri list images: %w", err)
	}
	return resp.GetImages(), nil
}

// RemoveImage removes an image.
func (c *Client) RemoveImage(ctx context.Context, image string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	if _, err := c.img.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
		return fmt.Errorf("cri remove image %s: %w", image, err)
	}
	return nil
}
