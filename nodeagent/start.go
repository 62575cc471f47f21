// This file holds how a pod starts on the node: its sandbox (config,
// directories, RunPodSandbox) and each container's pull, create with its
// mounts and environment, and start, with the Events the kubelet records.

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
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

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
		Annotations:  m.GetAnnotations(),
		PortMappings: portMappings(pod.GetSpec()),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: a.cfg.CgroupParent},
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
	dns, err := a.podDNSConfig(pod)
	if err != nil {
		return err
	}
	cfg.DnsConfig = dns
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
	// The termination message file, one per instance.
	tmsg, err := a.terminationMessageMount(rec.uid, spec)
	if err != nil {
		c.waiting, c.waitingMsg = ReasonCreateContainer, err.Error()
		a.rec.FieldEventf(pod, fp, client.EventWarning, "Failed", "Error: %v", err)
		return a.cfg.Backoff.Base
	}
	if tmsg != nil {
		mounts = append(mounts, tmsg)
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
	terminationAnnotations(spec, cfg.Annotations)
	if c.ephemeral {
		a.targetNamespaces(pod, rec, cfg)
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
	// The postStart hook, before anything else of the pod goes on; when
	// it fails the container was killed, and one that will be restarted
	// waits as PostStartHookError until the next sync shows its back-off.
	msg, hookErr := a.postStart(ctx, pod, rec, spec, fp, id)
	a.refresh(ctx, c, policy)
	if hookErr != nil && c.waiting == ReasonCrashLoopBackOff {
		c.waiting, c.waitingMsg = ReasonPostStartHookError, msg
	}
	return 0
}

// targetNamespaces puts an ephemeral container that names a target
// container into that container's process namespace, as the kubelet does
// (CRI's TARGET mode), so a debugger sees the target's processes; without
// a running target it gets the pod's namespaces.
func (a *Agent) targetNamespaces(pod *corev1.Pod, rec *podRecord, cfg *runtimeapi.ContainerConfig) {
	ec := ephemeralSpec(pod.GetSpec(), cfg.GetMetadata().GetName())
	target := rec.ctrs[ec.GetTargetContainerName()]
	if target == nil || !target.running() {
		return
	}
	net := runtimeapi.NamespaceMode_POD
	if pod.GetSpec().GetHostNetwork() || a.cfg.HostNetwork {
		net = runtimeapi.NamespaceMode_NODE
	}
	if cfg.Linux.SecurityContext == nil {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
	}
	cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{
		Network: net, Ipc: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_TARGET, TargetId: target.id,
	}
}
