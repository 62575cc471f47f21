// End-to-end test of pod volumes on a real containerd, read from inside
// the containers with `kubectl exec`.

package nodeagent

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/kubectltest"
	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/nodeagent/cri"
	"github.com/kplane/kplane/nodeagent/internal/containerdtest"
	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
)

// TestContainerdVolumes runs one pod of two busybox containers on a real
// containerd and reads its volumes from inside (then a pod whose
// containers leave termination messages): a ConfigMap file, which
// changes after the ConfigMap is updated (not the same key mounted by
// subPath, as on Kubernetes); a Secret file with its
// defaultMode; an emptyDir both containers share; a Memory emptyDir that
// is a tmpfs of the sizeLimit; the ServiceAccount token, which TokenReview
// accepts (then pods with exec lifecycle hooks). After the pod's deletion no mount and no directory of it is
// left. Root, containerd and Debian's busybox-static are needed (skipped
// otherwise; failed under CI=true).
func TestContainerdVolumes(t *testing.T) {
	testutil.RequireRoot(t, "a real containerd runs as root")
	for _, b := range containerdtest.Binaries {
		testutil.RequireBinary(t, b, containerdtest.InstallHint)
	}
	testutil.RequireBinary(t, containerdtest.Busybox, containerdtest.BusyboxInstallHint)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	env, err := containerdtest.Start(ctx, containerdtest.Options{Logger: log})
	if err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Errorf("containerd clean-up: %v", err)
		}
	})

	c := startClusterWithSAAdmission(t)
	dir := shortDir(t)
	root := filepath.Join(dir, "root")
	rc, err := cri.New(cri.Config{Socket: env.Socket})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{
		NodeName:       "real",
		Conn:           c.env.DialCert(t, "system:node:real", "system:nodes"),
		Runtime:        rc,
		Capacity:       map[string]string{"cpu": "2", "memory": "4Gi", "pods": "10"},
		LogDir:         filepath.Join(dir, "logs"),
		RootDir:        root,
		LogPort:        int32(hl.Addr().(*net.TCPAddr).Port),
		StatusInterval: time.Second,
		RelistInterval: 200 * time.Millisecond,
		ResyncInterval: time.Second, // how soon ConfigMap changes reach the files
		Backoff:        testBackoff,
		CgroupParent:   env.CgroupParent,
		HostNetwork:    true,
		Logger:         slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ca := c.env.CA()
	srv := &http.Server{Handler: NewLogServer(a).RequireClientCert(apiservertest.KubeletClientUser)}
	go srv.Serve(tls.NewListener(hl, LogServerTLS(ca.Issue(t, "kplane-nodeagent", nil, true), ca.Pool)))
	actx, acancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	t.Cleanup(func() {
		acancel()
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	})

	cms := client.Must[*corev1.ConfigMap](c.admin)
	for _, cm := range []*corev1.ConfigMap{
		{Metadata: &metav1.ObjectMeta{Name: "app-config", Namespace: "default"}, Data: map[string]string{"app.conf": "v1"}},
		{Metadata: &metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: "default"}, Data: map[string]string{"ca.crt": "CA"}},
	} {
		if _, err := cms.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.Must[*corev1.Secret](c.admin).Create(ctx, &corev1.Secret{Metadata: &metav1.ObjectMeta{Name: "app-secret", Namespace: "default"},
		Data: map[string][]byte{"password": []byte("s3cret")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Must[*corev1.ServiceAccount](c.admin).Create(ctx, &corev1.ServiceAccount{Metadata: &metav1.ObjectMeta{Name: "default", Namespace: "default"}}); err != nil {
		t.Fatal(err)
	}
	mode := int32(0o400)
	size := "16Mi"
	box := func(name string, mounts ...*corev1.VolumeMount) *corev1.Container {
		return &corev1.Container{Name: name, Image: containerdtest.BusyboxImage, Command: []string{"sleep", "3600"}, VolumeMounts: mounts}
	}
	pod := &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "vols", Namespace: "default"}, Spec: &corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr(int64(1)),
		Containers: []*corev1.Container{
			box("a",
				&corev1.VolumeMount{Name: "cfg", MountPath: "/etc/cfg"},
				&corev1.VolumeMount{Name: "sec", MountPath: "/etc/secret"},
				&corev1.VolumeMount{Name: "shared", MountPath: "/shared"},
				&corev1.VolumeMount{Name: "mem", MountPath: "/mem"}),
			box("b", &corev1.VolumeMount{Name: "shared", MountPath: "/shared"},
				&corev1.VolumeMount{Name: "cfg", MountPath: "/etc/app.conf", SubPath: "app.conf"}),
		},
		Volumes: []*corev1.Volume{
			{Name: "cfg", VolumeSource: &corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "app-config"}}}},
			{Name: "sec", VolumeSource: &corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "app-secret", DefaultMode: &mode}}},
			{Name: "shared", VolumeSource: &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "mem", VolumeSource: &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: "Memory", SizeLimit: &size}}},
		},
	}}
	p := c.runPod(t, pod, "real")
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got, err := c.pods.Get(ctx, "default", "vols")
		if err == nil && got.GetStatus().GetPhase() == PhaseRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod not Running within 2 minutes: %v %v", err, got.GetStatus())
		}
	}

	// kubectl 1.33 (WebSocket) for most reads, 1.27 (SPDY) for the
	// ConfigMap file before and after its update.
	k33 := kubectltest.StartBinary(t, c.env.Dial(t, ""), apiservertest.AdminToken, "kubectl.1.33")
	k27 := k33.WithBinary(t, "kubectl.1.27")
	execWith := func(k *kubectltest.Kubectl, ctr string, cmd ...string) string {
		t.Helper()
		out, err := k.Run(ctx, append([]string{"exec", "vols", "-c", ctr, "--"}, cmd...)...)
		if err != nil {
			t.Fatalf("kubectl exec -c %s -- %v: %v: %s", ctr, cmd, err, out)
		}
		return out
	}
	exec := func(ctr string, cmd ...string) string {
		t.Helper()
		return execWith(k33, ctr, cmd...)
	}

	if got := execWith(k27, "a", "cat", "/etc/cfg/app.conf"); got != "v1" {
		t.Errorf("ConfigMap file: got %q, want v1", got)
	}
	if got := exec("b", "cat", "/etc/app.conf"); got != "v1" {
		t.Errorf("ConfigMap key mounted by subPath: got %q, want v1", got)
	}
	cm, err := cms.Get(ctx, "default", "app-config")
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["app.conf"] = "v2"
	if _, err := cms.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	got := ""
	for range 120 {
		if got = exec("a", "cat", "/etc/cfg/app.conf"); got == "v2" {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if got != "v2" {
		t.Errorf("ConfigMap file after the update: got %q, want v2", got)
	}
	if got := execWith(k27, "a", "cat", "/etc/cfg/app.conf"); got != "v2" {
		t.Errorf("ConfigMap file after the update, kubectl 1.27: got %q, want v2", got)
	}
	// A subPath mount is the file as it was when the container started,
	// as on Kubernetes.
	if got := exec("b", "cat", "/etc/app.conf"); got != "v1" {
		t.Errorf("subPath file after the update: got %q, want v1 (subPath mounts are not updated)", got)
	}

	if got := exec("a", "ls", "-lL", "/etc/secret/password"); !strings.HasPrefix(got, "-r--------") {
		t.Errorf("Secret file mode: got %q, want -r-------- (defaultMode 0400)", got)
	}
	if got := exec("a", "cat", "/etc/secret/password"); got != "s3cret" {
		t.Errorf("Secret file: got %q", got)
	}
	exec("a", "sh", "-c", "echo shared > /shared/x")
	if got := exec("b", "cat", "/shared/x"); got != "shared\n" {
		t.Errorf("emptyDir seen from the other container: got %q", got)
	}
	// /mem is a tmpfs of the sizeLimit; the Secret is in memory too, as
	// the kubelet keeps secret volumes.
	mounts := map[string][]string{}
	for _, l := range strings.Split(exec("a", "cat", "/proc/mounts"), "\n") {
		if f := strings.Fields(l); len(f) > 3 {
			mounts[f[1]] = f
		}
	}
	if f := mounts["/mem"]; len(f) < 4 || f[2] != "tmpfs" || !strings.Contains(f[3], "size=16384k") {
		t.Errorf("/mem: got %q, want a tmpfs of 16Mi", f)
	}
	readOnly := func(f []string) bool { return len(f) > 3 && slices.Contains(strings.Split(f[3], ","), "ro") }
	if f := mounts["/etc/secret"]; len(f) < 4 || f[2] != "tmpfs" || !readOnly(f) {
		t.Errorf("/etc/secret: got %q, want a read-only tmpfs", f)
	}
	if f := mounts["/etc/cfg"]; !readOnly(f) {
		t.Errorf("/etc/cfg: got %q, want a read-only mount", f)
	}

	token := exec("b", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
	r, err := authenticationv1.NewAuthenticationServiceClient(c.admin).CreateTokenReview(ctx, &authenticationv1.CreateTokenReviewRequest{
		TokenReview: &authenticationv1.TokenReview{Spec: &authenticationv1.TokenReviewSpec{Token: token}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := r.GetTokenReview().GetStatus(); !st.GetAuthenticated() || st.GetUser().GetUsername() != "system:serviceaccount:default:default" {
		t.Errorf("TokenReview of the mounted token: got %v", st)
	}
	if got := exec("b", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/namespace"); got != "default" {
		t.Errorf("namespace file: got %q", got)
	}

	// Termination messages: a file of the host mounted at each container's
	// terminationMessagePath, writable by a non-root user too; with
	// FallbackToLogsOnError a failed container's log tail.
	testContainerdTerminationMessages(ctx, t, c)

	// Lifecycle hooks: exec postStart and preStop in the container.
	testContainerdLifecycleHooks(ctx, t, c)

	// Deletion: the containers stop, the tmpfs is unmounted and the pod's
	// directory removed before the deletion is confirmed.
	if err := c.pods.Delete(ctx, "default", "vols", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, "default", "vols")
	podDir := filepath.Join(root, "pods", p.Metadata.Uid)
	if _, err := os.Stat(podDir); !os.IsNotExist(err) {
		t.Errorf("pod directory %s left after deletion (%v)", podDir, err)
	}
	if left, err := mountsUnder(root); err != nil || len(left) > 0 {
		t.Errorf("mounts left under %s: %v (%v)", root, left, err)
	}
}

// testContainerdTerminationMessages runs a pod of three busybox
// containers that exit at once — one writing /dev/termination-log as
// root, one a path of its own as user 10000, one failing after logging
// DONE with FallbackToLogsOnError — and checks their messages.
func testContainerdTerminationMessages(ctx context.Context, t *testing.T, c *cluster) {
	t.Helper()
	nonRoot, rootUser := int64(10000), int64(0)
	box := func(name, script, path, policy string, user *int64) *corev1.Container {
		return &corev1.Container{Name: name, Image: containerdtest.BusyboxImage, Command: []string{"/bin/sh", "-c"}, Args: []string{script},
			TerminationMessagePath: path, TerminationMessagePolicy: policy, SecurityContext: &corev1.SecurityContext{RunAsUser: user}}
	}
	c.runPod(t, &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "msgs", Namespace: "default"}, Spec: &corev1.PodSpec{
		RestartPolicy:                 RestartNever,
		TerminationGracePeriodSeconds: ptr(int64(1)),
		Containers: []*corev1.Container{
			box("root", "/bin/echo -n DONE > /dev/termination-log", "", "", &rootUser),
			box("nonroot", "/bin/echo -n DONE > /dev/termination-custom-log", "/dev/termination-custom-log", "", &nonRoot),
			box("fallback", "/bin/echo -n DONE; /bin/false", "", "FallbackToLogsOnError", nil),
		},
	}}, "real")
	var got *corev1.Pod
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		p, err := c.pods.Get(ctx, "default", "msgs")
		if err == nil && p.GetStatus().GetPhase() == PhaseFailed {
			got = p
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod msgs not Failed within 2 minutes: %v %v", err, p.GetStatus())
		}
	}
	want := map[string]string{"root": "DONE", "nonroot": "DONE", "fallback": "DONE"}
	for _, cs := range got.GetStatus().GetContainerStatuses() {
		if m := cs.GetState().GetTerminated().GetMessage(); m != want[cs.GetName()] {
			t.Errorf("termination message of %s: got %q, want %q (state %v)", cs.GetName(), m, want[cs.GetName()], cs.GetState())
		}
	}
	if err := c.pods.Delete(ctx, "default", "msgs", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, "default", "msgs")
}

// testContainerdLifecycleHooks runs busybox pods with exec hooks that
// write to a hostPath directory: postStart has run when the container
// shows Running and preStop runs on deletion; a failing postStart kills
// the container (busybox's sleep ends on the stop's SIGTERM: exit 143)
// and, with restartPolicy Never, fails the pod.
func testContainerdLifecycleHooks(ctx context.Context, t *testing.T, c *cluster) {
	t.Helper()
	out := t.TempDir()
	hook := func(script string) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", script}}}
	}
	pod := func(name string, postStart, preStop *corev1.LifecycleHandler) *corev1.Pod {
		return &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: &corev1.PodSpec{
			RestartPolicy:                 RestartNever,
			TerminationGracePeriodSeconds: ptr(int64(2)),
			Containers: []*corev1.Container{{Name: "main", Image: containerdtest.BusyboxImage, Command: []string{"sleep", "3600"},
				Lifecycle:    &corev1.Lifecycle{PostStart: postStart, PreStop: preStop},
				VolumeMounts: []*corev1.VolumeMount{{Name: "out", MountPath: "/out"}}}},
			Volumes: []*corev1.Volume{{Name: "out", VolumeSource: &corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: out}}}},
		}}
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(out, name))
		return string(b)
	}
	wait := func(name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			p, err := c.pods.Get(ctx, "default", name)
			if err == nil && ok(p) {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s: %s did not happen within 2 minutes: %v %v", name, what, err, p.GetStatus())
			}
		}
	}

	c.runPod(t, pod("hooks", hook("echo started > /out/poststart"), hook("echo stopping > /out/prestop")), "real")
	wait("hooks", "Running", phaseIs(PhaseRunning))
	if got := read("poststart"); got != "started\n" {
		t.Errorf("postStart's file: got %q, want started", got)
	}
	if err := c.pods.Delete(ctx, "default", "hooks", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, "default", "hooks")
	if got := read("prestop"); got != "stopping\n" {
		t.Errorf("preStop's file: got %q, want stopping", got)
	}

	p := c.runPod(t, pod("poststart-fails", hook("echo boom; exit 3"), nil), "real")
	got := wait("poststart-fails", "Failed", phaseIs(PhaseFailed))
	if term := got.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated(); term.GetExitCode() != 143 || term.GetReason() != "Error" {
		t.Errorf("terminated: got exit %d reason %q, want 143 Error", term.GetExitCode(), term.GetReason())
	}
	waitEvent(t, c, p, "FailedPostStartHook", "PostStartHook failed")
	if err := c.pods.Delete(ctx, "default", "poststart-fails", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, "default", "poststart-fails")
}
