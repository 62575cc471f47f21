// This file holds the pod state machine: what the agent knows of each
// container, what a sync should do next, and the pod phase, container
// statuses and conditions it writes, as the kubelet computes them.

package nodeagent

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// Pod phases, restart policies and container waiting reasons, as Kubernetes
// spells them.
const (
	PhasePending   = "Pending"
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"

	RestartAlways    = "Always"
	RestartOnFailure = "OnFailure"
	RestartNever     = "Never"

	ReasonContainerCreating = "ContainerCreating"
	ReasonPodInitializing   = "PodInitializing"
	ReasonCrashLoopBackOff  = "CrashLoopBackOff"
	ReasonErrImagePull      = "ErrImagePull"
	ReasonImagePullBackOff  = "ImagePullBackOff"
	ReasonErrImageNeverPull = "ErrImageNeverPull"
	ReasonCreateContainer   = "CreateContainerError"
	ReasonCreateConfig      = "CreateContainerConfigError"
	ReasonRunContainer      = "RunContainerError"
)

// ctrState is what the agent knows about one container of a pod.
type ctrState struct {
	name string
	init bool
	// ephemeral: one of the pod's ephemeral containers (kubectl debug),
	// started once, never restarted, outside the pod's phase and readiness.
	ephemeral bool

	// id and status are the current instance ("" / nil: none); an exited
	// instance stays current only if it will not be restarted.
	id     string
	status *runtimeapi.ContainerStatus
	// last is the previous instance, terminated (lastState, previous logs).
	last *runtimeapi.ContainerStatus
	// lastLog is the log path of last.
	lastLog string
	logPath string // of the current instance
	// attempt is the next instance's attempt number; restarts counts the
	// instances started after the first.
	attempt  uint32
	restarts int32
	// backoffUntil: no restart before it (CrashLoopBackOff).
	backoffUntil time.Time
	backoffDelay time.Duration
	// waiting, waitingMsg: why there is no running instance.
	waiting, waitingMsg string
	// pullFailures counts failed pulls in a row; no pull before pullUntil.
	pullFailures int
	pullUntil    time.Time
	imageRef     string

	probes probeStates
	// garbage are exited instances older than last, to remove.
	garbage []string
}

// exited reports whether the current instance has exited.
func (c *ctrState) exited() bool {
	return c.status != nil && c.status.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED
}

func (c *ctrState) running() bool {
	return c.status != nil && c.status.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING
}

// succeeded reports whether the current instance exited 0.
func (c *ctrState) succeeded() bool { return c.exited() && c.status.GetExitCode() == 0 }

// shouldRestart applies restartPolicy to an exit code.
func shouldRestart(policy string, exitCode int32) bool {
	switch policy {
	case RestartNever:
		return false
	case RestartOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

// observe records a fresh CRI status of the current instance. An instance
// that exited and will be restarted becomes last, and the restart waits
// out the back-off (CrashLoopBackOff).
func (c *ctrState) observe(st *runtimeapi.ContainerStatus, policy string, b Backoff) {
	c.status = st
	if !c.exited() || !shouldRestart(policy, st.GetExitCode()) {
		return
	}
	finished := time.Unix(0, st.GetFinishedAt())
	started := time.Unix(0, st.GetStartedAt())
	// A container that ran well past the longest back-off starts over.
	if st.GetStartedAt() != 0 && finished.Sub(started) > 2*b.Max {
		c.restarts, c.backoffDelay = 0, 0
	}
	c.backoffDelay = b.Delay(int(c.restarts))
	c.backoffUntil = finished.Add(c.backoffDelay)
	if c.last != nil {
		c.garbage = append(c.garbage, c.last.GetId())
	}
	c.last, c.lastLog = st, c.logPath
	c.id, c.status, c.logPath = "", nil, ""
	c.waiting, c.waitingMsg = ReasonCrashLoopBackOff, ""
}

// plan is what one sync should do next.
type plan struct {
	// start names the containers to start now.
	start []*ctrState
	// wait, when > 0, is when the pod must be synced again at the latest.
	wait time.Duration
	// initialized: every init container completed.
	initialized bool
	// failed: an init container failed and will not be restarted.
	failed bool
}

// computePlan decides which containers to start: init containers one at a
// time, each to completion, then every container that is not running and
// may (re)start now.
func computePlan(spec *corev1.PodSpec, ctrs map[string]*ctrState, now time.Time) plan {
	var p plan
	soonest := func(t time.Time) {
		if d := t.Sub(now); d > 0 && (p.wait == 0 || d < p.wait) {
			p.wait = d
		}
	}
	ready := func(c *ctrState) bool {
		if now.Before(c.backoffUntil) {
			soonest(c.backoffUntil)
			return false
		}
		return true
	}
	for _, ic := range spec.GetInitContainers() {
		c := ctrs[ic.GetName()]
		switch {
		case c.succeeded():
			continue
		case c.exited(): // not restarted: restartPolicy Never
			p.failed = true
			return p
		case c.status != nil: // created or running: wait for it
			return p
		}
		if ready(c) {
			p.start = append(p.start, c)
		}
		return p
	}
	p.initialized = true
	for _, mc := range spec.GetContainers() {
		c := ctrs[mc.GetName()]
		if c.status != nil {
			continue
		}
		if ready(c) {
			p.start = append(p.start, c)
		}
	}
	// Ephemeral containers start once each, as the kubelet starts them
	// (a failed start is tried again; an exited one is never restarted).
	for _, ec := range spec.GetEphemeralContainers() {
		c := ctrs[ec.GetEphemeralContainerCommon().GetName()]
		if c == nil || c.status != nil {
			continue
		}
		if ready(c) {
			p.start = append(p.start, c)
		}
	}
	return p
}

// podPhase is the kubelet's phase rule over the containers' states.
func podPhase(spec *corev1.PodSpec, ctrs map[string]*ctrState, p plan) string {
	if p.failed {
		return PhaseFailed
	}
	if !p.initialized {
		return PhasePending
	}
	var pending, running, stopped, failed int
	for _, mc := range spec.GetContainers() {
		c := ctrs[mc.GetName()]
		switch {
		case c.running():
			running++
		case c.exited():
			stopped++
			if c.status.GetExitCode() != 0 {
				failed++
			}
		case c.last != nil: // waiting to restart
			stopped++
			if c.last.GetExitCode() != 0 {
				failed++
			}
		default:
			pending++
		}
	}
	switch {
	case pending > 0:
		return PhasePending
	case running > 0:
		return PhaseRunning
	case stopped > 0:
		policy := spec.GetRestartPolicy()
		if policy == RestartAlways || policy == "" || (policy == RestartOnFailure && failed > 0) {
			return PhaseRunning
		}
		if failed > 0 {
			return PhaseFailed
		}
		return PhaseSucceeded
	}
	return PhasePending
}

// ts converts CRI nanoseconds to a second-precision timestamp (what the API
// keeps), nil for 0.
func ts(ns int64) *timestamppb.Timestamp {
	if ns == 0 {
		return nil
	}
	return timestamppb.New(time.Unix(0, ns).Truncate(time.Second))
}

// terminated is the API form of an exited instance.
func terminated(st *runtimeapi.ContainerStatus) *corev1.ContainerStateTerminated {
	reason := st.GetReason()
	if reason == "" {
		reason = "Error"
		if st.GetExitCode() == 0 {
			reason = "Completed"
		}
	}
	return &corev1.ContainerStateTerminated{
		ExitCode:    st.GetExitCode(),
		Reason:      reason,
		Message:     st.GetMessage(),
		StartedAt:   ts(st.GetStartedAt()),
		FinishedAt:  ts(st.GetFinishedAt()),
		ContainerId: "cri://" + st.GetId(),
	}
}

// containerStatus is the API status of one container.
func containerStatus(spec *corev1.Container, c *ctrState, runtimeName string, initialized bool) *corev1.ContainerStatus {
	cs := &corev1.ContainerStatus{
		Name:         spec.GetName(),
		Image:        spec.GetImage(),
		RestartCount: c.restarts,
		State:        &corev1.ContainerState{},
	}
	if c.last != nil {
		t := terminated(c.last)
		t.ContainerId = runtimeName + "://" + c.last.GetId()
		cs.LastTerminationState = &corev1.ContainerState{Terminated: t}
	}
	started := false
	switch {
	case c.running():
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: ts(c.status.GetStartedAt())}
		started = c.probes.started()
		cs.Ready = started && c.probes.ready()
	case c.exited():
		t := terminated(c.status)
		t.ContainerId = runtimeName + "://" + c.status.GetId()
		cs.State.Terminated = t
	default:
		reason, msg := c.waiting, c.waitingMsg
		if reason == "" {
			// As the kubelet: a container not created yet in a pod with
			// init containers is waiting for the pod to initialize.
			reason = ReasonContainerCreating
			if c.init || !initialized {
				reason = ReasonPodInitializing
			}
		}
		if reason == ReasonCrashLoopBackOff && msg == "" {
			msg = fmt.Sprintf("back-off %s restarting failed container=%s", c.backoffDelay, c.name)
		}
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
	}
	if c.status != nil {
		cs.ContainerId = runtimeName + "://" + c.status.GetId()
		cs.ImageId = c.status.GetImageRef()
	} else if c.last != nil {
		cs.ImageId = c.last.GetImageRef()
	}
	if !c.init {
		cs.Started = &started
	}
	if c.init && c.succeeded() {
		cs.Ready = true
	}
	return cs
}

// agentCondition reports whether the node agent computes and owns pod
// conditions of type t; a pod's other conditions are left as they are.
func agentCondition(t string) bool {
	switch t {
	case "PodScheduled", "Initialized", "Ready", "ContainersReady":
		return true
	}
	return false
}

// condition returns a PodCondition of type t, keeping the transition time
// of old's condition of that type when its status is unchanged.
func condition(old *corev1.PodStatus, t string, ok bool, reason, message string, now time.Time) *corev1.PodCondition {
	s := "False"
	if ok {
		s, reason, message = "True", "", ""
	}
	c := &corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: message, LastTransitionTime: timestamppb.New(now.Truncate(time.Second))}
	for _, oc := range old.GetConditions() {
		if oc.GetType() == t && oc.GetStatus() == s {
			c.LastTransitionTime = oc.GetLastTransitionTime()
		}
	}
	return c
}
