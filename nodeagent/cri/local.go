// This file holds the in-process connection to a runtime living in the
// node agent's own process (kplane's built-in runtime, nodeagent/simruntime).
//
// Why: one `kplane nodeagent --nodes 100` process carries a hundred
// simulated nodes, each with its own built-in runtime. Over a unix socket
// every CRI call is marshalled, framed as HTTP/2, written, read, woken up
// on another goroutine and unmarshalled twice (request and answer): about
// half of that process's CPU in the density benchmark, for a runtime that
// is a map behind a mutex in the same address space. So, as the kubelet
// once called its in-tree dockershim without a socket (and as KWOK, the
// Kubernetes anchor of that benchmark, runs no kubelet and no runtime at
// all), the node agent calls its built-in runtime's methods directly. What
// callers see stays the same: the Client's API, one client span per call
// named as otelgrpc names it ("runtime.v1.RuntimeService/RunPodSandbox")
// with the rpc.client.* metrics, recorded by the very stats handler the
// socket connection uses, and errors carrying their gRPC status codes. A
// runtime on a socket (containerd, `kplane simruntime`) is still reached
// over gRPC.
//
// Aliasing: a request is handed to the runtime as it is, and the runtime's
// answer is handed back as it is, without the copy marshalling made. The
// runtime must therefore copy what it keeps of a request (the built-in
// runtime clones the metadata, labels and annotations it stores) and must
// not hand out what it keeps (it answers with copies of them), so that
// neither side can change the other's state after a call.

package cri

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Server is a CRI runtime in this process: both CRI services.
type Server interface {
	runtimeapi.RuntimeServiceServer
	runtimeapi.ImageServiceServer
}

// local calls a Server's methods directly; it implements both CRI client
// interfaces, so the Client above it is the same for a socket and for an
// in-process runtime.
type local struct {
	srv   Server
	stats stats.Handler
}

var (
	_ runtimeapi.RuntimeServiceClient = (*local)(nil)
	_ runtimeapi.ImageServiceClient   = (*local)(nil)
)

// call runs one CRI method of the server under the same stats handler a
// gRPC connection runs (a client span and the rpc.client.* metrics), with
// the gRPC semantics callers rely on: a done ctx fails the call before it
// starts, and every error carries a status code.
func call[Req, Resp any](ctx context.Context, l *local, method string, req Req, fn func(context.Context, Req) (Resp, error)) (Resp, error) {
	ctx = l.stats.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: method})
	begin := time.Now()
	l.stats.HandleRPC(ctx, &stats.Begin{Client: true, BeginTime: begin})
	var resp Resp
	err := ctx.Err()
	if err == nil {
		resp, err = fn(ctx, req)
	}
	if err != nil {
		err = statusError(err)
	}
	l.stats.HandleRPC(ctx, &stats.End{Client: true, BeginTime: begin, EndTime: time.Now(), Error: err})
	if err != nil {
		var zero Resp
		return zero, err
	}
	return resp, nil
}

// statusError gives err a gRPC status as a gRPC client would see it: a
// context error becomes Canceled or DeadlineExceeded, an error without a
// status Unknown.
func statusError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unknown, err.Error())
}

// GetContainerEvents is a server stream, which no caller of this package
// uses; an in-process runtime does not offer it.
func (l *local) GetContainerEvents(ctx context.Context, in *runtimeapi.GetEventsRequest, _ ...grpc.CallOption) (runtimeapi.RuntimeService_GetContainerEventsClient, error) {
	return nil, status.Error(codes.Unimplemented, "cri: GetContainerEvents is not available from an in-process runtime")
}

func (l *local) Version(ctx context.Context, in *runtimeapi.VersionRequest, _ ...grpc.CallOption) (*runtimeapi.VersionResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/Version", in, l.srv.Version)
}

func (l *local) RunPodSandbox(ctx context.Context, in *runtimeapi.RunPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.RunPodSandboxResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/RunPodSandbox", in, l.srv.RunPodSandbox)
}

func (l *local) StopPodSandbox(ctx context.Context, in *runtimeapi.StopPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.StopPodSandboxResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/StopPodSandbox", in, l.srv.StopPodSandbox)
}

func (l *local) RemovePodSandbox(ctx context.Context, in *runtimeapi.RemovePodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.RemovePodSandboxResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/RemovePodSandbox", in, l.srv.RemovePodSandbox)
}

func (l *local) PodSandboxStatus(ctx context.Context, in *runtimeapi.PodSandboxStatusRequest, _ ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/PodSandboxStatus", in, l.srv.PodSandboxStatus)
}

func (l *local) ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/ListPodSandbox", in, l.srv.ListPodSandbox)
}

func (l *local) CreateContainer(ctx context.Context, in *runtimeapi.CreateContainerRequest, _ ...grpc.CallOption) (*runtimeapi.CreateContainerResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/CreateContainer", in, l.srv.CreateContainer)
}

func (l *local) StartContainer(ctx context.Context, in *runtimeapi.StartContainerRequest, _ ...grpc.CallOption) (*runtimeapi.StartContainerResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/StartContainer", in, l.srv.StartContainer)
}

func (l *local) StopContainer(ctx context.Context, in *runtimeapi.StopContainerRequest, _ ...grpc.CallOption) (*runtimeapi.StopContainerResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/StopContainer", in, l.srv.StopContainer)
}

func (l *local) RemoveContainer(ctx context.Context, in *runtimeapi.RemoveContainerRequest, _ ...grpc.CallOption) (*runtimeapi.RemoveContainerResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/RemoveContainer", in, l.srv.RemoveContainer)
}

func (l *local) ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, _ ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/ListContainers", in, l.srv.ListContainers)
}

func (l *local) ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/ContainerStatus", in, l.srv.ContainerStatus)
}

func (l *local) UpdateContainerResources(ctx context.Context, in *runtimeapi.UpdateContainerResourcesRequest, _ ...grpc.CallOption) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/UpdateContainerResources", in, l.srv.UpdateContainerResources)
}

func (l *local) ReopenContainerLog(ctx context.Context, in *runtimeapi.ReopenContainerLogRequest, _ ...grpc.CallOption) (*runtimeapi.ReopenContainerLogResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/ReopenContainerLog", in, l.srv.ReopenContainerLog)
}

func (l *local) ExecSync(ctx context.Context, in *runtimeapi.ExecSyncRequest, _ ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/ExecSync", in, l.srv.ExecSync)
}

func (l *local) Exec(ctx context.Context, in *runtimeapi.ExecRequest, _ ...grpc.CallOption) (*runtimeapi.ExecResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/Exec", in, l.srv.Exec)
}

func (l *local) Attach(ctx context.Context, in *runtimeapi.AttachRequest, _ ...grpc.CallOption) (*runtimeapi.AttachResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/Attach", in, l.srv.Attach)
}

func (l *local) PortForward(ctx context.Context, in *runtimeapi.PortForwardRequest, _ ...grpc.CallOption) (*runtimeapi.PortForwardResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/PortForward", in, l.srv.PortForward)
}

func (l *local) ContainerStats(ctx context.Context, in *runtimeapi.ContainerStatsRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatsResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/ContainerStats", in, l.srv.ContainerStats)
}

func (l *local) ListContainerStats(ctx context.Context, in *runtimeapi.ListContainerStatsRequest, _ ...grpc.CallOption) (*runtimeapi.ListContainerStatsResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/ListContainerStats", in, l.srv.ListContainerStats)
}

func (l *local) PodSandboxStats(ctx context.Context, in *runtimeapi.PodSandboxStatsRequest, _ ...grpc.CallOption) (*runtimeapi.PodSandboxStatsResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/PodSandboxStats", in, l.srv.PodSandboxStats)
}

func (l *local) ListPodSandboxStats(ctx context.Context, in *runtimeapi.ListPodSandboxStatsRequest, _ ...grpc.CallOption) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/ListPodSandboxStats", in, l.srv.ListPodSandboxStats)
}

func (l *local) UpdateRuntimeConfig(ctx context.Context, in *runtimeapi.UpdateRuntimeConfigRequest, _ ...grpc.CallOption) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/UpdateRuntimeConfig", in, l.srv.UpdateRuntimeConfig)
}

func (l *local) Status(ctx context.Context, in *runtimeapi.StatusRequest, _ ...grpc.CallOption) (*runtimeapi.StatusResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/Status", in, l.srv.Status)
}

func (l *local) CheckpointContainer(ctx context.Context, in *runtimeapi.CheckpointContainerRequest, _ ...grpc.CallOption) (*runtimeapi.CheckpointContainerResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/CheckpointContainer", in, l.srv.CheckpointContainer)
}

func (l *local) ListMetricDescriptors(ctx context.Context, in *runtimeapi.ListMetricDescriptorsRequest, _ ...grpc.CallOption) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/ListMetricDescriptors", in, l.srv.ListMetricDescriptors)
}

func (l *local) ListPodSandboxMetrics(ctx context.Context, in *runtimeapi.ListPodSandboxMetricsRequest, _ ...grpc.CallOption) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/ListPodSandboxMetrics", in, l.srv.ListPodSandboxMetrics)
}

func (l *local) RuntimeConfig(ctx context.Context, in *runtimeapi.RuntimeConfigRequest, _ ...grpc.CallOption) (*runtimeapi.RuntimeConfigResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/RuntimeConfig", in, l.srv.RuntimeConfig)
}

func (l *local) UpdatePodSandboxResources(ctx context.Context, in *runtimeapi.UpdatePodSandboxResourcesRequest, _ ...grpc.CallOption) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	return call(ctx, l, "/runtime.v1.RuntimeService/UpdatePodSandboxResources", in, l.srv.UpdatePodSandboxResources)
}

func (l *local) ListImages(ctx context.Context, in *runtimeapi.ListImagesRequest, _ ...grpc.CallOption) (*runtimeapi.ListImagesResponse, error) {
	return call(ctx, l, "/runtime.v1.ImageService/ListImages", in, l.srv.ListImages)
}

func (l *local) ImageStatus(ctx context.Context, in *runtimeapi.ImageStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ImageStatusResponse, error) {
	return call(ctx, l, "/runtime.v1.ImageService/ImageStatus", in, l.srv.ImageStatus)
}

func (l *local) PullImage(ctx context.Context, in *runtimeapi.PullImageRequest, _ ...grpc.CallOption) (*runtimeapi.PullImageResponse, error) {
	return call(ctx, l, "/runtime.v1.ImageService/PullImage", in, l.srv.PullImage)
}

func (l *local) RemoveImage(ctx context.Context, in *runtimeapi.RemoveImageRequest, _ ...grpc.CallOption) (*runtimeapi.RemoveImageResponse, error) {
	return call(ctx, l, "/runtime.v1.ImageService/RemoveImage", in, l.srv.RemoveImage)
}

func (l *local) ImageFsInfo(ctx context.Context, in *runtimeapi.ImageFsInfoRequest, _ ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error) {
	return call(ctx, l, "/runtime.v1.ImageService/ImageFsInfo", in, l.srv.ImageFsInfo)
}
