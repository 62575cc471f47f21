// This file holds how a pod leaves the node: graceful termination of its
// containers, then its sandbox, volumes and record.

package nodeagent

import (
	"context"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// terminate stops a pod being deleted: every running container with the
// grace period (in parallel), then the sandbox, then confirms the deletion
// with a delete of grace 0.
func (a *Agent) terminate(ctx context.Context, key string, pod *corev1.Pod, rec *podRecord) (time.Duration, error) {
	grace := gracePeriod(pod, nil)
	if rec == nil {
		// Not synced by this agent (it restarted): whatever the runtime holds.
		sbs, err := a.cfg.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodUID: pod.GetMetadata().GetUid()}})
		if err != nil {
			return time.Second, fmt.Errorf("list sandboxes: %w", err)
		}
		for _, sb := range sbs {
			a.stopContainers(ctx, pod, sb.GetId(), pod.GetStatus().GetPodIp(), grace)
			a.removeSandbox(ctx, sb.GetId())
		}
		if err := a.tearDownVolumes(pod.GetMetadata().GetUid()); err != nil {
			return time.Second, fmt.Errorf("tear down volumes: %w", err)
		}
	} else {
		rec.mu.Lock()
		for _, c := range rec.ctrs {
			if c.running() {
				a.rec.FieldEventf(pod, fieldPath(pod.GetSpec(), c), client.EventNormal, "Killing", "Stopping container %s", c.name)
			}
		}
		err := a.teardown(ctx, pod, rec, grace)
		rec.mu.Unlock()
		if err != nil {
			// The deletion is confirmed once nothing of the pod is left
			// on the node, as the kubelet waits for its volumes.
			return time.Second, fmt.Errorf("tear down volumes: %w", err)
		}
		a.dropRecord(key, rec)
	}
	zero := int64(0)
	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	err := a.pods.Delete(actx, pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(),
		client.DeleteOptions{GracePeriodSeconds: &zero, UID: pod.GetMetadata().GetUid()})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return time.Second, fmt.Errorf("confirm deletion: %w", err)
	}
	return 0, nil
}

// teardown stops the pod's running containers with grace (in parallel,
// each after its preStop hook; pod nil: the pod is gone, no hook runs),
// then stops and removes the sandbox (and so its containers), then
// unmounts and removes the pod's volumes; an error is a volume left.
func (a *Agent) teardown(ctx context.Context, pod *corev1.Pod, rec *podRecord, grace time.Duration) error {
	var wg sync.WaitGroup
	for _, c := range rec.ctrs {
		if c.id == "" || c.exited() {
			continue
		}
		wg.Add(1)
		go func(c *ctrState, id string) {
			defer wg.Done()
			a.killContainer(ctx, pod, containerSpec(pod.GetSpec(), c.name), fieldPath(pod.GetSpec(), c), id, rec.podIP, grace)
		}(c, c.id)
	}
	wg.Wait()
	if rec.sandboxID != "" {
		if err := a.cfg.Runtime.StopPodSandbox(ctx, rec.sandboxID); err != nil && !cri.IsNotFound(err) {
			a.log.Warn("stop sandbox failed", "id", rec.sandboxID, "err", err)
		}
		if err := a.cfg.Runtime.RemovePodSandbox(ctx, rec.sandboxID); err != nil && !cri.IsNotFound(err) {
			a.log.Warn("remove sandbox failed", "id", rec.sandboxID, "err", err)
		}
		for _, c := range rec.ctrs {
			c.id, c.status = "", nil
		}
		rec.sandboxID = ""
	}
	rec.volumes, rec.volumesReady, rec.tokens = nil, false, nil
	return a.tearDownVolumes(rec.uid)
}
