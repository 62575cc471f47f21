// This file holds the simulated runtime's container statistics: a running
// container reports the CPU and memory usage its environment declares
// (KPLANE_SIM_CPU_USAGE, KPLANE_SIM_MEMORY_USAGE), its cumulative CPU time
// growing at that rate since it started; others report zero.

package simruntime

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// stats is c's ContainerStats at now (nanoseconds since the epoch).
func (c *container) stats(now int64) *runtimeapi.ContainerStats {
	var cores, ws uint64
	var cumulative uint64
	if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
		cores, ws = c.rules.cpuNanoCores, c.rules.memoryBytes
		if ran := now - c.startedAt.UnixNano(); ran > 0 {
			cumulative = uint64(float64(cores) * float64(ran) / 1e9)
		}
	}
	return &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: c.id, Metadata: c.meta, Labels: c.labels, Annotations: c.annotations},
		Cpu: &runtimeapi.CpuUsage{Timestamp: now, UsageNanoCores: &runtimeapi.UInt64Value{Value: cores},
			UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cumulative}},
		Memory: &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: &runtimeapi.UInt64Value{Value: ws},
			UsageBytes: &runtimeapi.UInt64Value{Value: ws}},
	}
}

// ContainerStats returns one container's statistics, NotFound when unknown.
func (r *Runtime) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.findContainerLocked(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	now := r.clock.Now()
	c.observe(now)
	return &runtimeapi.ContainerStatsResponse{Stats: c.stats(now.UnixNano())}, nil
}

// ListContainerStats returns the statistics of the containers the filter
// picks (all when none).
func (r *Runtime) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f := req.GetFilter()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	resp := &runtimeapi.ListContainerStatsResponse{}
	for _, c := range r.containers {
		c.observe(now)
		if f.GetId() != "" && !strings.HasPrefix(c.id, f.GetId()) {
			continue
		}
		if f.GetPodSandboxId() != "" && !strings.HasPrefix(c.sandboxID, f.GetPodSandboxId()) {
			continue
		}
		if !matchLabels(c.labels, f.GetLabelSelector()) {
			continue
		}
		resp.Stats = append(resp.Stats, c.stats(now.UnixNano()))
	}
	return resp, nil
}
