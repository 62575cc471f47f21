// This file holds the sync of one pod: its record of runtime objects, the
// sandbox and containers started through the CRI (image pulls included),
// probes run, status written, and the pod torn down with its grace period.

package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/internal/telemetry"
	"github.com/kplane/kplane/nodeagent/cri"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apierrors"
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
}

// syncPod reconciles one pod; wait > 0 asks for another sync after it.
func (a *Agent) syncPod(ctx context.Context, key string) (wait time.Duration, err error) {
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
		if err := a.teardown(ctx, rec, 0); err != nil {
			a.log.Warn("removing the volumes of a gone pod failed", "pod", key, "err", err)
		}
		a.dropRecord(key, rec)
		rec = nil
	}
	if !ok {
		return 0, nil
	}
	if pod.GetMetadata().GetDeletionTimestamp() != nil {
		return a.terminate(ctx, key, pod, rec)
	}
	if rec == nil {
		if ph := pod.GetStatus().GetPhase(); ph == PhaseSucceeded || ph == PhaseFailed {
			return 0, nil // finished before this agent knew it
		}
		rec = a.newRecord(key, pod)
		rec.mu.Lock()
		err := a.adopt(ctx, pod, rec)
		rec.mu.Unlock()
		if err != nil {
			a.dropRecord(key, rec)
			return time.Second, fmt.Errorf("adopt runtime state: %w", err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return a.syncLocked(ctx, pod, rec)
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
		a.stopContainers(ctx, rec.sandboxID, gracePeriod(pod, nil))
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

	// What the runtime says now.
	policy := spec.GetRestartPolicy()
	for _, c := range rec.ctrs {
		if c.id == "" || c.exited() {
			continue
		}
		a.refresh(ctx, c, policy)
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
	a.stopContainers(ctx, rec.sandboxID, gracePeriod(pod, nil))
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
	return "spec.containers{" + c.name + "}"
}

// containerSpec finds a container's spec by name.
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
	return nil
}

// sandboxConfig is the CRI sandbox config of a pod.
func (a *Agent) sandboxConfig(pod *corev1.Pod, rec *podRecord) *runtimeapi.PodSandboxConfig {
	m := pod.GetMetadata()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: m.GetName(), Namespace: m.GetNamespace(), Uid: m.GetUid()},
		Hostname:     m.GetName(),
		LogDirectory: rec.logDir,
		Labels: map[string]string{
			labelPodName: m.GetName(), labelPodNamespace: m.GetNamespace(), labelPodUID: m.GetUid(), labelNode: a.cfg.NodeName,
		},
		Annotations: m.GetAnnotations(),
		Linux:       &runtimeapi.LinuxPodSandboxConfig{CgroupParent: a.cfg.CgroupParent},
	}
	if pod.GetSpec().GetHostNetwork() || a.cfg.HostNetwork {
		cfg.Hostname = ""
		cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}
	}
	return cfg
}

// mkdir makes the directory dir, and its parents if they are missing: what
// os.MkdirAll does, without the two stats it makes before creating a new
// directory whose parent exists — a pod's log directory and each of its
// containers', which with a hundred simulated nodes in one process are a
// few percent of its CPU.
func mkdir(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if err == nil {
		return nil
	}
	if errors.Is(err, fs.ErrExist) {
		if st, serr := os.Stat(dir); serr == nil && st.IsDir() {
			return nil
		}
	}
	return os.MkdirAll(dir, 0o755)
}

// runSandbox creates the pod's sandbox.
func (a *Agent) runSandbox(ctx context.Context, pod *corev1.Pod, rec *podRecord) error {
	cfg := a.sandboxConfig(pod, rec)
	if err := mkdir(rec.logDir); err != nil {
		return err
	}
	id, err := a.cfg.Runtime.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		return err
	}
	rec.sandboxID, rec.sandboxCfg = id, cfg
	if pod.GetSpec().GetHostNetwork() || a.cfg.HostNetwork {
		rec.podIP = a.cfg.HostIP
	} else if st, err := a.cfg.Runtime.PodSandboxStatus(ctx, id); err == nil {
		rec.podIP = st.GetNetwork().GetIp()
	}
	return nil
}

// pullPolicy is the image pull policy with Kubernetes' default.
func pullPolicy(c *corev1.Container) string {
	if p := c.GetImagePullPolicy(); p != "" {
		return p
	}
	img := c.GetImage()
	if i := strings.LastIndex(img, "@"); i >= 0 {
		return "IfNotPresent"
	}
	last := img[strings.LastIndex(img, "/")+1:]
	if !strings.Contains(last, ":") || strings.HasSuffix(last, ":latest") {
		return "Always"
	}
	return "IfNotPresent"
}

// startContainer pulls (as the policy says), creates and starts the next
// instance of c. Failures are recorded in c's waiting reason and as events;
// the returned wait is when to try again.
func (a *Agent) startContainer(ctx context.Context, pod *corev1.Pod, rec *podRecord, c *ctrState) time.Duration {
	spec := containerSpec(pod.GetSpec(), c.name)
	fp := fieldPath(pod.GetSpec(), c)
	image := spec.GetImage()
	now := time.Now()

	// The image.
	policy := pullPolicy(spec)
	present, err := a.cfg.Runtime.ImageStatus(ctx, image)
	if err != nil {
		c.waiting, c.waitingMsg = ReasonErrImagePull, err.Error()
		return a.cfg.Backoff.Base
	}
	switch {
	case present == nil && policy == "Never":
		c.waiting, c.waitingMsg = ReasonErrImageNeverPull, fmt.Sprintf("Container image %q is not present with pull policy of Never", image)
		a.rec.FieldEventf(pod, fp, client.EventWarning, ReasonErrImageNeverPull, "%s", c.waitingMsg)
		return 0
	case present == nil || policy == "Always":
		if now.Before(c.pullUntil) {
			c.waiting, c.waitingMsg = ReasonImagePullBackOff, fmt.Sprintf("Back-off pulling image %q", image)
			a.rec.FieldEventf(pod, fp, client.EventNormal, "BackOff", "Back-off pulling image %q", image)
			return c.pullUntil.Sub(now)
		}
		a.rec.FieldEventf(pod, fp, client.EventNormal, "Pulling", "Pulling image %q", image)
		t0 := time.Now()
		ref, err := a.cfg.Runtime.PullImage(ctx, image, nil, rec.sandboxCfg)
		if err != nil {
			c.pullFailures++
			d := a.cfg.Backoff.Delay(c.pullFailures - 1)
			c.pullUntil = time.Now().Add(d)
			c.waiting, c.waitingMsg = ReasonErrImagePull, err.Error()
			a.rec.FieldEventf(pod, fp, client.EventWarning, "Failed", "Failed to pull image %q: %v", image, err)
			a.rec.FieldEventf(pod, fp, client.EventWarning, "Failed", "Error: %s", ReasonErrImagePull)
			// Sync again soon to show ImagePullBackOff, then after the back-off.
			return min(d/2, time.Second)
		}
		c.pullFailures, c.pullUntil, c.imageRef = 0, time.Time{}, ref
		a.rec.FieldEventf(pod, fp, client.EventNormal, "Pulled", "Successfully pulled image %q in %s", image, time.Since(t0).Round(time.Millisecond))
	default:
		a.rec.FieldEventf(pod, fp, client.EventNormal, "Pulled", "Container image %q already present on machine", image)
	}

	// Its environment: a ConfigMap, Secret or key it needs and cannot have
	// keeps it from being created (CreateContainerConfigError), as in the
	// kubelet; the next sync tries again.
	envs, skipped, err := containerEnv(ctx, pod, spec, envInputs{
		podIP: rec.podIP, hostIP: a.cfg.HostIP, allocatable: a.cfg.Capacity, objects: a.objects})
	if err != nil {
		c.waiting, c.waitingMsg = ReasonCreateConfig, err.Error()
		a.rec.FieldEventf(pod, fp, client.EventWarning, "Failed", "Error: %v", err)
		return a.cfg.Backoff.Base
	}
	if len(skipped) > 0 {
		a.rec.FieldEventf(pod, fp, client.EventWarning, "InvalidEnvironmentVariableNames",
			"Keys [%s] from the EnvFrom were skipped since they are considered invalid environment variable names.", strings.Join(skipped, ", "))
	}
	mounts, err := containerMounts(spec, rec.volumes, envs)
	if err != nil {
		c.waiting, c.waitingMsg = ReasonCreateConfig, err.Error()
		a.rec.FieldEventf(pod, fp, client.EventWarning, "Failed", "Error: %v", err)
		return a.cfg.Backoff.Base
	}

	// The container.
	attempt := c.attempt
	logRel := filepath.Join(c.name, strconv.Itoa(int(attempt))+".log")
	if err := mkdir(filepath.Join(rec.logDir, c.name)); err != nil {
		c.waiting, c.waitingMsg = ReasonCreateContainer, err.Error()
		return a.cfg.Backoff.Base
	}
	m := pod.GetMetadata()
	cfg := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: c.name, Attempt: attempt},
		Image:      &runtimeapi.ImageSpec{Image: image},
		Command:    expandAll(spec.GetCommand(), envs),
		Args:       expandAll(spec.GetArgs(), envs),
		WorkingDir: spec.GetWorkingDir(),
		Labels: map[string]string{
			labelPodName: m.GetName(), labelPodNamespace: m.GetNamespace(), labelPodUID: m.GetUid(),
			labelContainerName: c.name, labelNode: a.cfg.NodeName,
		},
		Annotations: map[string]string{"io.kubernetes.container.restartCount": strconv.Itoa(int(attempt))},
		LogPath:     logRel,
		Stdin:       spec.GetStdin(),
		StdinOnce:   spec.GetStdinOnce(),
		Tty:         spec.GetTty(),
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       linuxResources(spec.GetResources()),
			SecurityContext: linuxSecurityContext(pod.GetSpec().GetSecurityContext(), spec.GetSecurityContext()),
		},
		Envs:   envs,
		Mounts: mounts,
	}
	id, err := a.cfg.Runtime.CreateContainer(ctx, rec.sandboxID, cfg, rec.sandboxCfg)
	if err != nil {
		c.waiting, c.waitingMsg = ReasonCreateContainer, err.Error()
		a.rec.FieldEventf(pod, fp, client.EventWarning, "Failed", "Error: %v", err)
		return a.cfg.Backoff.Base
	}
	a.rec.FieldEventf(pod, fp, client.EventNormal, "Created", "Created container %s", c.name)
	if err := a.cfg.Runtime.StartContainer(ctx, id); err != nil {
		c.waiting, c.waitingMsg = ReasonRunContainer, err.Error()
		a.rec.FieldEventf(pod, fp, client.EventWarning, "Failed", "Error: %v", err)
		_ = a.cfg.Runtime.RemoveContainer(ctx, id)
		return a.cfg.Backoff.Base
	}
	a.rec.FieldEventf(pod, fp, client.EventNormal, "Started", "Started container %s", c.name)
	c.restarts = int32(attempt)
	c.attempt++
	c.id, c.logPath = id, filepath.Join(rec.logDir, logRel)
	c.waiting, c.waitingMsg = "", ""
	c.probes = probeStates{hasStartup: spec.GetStartupProbe() != nil, hasReadiness: spec.GetReadinessProbe() != nil}
	policy = pod.GetSpec().GetRestartPolicy()
	a.refresh(ctx, c, policy)
	return 0
}

// exec runs a probe command through the runtime.
func (a *Agent) exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (bool, string, error) {
	resp, err := a.cfg.Runtime.ExecSync(ctx, id, cmd, timeout)
	if err != nil {
		return false, "", err
	}
	if resp.GetExitCode() != 0 {
		out := strings.TrimSpace(string(resp.GetStdout()) + string(resp.GetStderr()))
		return false, fmt.Sprintf("command %q exited with %d: %s", strings.Join(cmd, " "), resp.GetExitCode(), out), nil
	}
	return true, "", nil
}

// runProbes runs the probes that are due on running containers and
// returns when the next one is due. A failed liveness (or startup) probe
// stops the container; the restart policy then restarts it.
func (a *Agent) runProbes(ctx context.Context, pod *corev1.Pod, rec *podRecord, now time.Time) time.Duration {
	ctx, span := a.tracer.Start(ctx, "probes")
	defer span.End()
	var wait time.Duration
	soonest := func(t time.Time) {
		if d := t.Sub(now); d > 0 && (wait == 0 || d < wait) {
			wait = d
		}
	}
	host := rec.podIP
	if host == "" {
		host = a.cfg.HostIP
	}
	for _, cs := range pod.GetSpec().GetContainers() {
		c := rec.ctrs[cs.GetName()]
		if !c.running() {
			continue
		}
		started := time.Unix(0, c.status.GetStartedAt())
		for _, k := range []struct {
			kind string
			p    *corev1.Probe
			st   *probeState
		}{
			{probeStartup, cs.GetStartupProbe(), &c.probes.startup},
			{probeLiveness, cs.GetLivenessProbe(), &c.probes.liveness},
			{probeReadiness, cs.GetReadinessProbe(), &c.probes.readiness},
		} {
			if k.p == nil || (k.kind == probeStartup && c.probes.startupPassed) || (k.kind != probeStartup && !c.probes.started()) {
				continue
			}
			initial, period, timeout, success, failure := probeTiming(k.p)
			if k.st.next.IsZero() {
				k.st.next = started.Add(initial)
			}
			if now.Before(k.st.next) {
				soonest(k.st.next)
				continue
			}
			ok, msg, err := runProbe(ctx, a, a.simulated, c.id, host, k.p, timeout)
			if err != nil {
				ok, msg = false, err.Error()
			}
			k.st.next = now.Add(period)
			soonest(k.st.next)
			if !ok {
				a.rec.FieldEventf(pod, fieldPath(pod.GetSpec(), c), client.EventWarning, "Unhealthy", "%s probe failed: %s", k.kind, msg)
			}
			k.st.record(ok, success, failure)
			switch {
			case k.kind == probeStartup && k.st.hasResults && k.st.result:
				c.probes.startupPassed = true
				soonest(now) // the others may run now
			case (k.kind == probeStartup || k.kind == probeLiveness) && k.st.hasResults && !k.st.result:
				a.rec.FieldEventf(pod, fieldPath(pod.GetSpec(), c), client.EventNormal, "Killing",
					"Container %s failed %s probe, will be restarted", c.name, strings.ToLower(k.kind))
				grace := gracePeriod(pod, k.p)
				if err := a.cfg.Runtime.StopContainer(ctx, c.id, grace); err != nil {
					a.log.Warn("stopping a container after its probe failed", "container", c.name, "err", err)
				}
				a.refresh(ctx, c, pod.GetSpec().GetRestartPolicy())
			}
			if !c.running() {
				break
			}
		}
	}
	return wait
}

// gracePeriod is the termination grace period for a pod (or a probe's own).
func gracePeriod(pod *corev1.Pod, p *corev1.Probe) time.Duration {
	if p != nil && p.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
	}
	if g := pod.GetMetadata().DeletionGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	if g := pod.GetSpec().TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

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
	// Conditions others own (DisruptionTarget from preemption or eviction,
	// a readiness gate's) are kept, as the kubelet keeps them.
	for _, c := range old.GetConditions() {
		if !agentCondition(c.GetType()) {
			st.Conditions = append(st.Conditions, c)
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
			a.stopContainers(ctx, sb.GetId(), grace)
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
		err := a.teardown(ctx, rec, grace)
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

// teardown stops the pod's running containers with grace (in parallel),
// then stops and removes the sandbox (and so its containers), then
// unmounts and removes the pod's volumes; an error is a volume left.
func (a *Agent) teardown(ctx context.Context, rec *podRecord, grace time.Duration) error {
	var wg sync.WaitGroup
	for _, c := range rec.ctrs {
		if c.id == "" || c.exited() {
			continue
		}
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			if err := a.cfg.Runtime.StopContainer(ctx, id, grace); err != nil && !cri.IsNotFound(err) {
				a.log.Warn("stop container failed", "id", id, "err", err)
			}
		}(c.id)
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
