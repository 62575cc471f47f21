// This file records why a pod could not be scheduled: a FailedScheduling
// event and the PodScheduled=False condition.
package scheduler

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// setCondition writes PodScheduled=False with reason and msg into the
// pod's status, retrying on Conflict with a fresh read. It does nothing if
// the pod is gone or bound, or already says exactly that.
func (s *Scheduler) setCondition(ctx context.Context, pi *framework.PodInfo, reason, msg string) error {
	m := pi.Pod.GetMetadata()
	pod, ok := s.podInf.Store().Get(pi.Key)
	for attempt := 0; attempt < 3; attempt++ {
		if !ok || pod.GetMetadata().GetUid() != m.GetUid() || pod.GetSpec().GetNodeName() != "" {
			return nil
		}
		next := proto.Clone(pod).(*corev1.Pod)
		if !setPodScheduledFalse(next, reason, msg, time.Now()) {
			return nil
		}
		_, err := s.pods.UpdateStatus(ctx, next)
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh, err := s.pods.Get(ctx, m.GetNamespace(), m.GetName())
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		pod, ok = fresh, true
	}
	return fmt.Errorf("scheduler: pod %s kept changing", pi.Key)
}

// setPodScheduledFalse sets the condition on pod and reports whether
// anything changed. The transition time moves only when the status does.
func setPodScheduledFalse(pod *corev1.Pod, reason, msg string, now time.Time) bool {
	if pod.Status == nil {
		pod.Status = &corev1.PodStatus{}
	}
	for _, c := range pod.Status.Conditions {
		if c.GetType() != "PodScheduled" {
			continue
		}
		if c.GetStatus() == "False" && c.GetReason() == reason && c.GetMessage() == msg {
			return false
		}
		if c.GetStatus() != "False" {
			c.LastTransitionTime = timestamppb.New(now)
		}
		c.Status, c.Reason, c.Message = "False", reason, msg
		c.LastProbeTime = nil
		return true
	}
	pod.Status.Conditions = append(pod.Status.Conditions, &corev1.PodCondition{
		Type: "PodScheduled", Status: "False", Reason: reason, Message: msg, LastTransitionTime: timestamppb.New(now)})
	if pod.Status.Phase == "" {
		pod.Status.Phase = "Pending"
	}
	return true
}
