// End-to-end test of termination messages on the built-in runtime: the
// cases of Kubernetes' Container Runtime conformance tests, and a
// restarted container's lastState.

package nodeagent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// TestTerminationMessagesBuiltInRuntime: a script's termination message
// reaches state.terminated.message — written to the default path as root,
// to a path of its own as a non-root user, and with FallbackToLogsOnError
// the log's tail when it failed without writing one (nothing when it
// succeeded, the file when it wrote one). Each instance has a file of its
// own: a restarted container starts with an empty one, and the previous
// instance's message stays in lastState.
func TestTerminationMessagesBuiltInRuntime(t *testing.T) {
	c := startCluster(t)
	root := filepath.Join(shortDir(t), "root")
	startSimNode(t, c, "n1", func(cfg *Config) { cfg.RootDir = root })
	script := func(name, policy, path string, user int64, restart, sh string) *corev1.Pod {
		return simPod(name, nil, func(s *corev1.PodSpec) {
			s.RestartPolicy = restart
			ctr := s.Containers[0]
			ctr.Command = []string{"/bin/sh", "-c"}
			ctr.Args = []string{sh}
			ctr.TerminationMessagePolicy = policy
			ctr.TerminationMessagePath = path
			ctr.SecurityContext = &corev1.SecurityContext{RunAsUser: &user}
		})
	}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		phase string
		want  string
	}{
		{name: "file", phase: PhaseSucceeded, want: "DONE",
			pod: script("file", "", "", 0, RestartNever, "/bin/echo -n DONE > /dev/termination-log")},
		{name: "non-root, non-default path", phase: PhaseSucceeded, want: "DONE",
			pod: script("nonroot", "", "/dev/termination-custom-log", 10000, RestartNever, "/bin/echo -n DONE > /dev/termination-custom-log")},
		{name: "fallback to the log", phase: PhaseFailed, want: "DONE",
			pod: script("fallback", "FallbackToLogsOnError", "", 0, RestartNever, "/bin/echo -n DONE; /bin/false")},
		{name: "fallback, succeeded", phase: PhaseSucceeded, want: "",
			pod: script("succeeded", "FallbackToLogsOnError", "", 0, RestartNever, "/bin/echo -n DONE; /bin/true")},
		{name: "fallback, the file", phase: PhaseSucceeded, want: "OK",
			pod: script("fromfile", "FallbackToLogsOnError", "", 0, RestartNever, "/bin/echo -n OK > /dev/termination-log; /bin/echo DONE; /bin/true")},
	} {
		c.runPod(t, tc.pod, "n1")
		defer func() {
			p := c.waitPod(t, "default", tc.pod.Metadata.Name, tc.phase, phaseIs(tc.phase))
			if got := p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated().GetMessage(); got != tc.want {
				t.Errorf("%s: message: got %q, want %q", tc.name, got, tc.want)
			}
		}()
	}

	// Restarted: the first instance fails with "first"; the second
	// appends to a file of its own, so its message is "second" alone.
	restarted := script("restarted", "", "", 0, RestartOnFailure,
		`if [ -f /data/once ]; then echo -n second >> /dev/termination-log; exit 0; fi; touch /data/once; echo -n first >> /dev/termination-log; exit 1`)
	restarted.Spec.Volumes = []*corev1.Volume{{Name: "data", VolumeSource: &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	restarted.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	c.runPod(t, restarted, "n1")

	// While a container runs, its file is on the host, in the pod's
	// directory, writable by any user.
	running := c.runPod(t, script("running", "", "", 0, RestartNever, "sleep 3600"), "n1")
	c.waitPod(t, "default", "running", "Running", phaseIs(PhaseRunning))
	files, _ := filepath.Glob(filepath.Join(root, "pods", running.Metadata.Uid, "containers", "main", "*"))
	if len(files) != 1 {
		t.Errorf("termination message files under the pod's directory: got %q, want one", files)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o666 || st.Size() != 0 {
			t.Errorf("%s: got %v, %v; want an empty file of mode 0666", f, st, err)
		}
	}

	got := c.waitPod(t, "default", "restarted", "Succeeded", phaseIs(PhaseSucceeded)).GetStatus().GetContainerStatuses()[0]
	if m := got.GetState().GetTerminated().GetMessage(); m != "second" {
		t.Errorf("restarted: state message: got %q, want second", m)
	}
	if m := got.GetLastTerminationState().GetTerminated().GetMessage(); m != "first" {
		t.Errorf("restarted: lastState message: got %q, want first", m)
	}
}

// TestTerminationMessageAdopted: a restarted agent reads the termination
// message of an exited container it adopts from the runtime's status (the
// annotations and the mount), as its predecessor did.
func TestTerminationMessageAdopted(t *testing.T) {
	c := startCluster(t)
	n := startSimRuntime(t, "n1")
	withRoot := func(cfg *Config) { cfg.RootDir = filepath.Join(n.dir, "root") }
	stop := n.startAgent(t, c, withRoot)
	c.runPod(t, simPod("two", nil, func(s *corev1.PodSpec) {
		s.RestartPolicy = RestartNever
		s.Containers = append(s.Containers, &corev1.Container{Name: "done", Image: "kplane.test/web:1",
			Command: []string{"sh", "-c", "echo -n bye > /dev/termination-log"}})
	}), "n1")
	c.waitPod(t, "default", "two", "the message of done", func(p *corev1.Pod) bool {
		for _, cs := range p.GetStatus().GetContainerStatuses() {
			if cs.GetName() == "done" && cs.GetState().GetTerminated().GetMessage() == "bye" {
				return true
			}
		}
		return false
	})
	stop()

	n.startAgent(t, c, withRoot)
	for i := 0; ; i++ {
		msg, adopted := "", false
		if rec := n.agent.record("default/two"); rec != nil {
			rec.mu.Lock()
			if st := rec.ctrs["done"].status; st != nil {
				msg, adopted = st.GetMessage(), true
			}
			rec.mu.Unlock()
		}
		if adopted {
			if msg != "bye" {
				t.Errorf("adopted container's message: got %q, want bye", msg)
			}
			break
		}
		if i == 1200 {
			t.Fatal("the restarted agent did not adopt the pod")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
