// This file holds what the agent does with what the runtime already has: a
// restarted agent adopts a pod's existing sandbox and containers, and
// removes sandboxes whose pod is no longer bound to its node.

package nodeagent

import (
	"context"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/nodeagent/cri"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// adopt fills a new record from what the runtime already holds for the
// pod — a restarted agent takes its pods back instead of starting them
// again: the ready sandbox, each container's newest instance as current
// and the one before as last. Sandboxes that are not ready are removed.
func (a *Agent) adopt(ctx context.Context, pod *corev1.Pod, rec *podRecord) error {
	uid := pod.GetMetadata().GetUid()
	sbs, err := a.cfg.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodUID: uid}})
	if err != nil {
		return err
	}
	for _, sb := range sbs {
		if sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY || rec.sandboxID != "" {
			a.removeSandbox(ctx, sb.GetId())
			continue
		}
		rec.sandboxID = sb.GetId()
	}
	if rec.sandboxID == "" {
		return nil
	}
	rec.sandboxCfg = a.sandboxConfig(pod, rec)
	// The sandbox already has its resolv.conf; the config is formed again
	// (without recording its warnings twice) so that later containers are
	// created with the same sandbox config as the first ones.
	if dns, _, err := podDNS(pod, a.dnsSettings()); err == nil {
		rec.sandboxCfg.DnsConfig = dns
	}
	if pod.GetSpec().GetHostNetwork() || a.cfg.HostNetwork {
		rec.podIP = a.cfg.HostIP
	} else if st, err := a.cfg.Runtime.PodSandboxStatus(ctx, rec.sandboxID); err == nil {
		rec.podIP = st.GetNetwork().GetIp()
	}
	cs, err := a.cfg.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: rec.sandboxID})
	if err != nil {
		return err
	}
	byName := map[string][]*runtimeapi.Container{}
	for _, c := range cs {
		n := c.GetMetadata().GetName()
		byName[n] = append(byName[n], c)
	}
	for name, list := range byName {
		c := rec.ctrs[name]
		if c == nil {
			continue
		}
		sort.Slice(list, func(i, j int) bool { return list[i].GetMetadata().GetAttempt() > list[j].GetMetadata().GetAttempt() })
		cur := list[0]
		st, err := a.cfg.Runtime.ContainerStatus(ctx, cur.GetId())
		if err != nil {
			return err
		}
		attempt := cur.GetMetadata().GetAttempt()
		c.id, c.status = cur.GetId(), st
		c.logPath = filepath.Join(rec.logDir, name, strconv.Itoa(int(attempt))+".log")
		addTerminationMessage(ctx, st, c.logPath)
		c.attempt, c.restarts = attempt+1, int32(attempt)
		c.probes = probeStates{}
		if spec := containerSpec(pod.GetSpec(), name); spec != nil {
			c.probes.hasStartup, c.probes.hasReadiness = spec.GetStartupProbe() != nil, spec.GetReadinessProbe() != nil
		}
		if len(list) > 1 {
			if prev, err := a.cfg.Runtime.ContainerStatus(ctx, list[1].GetId()); err == nil {
				c.last = prev
				c.lastLog = filepath.Join(rec.logDir, name, strconv.Itoa(int(list[1].GetMetadata().GetAttempt()))+".log")
				addTerminationMessage(ctx, prev, c.lastLog)
			}
			for _, old := range list[2:] {
				c.garbage = append(c.garbage, old.GetId())
			}
		}
	}
	return nil
}

// removeSandbox stops and removes a sandbox (and its containers).
func (a *Agent) removeSandbox(ctx context.Context, id string) {
	if err := a.cfg.Runtime.StopPodSandbox(ctx, id); err != nil && !cri.IsNotFound(err) {
		a.log.Warn("stop sandbox failed", "id", id, "err", err)
	}
	if err := a.cfg.Runtime.RemovePodSandbox(ctx, id); err != nil && !cri.IsNotFound(err) {
		a.log.Warn("remove sandbox failed", "id", id, "err", err)
	}
}

// stopContainers stops a sandbox's running containers of pod with grace,
// in parallel, each after its preStop hook (podIP: where an httpGet hook
// goes by default).
func (a *Agent) stopContainers(ctx context.Context, pod *corev1.Pod, sandboxID, podIP string, grace time.Duration) {
	cs, err := a.cfg.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: sandboxID})
	if err != nil {
		a.log.Warn("listing a sandbox's containers failed", "id", sandboxID, "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		wg.Add(1)
		go func(id, name string) {
			defer wg.Done()
			init := slices.ContainsFunc(pod.GetSpec().GetInitContainers(), func(c *corev1.Container) bool { return c.GetName() == name })
			fp := fieldPath(pod.GetSpec(), &ctrState{name: name, init: init})
			a.killContainer(ctx, pod, containerSpec(pod.GetSpec(), name), fp, id, podIP, grace)
		}(c.GetId(), c.GetMetadata().GetName())
	}
	wg.Wait()
}

// collectOrphans removes this node's sandboxes whose pod is no longer bound
// here (deleted while the agent was down). Run once the informer synced.
func (a *Agent) collectOrphans(ctx context.Context) {
	defer func() {
		live := map[string]bool{}
		for _, p := range a.informer.Store().List() {
			live[p.GetMetadata().GetUid()] = true
		}
		a.collectOrphanedVolumes(live)
	}()
	sbs, err := a.cfg.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelNode: a.cfg.NodeName}})
	if err != nil {
		a.log.Warn("listing sandboxes for orphans failed", "err", err)
		return
	}
	live := map[string]bool{}
	for _, p := range a.informer.Store().List() {
		live[p.GetMetadata().GetUid()] = true
	}
	for _, sb := range sbs {
		if !live[sb.GetLabels()[labelPodUID]] {
			a.log.Info("removing an orphaned sandbox", "id", sb.GetId(), "pod", sb.GetLabels()[labelPodNamespace]+"/"+sb.GetLabels()[labelPodName])
			a.removeSandbox(ctx, sb.GetId())
		}
	}
}
