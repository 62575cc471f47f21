// End-to-end tests of lifecycle hooks on the built-in runtime: postStart
// and preStop exec hooks run in the container's shell, a failing
// postStart kills the container, preStop runs before every stop within
// the grace period, and httpGet hooks follow the runtime's exec rules.

package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/nodeagent/simruntime"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// hookPod is a pod of one scripted container running script, with the
// host directory out mounted at /out and the given hooks.
func hookPod(name, out, script string, postStart, preStop *corev1.LifecycleHandler, mod func(*corev1.PodSpec)) *corev1.Pod {
	return simPod(name, nil, func(s *corev1.PodSpec) {
		s.TerminationGracePeriodSeconds = proto.Int64(30)
		ctr := s.Containers[0]
		ctr.Command = []string{"sh", "-c", script}
		ctr.Lifecycle = &corev1.Lifecycle{PostStart: postStart, PreStop: preStop}
		ctr.VolumeMounts = []*corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
		s.Volumes = []*corev1.Volume{{Name: "out", VolumeSource: &corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: out}}}}
		if mod != nil {
			mod(s)
		}
	})
}

// shHook is an exec hook running script in the container's shell.
func shHook(script string) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", script}}}
}

// readOut reads a file the hooks wrote under out ("" when missing).
func readOut(t *testing.T, out, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, name))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// TestLifecycleHooksBuiltInRuntime: postStart has run when the container
// shows Running; deleting the pod runs preStop before the container
// stops, even a preStop that outlasts the grace period (cut at it); a
// failing preStop is a FailedPreStopHook event and the pod still goes.
func TestLifecycleHooksBuiltInRuntime(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	ctx := context.Background()
	out := t.TempDir()

	p := c.runPod(t, hookPod("hooks", out, "echo $(cat /out/poststart) > /out/seen; sleep 3600",
		shHook("echo started > /out/poststart"), shHook("echo stopping > /out/prestop"), nil), "n1")
	c.waitPod(t, "default", "hooks", "Running", phaseIs(PhaseRunning))
	if got := readOut(t, out, "poststart"); got != "started\n" {
		t.Errorf("postStart's file: got %q, want started", got)
	}
	if got := readOut(t, out, "prestop"); got != "" {
		t.Errorf("preStop ran before the deletion: %q", got)
	}
	if err := c.pods.Delete(ctx, "default", "hooks", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, "default", "hooks")
	if got := readOut(t, out, "prestop"); got != "stopping\n" {
		t.Errorf("preStop's file: got %q, want stopping", got)
	}
	waitEvent(t, c, p, "Killing", "Stopping container main")

	// A preStop that sleeps past the grace period holds the deletion
	// only that long; one that fails is an event.
	sleeper := c.runPod(t, hookPod("sleeper", out, "sleep 3600", nil,
		&corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3600}},
		func(s *corev1.PodSpec) { s.TerminationGracePeriodSeconds = proto.Int64(1) }), "n1")
	failing := c.runPod(t, hookPod("failing", out, "sleep 3600", nil, shHook("echo no; exit 7"), nil), "n1")
	for _, p := range []*corev1.Pod{sleeper, failing} {
		c.waitPod(t, "default", p.Metadata.Name, "Running", phaseIs(PhaseRunning))
		if err := c.pods.Delete(ctx, "default", p.Metadata.Name, client.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, c, "default", "sleeper")
	waitGone(t, c, "default", "failing")
	waitEvent(t, c, failing, "FailedPreStopHook", "PreStopHook failed")
}

// TestPostStartHookFailure: a postStart hook that fails kills its
// container (FailedPostStartHook and Killing events; the preStop hook
// runs first): with restartPolicy Never it stays terminated (exit 143,
// the runtime's stop) and the pod fails; with Always it is restarted.
func TestPostStartHookFailure(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	out := t.TempDir()

	never := c.runPod(t, hookPod("never", out, "sleep 3600", shHook("echo boom; exit 3"), shHook("echo killed > /out/prestop-never"),
		func(s *corev1.PodSpec) { s.RestartPolicy = RestartNever }), "n1")
	got := c.waitPod(t, "default", "never", "Failed", phaseIs(PhaseFailed))
	term := got.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated()
	if term.GetExitCode() != 143 || term.GetReason() != "Error" {
		t.Errorf("terminated: got exit %d reason %q, want 143 Error", term.GetExitCode(), term.GetReason())
	}
	waitEvent(t, c, never, "FailedPostStartHook", "PostStartHook failed")
	waitEvent(t, c, never, "Killing", "FailedPostStartHook")
	if got := readOut(t, out, "prestop-never"); got != "killed\n" {
		t.Errorf("preStop of the killed container: got %q, want killed", got)
	}

	always := c.runPod(t, hookPod("always", out, "sleep 3600", shHook("exit 3"), nil, nil), "n1")
	got = c.waitPod(t, "default", "always", "a restart", func(p *corev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) > 0 && cs[0].GetRestartCount() >= 1 && cs[0].GetLastTerminationState().GetTerminated() != nil
	})
	if last := got.GetStatus().GetContainerStatuses()[0].GetLastTerminationState().GetTerminated(); last.GetExitCode() != 143 {
		t.Errorf("lastState: got exit %d, want 143", last.GetExitCode())
	}
	waitEvent(t, c, always, "FailedPostStartHook", "PostStartHook failed")

	// A postStart sleep is cut short by the pod's deletion.
	slow := c.runPod(t, hookPod("slow-start", out, "sleep 3600", &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3600}}, nil, nil), "n1")
	waitEvent(t, c, slow, "Started", "Started container main")
	if err := c.pods.Delete(context.Background(), "default", "slow-start", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, "default", "slow-start")
}

// TestHTTPHooksBuiltInRuntime: on the built-in runtime an httpGet hook is
// an exec naming it, so it follows the exec rules (KPLANE_SIM_EXEC_EXIT_CODE);
// its port may be a name of the container's ports, and a name the
// container lacks fails the hook.
func TestHTTPHooksBuiltInRuntime(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	httpHook := func(port string) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{HttpGet: &corev1.HTTPGetAction{Path: "/started",
			Port: &metav1.IntOrString{Value: &metav1.IntOrString_StrVal{StrVal: port}}}}
	}
	pod := func(name string, env map[string]string, port string) *corev1.Pod {
		return simPod(name, env, func(s *corev1.PodSpec) {
			s.RestartPolicy = RestartNever
			s.Containers[0].Ports = []*corev1.ContainerPort{{Name: "web", ContainerPort: 8080}}
			s.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: httpHook(port)}
		})
	}
	c.runPod(t, pod("named", nil, "web"), "n1")
	missing := c.runPod(t, pod("missing", nil, "metrics"), "n1")
	refused := c.runPod(t, pod("refused", map[string]string{simruntime.EnvExecExitCode: "1"}, "web"), "n1")
	c.waitPod(t, "default", "named", "Running", phaseIs(PhaseRunning))
	for _, p := range []*corev1.Pod{missing, refused} {
		c.waitPod(t, "default", p.Metadata.Name, "Failed", phaseIs(PhaseFailed))
		waitEvent(t, c, p, "FailedPostStartHook", "PostStartHook failed")
	}
}

// TestLivenessFailureRunsPreStop: a container killed for its liveness
// probe runs its preStop hook first, as every kill does.
func TestLivenessFailureRunsPreStop(t *testing.T) {
	c := startCluster(t)
	startSimNode(t, c, "n1", nil)
	out := t.TempDir()
	p := c.runPod(t, hookPod("live", out, "sleep 3600", nil, shHook("echo probed > /out/prestop-live"), func(s *corev1.PodSpec) {
		s.Containers[0].LivenessProbe = &corev1.Probe{
			ProbeHandler:     &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/nothere"}}},
			PeriodSeconds:    1,
			FailureThreshold: 1,
		}
	}), "n1")
	c.waitPod(t, "default", "live", "a restart", func(p *corev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) > 0 && cs[0].GetRestartCount() >= 1
	})
	if got := readOut(t, out, "prestop-live"); got != "probed\n" {
		t.Errorf("preStop before the liveness kill: got %q, want probed", got)
	}
	waitEvent(t, c, p, "Killing", "failed liveness probe")
}

// TestPostStartHookErrorState: right after a failed postStart hook, a
// container that will be restarted waits as PostStartHookError with the
// kubelet's message (its output included), its killed instance in
// lastState; the pod's next sync shows the back-off. The agent's start
// is called directly, on a pod no informer holds, so that nothing else
// syncs it in between.
func TestPostStartHookErrorState(t *testing.T) {
	c := startCluster(t)
	n := startSimNode(t, c, "n1", nil)
	ctx := context.Background()
	a := n.agent
	// The agent is up (registered, its runtime known) once it runs a pod.
	c.runPod(t, simPod("up", nil, nil), "n1")
	c.waitPod(t, "default", "up", "Running", phaseIs(PhaseRunning))
	pod := simPod("direct", nil, func(s *corev1.PodSpec) {
		s.NodeName = "n1"
		s.Containers[0].Command = []string{"sh", "-c", "sleep 3600"}
		s.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: shHook("echo boom >&2; exit 3")}
	})
	pod.Metadata.Uid = "direct-uid"
	rec := &podRecord{uid: "direct-uid", logDir: a.podLogDir(pod), ctrs: map[string]*ctrState{"main": {name: "main"}}}
	if err := a.runSandbox(ctx, pod, rec); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.teardown(ctx, nil, rec, 0); err != nil {
			t.Error(err)
		}
	}()
	ctr := rec.ctrs["main"]
	a.startContainer(ctx, pod, rec, ctr)
	want := `Exec lifecycle hook ([sh -c echo boom >&2; exit 3]) for Container "main" in Pod "direct_default(direct-uid)" failed - ` +
		"error: command 'sh -c echo boom >&2; exit 3' exited with 3: boom\n, message: \"boom\\n\""
	if ctr.waiting != ReasonPostStartHookError || ctr.waitingMsg != want {
		t.Errorf("waiting: got %s %q, want %s %q", ctr.waiting, ctr.waitingMsg, ReasonPostStartHookError, want)
	}
	if ctr.last.GetExitCode() != 143 || ctr.restarts != 0 {
		t.Errorf("last: got exit %d, restarts %d; want the killed instance (143), no restart yet", ctr.last.GetExitCode(), ctr.restarts)
	}
	if _, err := a.syncLocked(ctx, pod, rec); err != nil {
		t.Fatal(err)
	}
	if ctr.waiting != ReasonCrashLoopBackOff && ctr.id == "" {
		t.Errorf("after the next sync: got waiting %s, want CrashLoopBackOff (or restarted)", ctr.waiting)
	}
}
