// This file holds the pod status the agent writes: phase, IPs, container
// statuses and the conditions it owns (keeping those it does not), written
// only when it changed.

package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// writeStatus computes the pod's status and writes it through pods/status
// if it changed.
func (a *Agent) writeStatus(ctx context.Context, pod *corev1.Pod, rec *podRecord, p plan, now time.Time) error {
	old := pod.GetStatus()
	spec := pod.GetSpec()
	phase := PhasePending
	if rec.sandboxID != "" {
		phase = podPhase(spec, rec.ctrs, p)
	}
	var reason, message string
	if rec.deadlineExceeded {
		phase, reason, message = PhaseFailed, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
	}
	st := &corev1.PodStatus{
		Phase:             phase,
		Reason:            reason,
		Message:           message,
		HostIp:            a.cfg.HostIP,
		HostIps:           []*corev1.HostIP{{Ip: a.cfg.HostIP}},
		StartTime:         timestamppb.New(rec.startTime.Truncate(time.Second)),
		QosClass:          old.GetQosClass(),
		NominatedNodeName: old.GetNominatedNodeName(),
	}
	if rec.podIP != "" {
		st.PodIp, st.PodIps = rec.podIP, []*corev1.PodIP{{Ip: rec.podIP}}
	}
	// The conditions' messages name the containers, as the kubelet's do.
	var incomplete, unready []string
	for _, cs := range spec.GetInitContainers() {
		s := containerStatus(cs, rec.ctrs[cs.GetName()], a.rtName, p.initialized)
		if t := s.GetState().GetTerminated(); t == nil || t.GetExitCode() != 0 {
			incomplete = append(incomplete, cs.GetName())
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, s)
	}
	allReady := true
	for _, cs := range spec.GetContainers() {
		s := containerStatus(cs, rec.ctrs[cs.GetName()], a.rtName, p.initialized)
		allReady = allReady && s.GetReady()
		if !s.GetReady() {
			unready = append(unready, cs.GetName())
		}
		st.ContainerStatuses = append(st.ContainerStatuses, s)
	}
	// Ephemeral containers: neither ready nor started, as the kubelet
	// reports them (its prober does not look at them).
	for _, ec := range spec.GetEphemeralContainers() {
		name := ec.GetEphemeralContainerCommon().GetName()
		c := rec.ctrs[name]
		if c == nil {
			continue
		}
		s := containerStatus(containerSpec(spec, name), c, a.rtName, p.initialized)
		s.Ready, s.Started = false, nil
		st.EphemeralContainerStatuses = append(st.EphemeralContainerStatuses, s)
	}
	boundTerminationMessages(st, len(spec.GetInitContainers())+len(spec.GetContainers())+len(spec.GetEphemeralContainers()))
	if phase == PhaseSucceeded || phase == PhaseFailed {
		allReady = false
	}
	notReady, unreadyMsg := "ContainersNotReady", ""
	if len(unready) > 0 {
		unreadyMsg = fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	}
	if phase == PhaseSucceeded || phase == PhaseFailed {
		notReady, unreadyMsg = "PodCompleted", ""
	}
	initMsg := ""
	if len(incomplete) > 0 {
		initMsg = fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(incomplete, " "))
	}
	scheduled := condition(old, "PodScheduled", true, "", "", now)
	st.Conditions = []*corev1.PodCondition{
		condition(old, "Initialized", p.initialized, "ContainersNotInitialized", initMsg, now),
		condition(old, "Ready", allReady, notReady, unreadyMsg, now),
		condition(old, "ContainersReady", allReady, notReady, unreadyMsg, now),
		scheduled,
	}
	// Conditions the node does not own (DisruptionTarget, readiness
	// gates' conditions, anything a controller or user set) are kept, as
	// the kubelet keeps them.
	for _, oc := range old.GetConditions() {
		if !agentCondition(oc.GetType()) {
			st.Conditions = append(st.Conditions, oc)
		}
	}
	if proto.Equal(old, st) {
		return nil
	}
	upd := proto.Clone(pod).(*corev1.Pod)
	upd.Status = st
	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	actx, span := a.tracer.Start(actx, "status.update", trace.WithAttributes(attribute.String("k8s.pod.phase", st.GetPhase())))
	defer span.End()
	_, err := a.pods.UpdateStatus(actx, upd)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// A newer pod is on its way through the informer; it re-queues.
		return nil
	}
	if err != nil {
		return fmt.Errorf("update pod status: %w", err)
	}
	return nil
}
