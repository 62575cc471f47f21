// This file holds the sync of one pod: its record of runtime objects and
// the step a sync takes next (start.go starts the sandbox and containers,
// proberun.go runs probes, podstatus.go writes the status, teardown.go
// ends the pod), refreshing each container's state from the runtime.

package nodeagent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/nodeagent/cri"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// podRecord is the agent's memory of one pod's runtime objects. The work
// queue syncs a key in one worker at a time; mu also guards readers (the
// log server).
type podRecord struct {
	mu         sync.Mutex
	uid        string
	logDir     string
	sandboxID  string
	sandboxCfg *runtimeapi.PodSandboxConfig
	podIP      string
	startTime  time.Time
	ctrs       map[string]*ctrState
	// sandbox creation back-off
	sandboxFailures int
	sandboxUntil    time.Time
	sandboxStopped  bool
	// deadlineExceeded: activeDeadlineSeconds passed; the pod failed.
	deadlineExceeded bool
	// volumes: where the pod's volumes are on the host, once all of them
	// were set up (volumesReady); refreshed at most every ResyncInterval
	// (volumesAt) and when a token is due.
	volumes      map[string]volumePath
	volumesReady bool
	volumesAt    time.Time
	tokens       map[string]cachedToken // by volume/source index
}

func (a *Agent) record(key string) *podRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.records[key]
}

func (a *Agent) newRecord(key string, pod *corev1.Pod) *podRecord {
	r := &podRecord{uid: pod.GetMetadata().GetUid(), logDir: a.podLogDir(pod), ctrs: map[string]*ctrState{}, startTime: time.Now()}
	if st := pod.GetStatus().GetStartTime(); st != nil {
		r.startTime = st.AsTime()
	}
	for _, c := range pod.GetSpec().GetInitContainers() {
		r.ctrs[c.GetName()] = &ctrState{name: c.GetName(), init: true}
	}
	for _, c := range pod.GetSpec().GetContainers() {
		r.ctrs[c.GetName()] = &ctrState{name: c.GetName()}
	}
	addEphemeral(pod, r)
	a.mu.Lock()
	a.records[key] = r
	a.mu.Unlock()
	return r
}

// traceFrom returns the pod's annotations if its trace annotation changed
// since the last sync that continued it, else nil.
func (a *Agent) traceFrom(key string) map[string]string {
	pod, ok := a.informer.Store().Get(key)
	if !ok {
		return nil
	}
	ann := pod.GetMetadata().GetAnnotations()
	v := ann[telemetry.Annotation]
	a.mu.Lock()
	defer a.mu.Unlock()
	if v == "" || a.traced[key] == v {
		return nil
	}
	a.traced[key] = v
	return ann
}

func (a *Agent) dropRecord(key string, r *podRecord) {
	a.mu.Lock()
	delete(a.traced, key)
	if a.records[key] == r {
		delete(a.records, key)
	}
	a.mu.Unlock()
	a.rec.Forget(r.uid)
	a.watches.unregister(r.uid)
}

// syncPod reconciles one pod, the agent's client.Reconciler: a
// RequeueAfter asks for another sync after it.
func (a *Agent) syncPod(ctx context.Context, key string) (res client.Result, err error) {
	// One span per sync: the CRI calls (otelgrpc on the CRI client) and the
	// API calls made for the pod are its children.
	// It continues the pod's trace when the pod changed since the last
	// traced sync (see internal/telemetry).
	ctx, span := telemetry.StartFromObject(ctx, a.tracer, "nodeagent.syncPod", a.traceFrom(key),
		trace.WithAttributes(attribute.String("k8s.pod", key), attribute.String("k8s.node.name", a.cfg.NodeName)))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	pod, ok := a.informer.Store().Get(key)
	rec := a.record(key)
	if rec != nil && (!ok || rec.uid != pod.GetMetadata().GetUid()) {
		// The pod is gone (or replaced by another with the same name).
		if err := a.teardown(ctx, nil, rec, 0); err != nil {
			a.log.Warn("removing the volumes of a gone pod failed", "pod", key, "err", err)
		}
		a.dropRecord(key, rec)
		rec = nil
	}
	if !ok {
		return client.Result{}, nil
	}
	if pod.GetMetadata().GetDeletionTimestamp() != nil {
		res.RequeueAfter, err = a.terminate(ctx, key, pod, rec)
		return res, err
	}
	if rec == nil {
		if ph := pod.GetStatus().GetPhase(); ph == PhaseSucceeded || ph == PhaseFailed {
			return client.Result{}, nil // finished before this agent knew it
		}
		rec = a.newRecord(key, pod)
		rec.mu.Lock()
		err := a.adopt(ctx, pod, rec)
		rec.mu.Unlock()
		if err != nil {
			a.dropRecord(key, rec)
			return client.Result{RequeueAfter: time.Second}, fmt.Errorf("adopt runtime state: %w", err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	res.RequeueAfter, err = a.syncLocked(ctx, pod, rec)
	return res, err
}

// syncLocked is one pass of the pod's state machine.
func (a *Agent) syncLocked(ctx context.Context, pod *corev1.Pod, rec *podRecord) (time.Duration, error) {
	now := time.Now()
	spec := pod.GetSpec()
	var wait time.Duration
	soonest := func(d time.Duration) {
		if d > 0 && (wait == 0 || d < wait) {
			wait = d
		}
	}

	if rec.sandboxStopped { // finished: nothing more to start
		return 0, a.writeStatus(ctx, pod, rec, computePlan(spec, rec.ctrs, now), now)
	}

	// The ConfigMaps and Secrets the pod uses are watched from its first
	// sync until it finishes or leaves the node (the kubelet registers a
	// pod at each sync until its termination is requested).
	a.watches.register(pod)

	// The volumes: none of the pod's containers starts before all of them
	// are set up (the pod stays ContainerCreating, with FailedMount events).
	ok, d := a.syncVolumes(ctx, pod, rec, now)
	if !ok {
		return d, a.writeStatus(ctx, pod, rec, computePlan(spec, rec.ctrs, now), now)
	}
	soonest(d)

	// The sandbox.
	if rec.sandboxID == "" {
		if now.Before(rec.sandboxUntil) {
			return rec.sandboxUntil.Sub(now), a.writeStatus(ctx, pod, rec, plan{}, now)
		}
		if err := a.runSandbox(ctx, pod, rec); err != nil {
			rec.sandboxFailures++
			d := a.cfg.Backoff.Delay(rec.sandboxFailures - 1)
			rec.sandboxUntil = now.Add(d)
			a.rec.FieldEventf(pod, "", client.EventWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
			return d, a.writeStatus(ctx, pod, rec, plan{}, now)
		}
	}

	// A sandbox that died (or was removed behind the agent's back) is
	// replaced: its containers are stopped, and restarted in the new one.
	if sb, err := a.cfg.Runtime.PodSandboxStatus(ctx, rec.sandboxID); cri.IsNotFound(err) || (err == nil && sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY) {
		a.rec.FieldEventf(pod, "", client.EventNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
		a.stopContainers(ctx, pod, rec.sandboxID, rec.podIP, gracePeriod(pod, nil))
		for _, c := range rec.ctrs {
			if c.id != "" && !c.exited() {
				a.refresh(ctx, c, spec.GetRestartPolicy())
			}
		}
		a.log.Info("pod sandbox gone; re-creating it", "pod", client.Key(pod), "sandbox", rec.sandboxID)
		a.removeSandbox(ctx, rec.sandboxID)
		rec.sandboxID, rec.podIP = "", ""
		return 10 * time.Millisecond, nil // at once, through the queue
	}

	// What the runtime says now (of ephemeral containers added since too).
	addEphemeral(pod, rec)
	policy := spec.GetRestartPolicy()
	for _, c := range rec.ctrs {
		if c.id == "" || c.exited() {
			continue
		}
		if c.ephemeral {
			a.refresh(ctx, c, RestartNever)
			continue
		}
		a.refresh(ctx, c, policy)
	}

	// A failed postStart hook's reason gives way to the back-off, as the
	// kubelet's next sync shows it.
	for _, c := range rec.ctrs {
		if c.waiting == ReasonPostStartHookError {
			c.waiting, c.waitingMsg = ReasonCrashLoopBackOff, ""
		}
	}

	// activeDeadlineSeconds: past it the pod fails and its containers stop.
	if d := spec.ActiveDeadlineSeconds; d != nil {
		deadline := rec.startTime.Add(time.Duration(*d) * time.Second)
		if !now.Before(deadline) {
			return 0, a.failDeadline(ctx, pod, rec)
		}
		soonest(deadline.Sub(now))
	}

	// Probes, then what to start.
	soonest(a.runProbes(ctx, pod, rec, now))
	p := computePlan(spec, rec.ctrs, now)
	for _, c := range p.start {
		if c.waiting == ReasonCrashLoopBackOff && c.last != nil {
			// The back-off is over: this is the restart.
			c.waiting = ""
		}
		soonest(a.startContainer(ctx, pod, rec, c))
	}
	if len(p.start) > 0 {
		soonest(a.runProbes(ctx, pod, rec, time.Now()))
	}
	p = computePlan(spec, rec.ctrs, time.Now())
	soonest(p.wait)
	for _, c := range rec.ctrs {
		if c.waiting == ReasonCrashLoopBackOff && time.Now().Before(c.backoffUntil) {
			a.rec.FieldEventf(pod, fieldPath(spec, c), client.EventWarning, "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)",
				c.name, pod.GetMetadata().GetName(), pod.GetMetadata().GetNamespace(), rec.uid)
		}
	}
	for _, c := range rec.ctrs {
		for _, id := range c.garbage {
			if err := a.cfg.Runtime.RemoveContainer(ctx, id); err != nil && !cri.IsNotFound(err) {
				a.log.Debug("removing an old container failed", "id", id, "err", err)
			}
		}
		c.garbage = nil
	}

	phase := podPhase(spec, rec.ctrs, p)
	if phase == PhaseSucceeded || phase == PhaseFailed {
		// Finished: stop the sandbox (the containers have exited) but keep
		// the containers and their logs until the pod is deleted.
		if err := a.cfg.Runtime.StopPodSandbox(ctx, rec.sandboxID); err != nil && !cri.IsNotFound(err) {
			return time.Second, fmt.Errorf("stop sandbox: %w", err)
		}
		rec.sandboxStopped = true
		a.releaseVolumes(rec)
		wait = 0
	}
	return wait, a.writeStatus(ctx, pod, rec, p, time.Now())
}

// failDeadline stops the pod's containers (with the grace period) and
// sandbox because activeDeadlineSeconds passed; the pod is Failed.
func (a *Agent) failDeadline(ctx context.Context, pod *corev1.Pod, rec *podRecord) error {
	rec.deadlineExceeded = true
	a.rec.FieldEventf(pod, "", client.EventNormal, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
	for _, c := range rec.ctrs {
		if c.running() {
			a.rec.FieldEventf(pod, fieldPath(pod.GetSpec(), c), client.EventNormal, "Killing", "Stopping container %s", c.name)
		}
	}
	a.stopContainers(ctx, pod, rec.sandboxID, rec.podIP, gracePeriod(pod, nil))
	for _, c := range rec.ctrs {
		if c.id != "" {
			a.refresh(ctx, c, RestartNever)
		}
		c.backoffUntil = time.Time{}
	}
	if err := a.cfg.Runtime.StopPodSandbox(ctx, rec.sandboxID); err != nil && !cri.IsNotFound(err) {
		return fmt.Errorf("stop sandbox: %w", err)
	}
	rec.sandboxStopped = true
	a.releaseVolumes(rec)
	return a.writeStatus(ctx, pod, rec, computePlan(pod.GetSpec(), rec.ctrs, time.Now()), time.Now())
}

// refresh reads a container's CRI status into c.
func (a *Agent) refresh(ctx context.Context, c *ctrState, policy string) {
	st, err := a.cfg.Runtime.ContainerStatus(ctx, c.id)
	if err != nil {
		if cri.IsNotFound(err) { // removed behind our back: start over
			c.id, c.status = "", nil
		}
		a.log.Debug("container status failed", "container", c.name, "err", err)
		return
	}
	addTerminationMessage(ctx, st, c.logPath)
	if policy == "" {
		policy = RestartAlways
	}
	if c.init && policy == RestartAlways {
		policy = RestartOnFailure // an init container that succeeded is done
	}
	c.observe(st, policy, a.cfg.Backoff)
}

// fieldPath is an event's path to a container.
func fieldPath(spec *corev1.PodSpec, c *ctrState) string {
	if c.init {
		return "spec.initContainers{" + c.name + "}"
	}
	if c.ephemeral || ephemeralSpec(spec, c.name) != nil {
		return "spec.ephemeralContainers{" + c.name + "}"
	}
	return "spec.containers{" + c.name + "}"
}

// containerSpec finds a container's spec by name: an init, regular or
// ephemeral container (the last seen as the container it shares its
// fields with).
func containerSpec(spec *corev1.PodSpec, name string) *corev1.Container {
	for _, c := range spec.GetInitContainers() {
		if c.GetName() == name {
			return c
		}
	}
	for _, c := range spec.GetContainers() {
		if c.GetName() == name {
			return c
		}
	}
	if ec := ephemeralSpec(spec, name); ec != nil {
		// The two messages share their field numbers, as in Kubernetes.
		c := &corev1.Container{}
		if b, err := proto.Marshal(ec.GetEphemeralContainerCommon()); err == nil && proto.Unmarshal(b, c) == nil {
			return c
		}
	}
	return nil
}

// ephemeralSpec finds an ephemeral container's spec by name.
func ephemeralSpec(spec *corev1.PodSpec, name string) *corev1.EphemeralContainer {
	for _, ec := range spec.GetEphemeralContainers() {
		if ec.GetEphemeralContainerCommon().GetName() == name {
			return ec
		}
	}
	return nil
}

// addEphemeral gives rec a state for each of pod's ephemeral containers
// it has none for (they are added to a running pod).
func addEphemeral(pod *corev1.Pod, rec *podRecord) {
	for _, ec := range pod.GetSpec().GetEphemeralContainers() {
		name := ec.GetEphemeralContainerCommon().GetName()
		if rec.ctrs[name] == nil {
			rec.ctrs[name] = &ctrState{name: name, ephemeral: true}
		}
	}
}
