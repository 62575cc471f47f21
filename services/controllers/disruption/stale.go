// This file holds the disruption controller's second loop, as Kubernetes':
// a pod marked DisruptionTarget (by an eviction, or by taint eviction) that
// is still not being deleted StalePodDisruptionTimeout later gets the
// condition set back to False, so that it does not read as about to go.
package disruption

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// StalePodDisruptionTimeout is how long a DisruptionTarget condition may
// stand on a pod that is not being deleted (Kubernetes' 2 minutes).
const StalePodDisruptionTimeout = 2 * time.Minute

// PodClient writes pods' status (*client.Client[*corev1.Pod]).
type PodClient interface {
	UpdateStatus(ctx context.Context, obj *corev1.Pod) (*corev1.Pod, error)
}

// staleDisruption reports whether pod carries a DisruptionTarget condition
// that will go stale, and in how long (0: now). The kubelet's own
// (TerminationByKubelet) and a finished or terminating pod's never do.
func (c *Controller) staleDisruption(pod *corev1.Pod) (bool, time.Duration) {
	if pod.GetMetadata().GetDeletionTimestamp() != nil {
		return false, 0
	}
	switch pod.GetStatus().GetPhase() {
	case "Succeeded", "Failed":
		return false, 0
	}
	for _, cond := range pod.GetStatus().GetConditions() {
		if cond.GetType() != "DisruptionTarget" {
			continue
		}
		if cond.GetStatus() != "True" || cond.GetReason() == "TerminationByKubelet" {
			return false, 0
		}
		return true, max(StalePodDisruptionTimeout-c.now().Sub(cond.GetLastTransitionTime().AsTime()), 0)
	}
	return false, 0
}

// enqueueStale queues pod for the stale-condition check when its condition
// will have gone stale.
func (c *Controller) enqueueStale(pod *corev1.Pod) {
	if has, after := c.staleDisruption(pod); has {
		c.stale.AddAfter(client.Key(pod), after)
	}
}

// ReconcileStalePod sets the stale DisruptionTarget condition of the pod
// key to False.
func (c *Controller) ReconcileStalePod(ctx context.Context, key string) (client.Result, error) {
	pod, ok := c.cfg.PodInformer.Store().Get(key)
	if !ok {
		return client.Result{}, nil
	}
	has, after := c.staleDisruption(pod)
	if !has {
		return client.Result{}, nil
	}
	if after > 0 {
		return client.Result{RequeueAfter: after}, nil
	}
	u := proto.Clone(pod).(*corev1.Pod)
	for i, cond := range u.Status.Conditions {
		if cond.GetType() == "DisruptionTarget" {
			u.Status.Conditions[i] = &corev1.PodCondition{Type: "DisruptionTarget", Status: "False",
				LastTransitionTime: timestamppb.New(c.now().Truncate(time.Second))}
		}
	}
	if _, err := c.cfg.Pods.UpdateStatus(ctx, u); err != nil && !apierrors.IsNotFound(err) {
		return client.Result{}, fmt.Errorf("disruption: reset DisruptionTarget of %s: %w", key, err)
	}
	c.log.InfoContext(ctx, "reset stale DisruptionTarget condition to False", "pod", key)
	return client.Result{}, nil
}
