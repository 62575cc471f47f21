// This file holds the node agent's resource statistics: the kubelet's
// Summary API (GET /stats/summary on the log server) built from the
// runtime's CRI ListContainerStats, which the API service reads to answer
// metrics.k8s.io as metrics-server does from the kubelets. Only running
// containers count; a pod's and the node's usage are their containers'
// sums (the CRI has no node-level statistics: the agent does not read the
// host's cgroups, so processes outside pods are not counted).

package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Summary is the kubelet's stats summary of a's node: CPU and memory of
// every running container of its pods, per pod and for the node.
func (a *Agent) Summary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	rt := a.cfg.Runtime.Runtime()
	running, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{labelNode: a.cfg.NodeName},
	}})
	if err != nil {
		return nil, fmt.Errorf("listing running containers: %w", err)
	}
	started := map[string]int64{}
	for _, c := range running.GetContainers() {
		started[c.GetId()] = c.GetCreatedAt()
	}
	st, err := rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{
		LabelSelector: map[string]string{labelNode: a.cfg.NodeName}}})
	if err != nil {
		return nil, fmt.Errorf("listing container stats: %w", err)
	}
	now := metav1.NewTime(time.Now())
	var nodeCPU, nodeMem uint64
	pods := map[statsv1alpha1.PodReference]*statsv1alpha1.PodStats{}
	var order []statsv1alpha1.PodReference
	for _, s := range st.GetStats() {
		at := s.GetAttributes()
		if _, ok := started[at.GetId()]; !ok {
			continue
		}
		l := at.GetLabels()
		ref := statsv1alpha1.PodReference{Name: l[labelPodName], Namespace: l[labelPodNamespace], UID: l[labelPodUID]}
		ps := pods[ref]
		if ps == nil {
			ps = &statsv1alpha1.PodStats{PodRef: ref, StartTime: now, Containers: []statsv1alpha1.ContainerStats{},
				CPU:    &statsv1alpha1.CPUStats{Time: now, UsageNanoCores: new(uint64), UsageCoreNanoSeconds: new(uint64)},
				Memory: &statsv1alpha1.MemoryStats{Time: now, WorkingSetBytes: new(uint64), UsageBytes: new(uint64)}}
			pods[ref] = ps
			order = append(order, ref)
		}
		cpu, cum := s.GetCpu().GetUsageNanoCores().GetValue(), s.GetCpu().GetUsageCoreNanoSeconds().GetValue()
		ws, usage := s.GetMemory().GetWorkingSetBytes().GetValue(), s.GetMemory().GetUsageBytes().GetValue()
		t := metav1.NewTime(time.Unix(0, s.GetCpu().GetTimestamp()))
		if s.GetCpu().GetTimestamp() == 0 {
			t = now
		}
		ps.Containers = append(ps.Containers, statsv1alpha1.ContainerStats{
			Name: l[labelContainerName], StartTime: metav1.NewTime(time.Unix(0, started[at.GetId()])),
			CPU:    &statsv1alpha1.CPUStats{Time: t, UsageNanoCores: &cpu, UsageCoreNanoSeconds: &cum},
			Memory: &statsv1alpha1.MemoryStats{Time: t, WorkingSetBytes: &ws, UsageBytes: &usage},
		})
		*ps.CPU.UsageNanoCores += cpu
		*ps.CPU.UsageCoreNanoSeconds += cum
		*ps.Memory.WorkingSetBytes += ws
		*ps.Memory.UsageBytes += usage
		nodeCPU += cpu
		nodeMem += ws
	}
	sum := &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: a.cfg.NodeName, StartTime: now,
		CPU:    &statsv1alpha1.CPUStats{Time: now, UsageNanoCores: &nodeCPU},
		Memory: &statsv1alpha1.MemoryStats{Time: now, WorkingSetBytes: &nodeMem}}, Pods: []statsv1alpha1.PodStats{}}
	for _, ref := range order {
		sum.Pods = append(sum.Pods, *pods[ref])
	}
	return sum, nil
}

// serveSummary answers GET /stats/summary?node=NAME: the summary of that
// node's agent (node may be left out when the server has one agent).
func (s *LogServer) serveSummary(w http.ResponseWriter, r *http.Request) {
	node := r.URL.Query().Get("node")
	s.mu.RLock()
	var a *Agent
	for _, x := range s.agents {
		if x.cfg.NodeName == node || (node == "" && len(s.agents) == 1) {
			a = x
		}
	}
	s.mu.RUnlock()
	if a == nil {
		http.Error(w, fmt.Sprintf("no node %q here", node), http.StatusNotFound)
		return
	}
	sum, err := a.Summary(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(sum)
}
