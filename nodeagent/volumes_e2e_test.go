// End-to-end tests of pod volumes on the built-in runtime: the files the
// agent materialises, what keeps a pod in ContainerCreating (FailedMount),
// and the clean-up.

package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kplane/kplane/nodeagent/simruntime"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// TestVolumesBuiltInRuntime: a pod's configMap, secret, downwardAPI and
// emptyDir volumes are made on the host under <RootDir>/pods/<uid> (the
// built-in runtime records the mounts); a missing ConfigMap and a volume
// kind the node cannot provide keep pods in ContainerCreating with the
// kubelet's FailedMount events — until the ConfigMap appears; a pod that
// finished and a deleted one have their directory removed.
func TestVolumesBuiltInRuntime(t *testing.T) {
	c := startCluster(t)
	root := filepath.Join(shortDir(t), "root")
	n := startSimNode(t, c, "n1", func(cfg *Config) { cfg.RootDir = root })
	ctx := context.Background()
	cms := client.Must[*corev1.ConfigMap](c.admin)
	secrets := client.Must[*corev1.Secret](c.admin)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: "app-config", Namespace: "default"},
		Data: map[string]string{"app.conf": "v1", "other": "x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Create(ctx, &corev1.Secret{Metadata: &metav1.ObjectMeta{Name: "app-secret", Namespace: "default"},
		Data: map[string][]byte{"password": []byte("s3cret")}}); err != nil {
		t.Fatal(err)
	}
	mode := int32(0o400)
	withVolumes := func(name string, vols ...*corev1.Volume) *corev1.Pod {
		return simPod(name, nil, func(s *corev1.PodSpec) {
			s.Volumes = vols
			for _, v := range vols {
				s.Containers[0].VolumeMounts = append(s.Containers[0].VolumeMounts, &corev1.VolumeMount{Name: v.Name, MountPath: "/mnt/" + v.Name})
			}
		})
	}
	cmVol := func(vol, cm string) *corev1.Volume {
		return &corev1.Volume{Name: vol, VolumeSource: &corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: &corev1.LocalObjectReference{Name: cm},
			Items:                []*corev1.KeyToPath{{Key: "app.conf", Path: "conf/app.conf"}}}}}
	}
	p := c.runPod(t, withVolumes("files",
		cmVol("cfg", "app-config"),
		&corev1.Volume{Name: "sec", VolumeSource: &corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "app-secret", DefaultMode: &mode}}},
		&corev1.Volume{Name: "info", VolumeSource: &corev1.VolumeSource{DownwardApi: &corev1.DownwardAPIVolumeSource{Items: []*corev1.DownwardAPIVolumeFile{
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
		&corev1.Volume{Name: "scratch", VolumeSource: &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	), "n1")
	c.waitPod(t, "default", "files", "Running", phaseIs(PhaseRunning))
	podDir := filepath.Join(root, "pods", p.Metadata.Uid, "volumes")
	for _, f := range []struct{ path, want string }{
		{"kubernetes.io~configmap/cfg/conf/app.conf", "v1"},
		{"kubernetes.io~secret/sec/password", "s3cret"},
		{"kubernetes.io~downward-api/info/name", "files"},
	} {
		b, err := os.ReadFile(filepath.Join(podDir, f.path))
		if err != nil || string(b) != f.want {
			t.Errorf("%s: got %q, %v; want %q", f.path, b, err, f.want)
		}
	}
	if st, err := os.Stat(filepath.Join(podDir, "kubernetes.io~secret/sec/password")); err != nil || st.Mode().Perm() != 0o400 {
		t.Errorf("secret file mode: got %v, %v; want 0400", st.Mode().Perm(), err)
	}
	if _, err := os.Stat(filepath.Join(podDir, "kubernetes.io~configmap/cfg/other")); !os.IsNotExist(err) {
		t.Errorf("a key not in items was written (%v)", err)
	}
	if st, err := os.Stat(filepath.Join(podDir, "kubernetes.io~empty-dir/scratch")); err != nil || !st.IsDir() {
		t.Errorf("emptyDir: %v", err)
	}
	// The runtime was given the mounts.
	cs := c.waitPod(t, "default", "files", "a container ID", func(p *corev1.Pod) bool {
		return len(p.GetStatus().GetContainerStatuses()) == 1 && p.GetStatus().GetContainerStatuses()[0].GetContainerId() != ""
	}).GetStatus().GetContainerStatuses()[0]
	st, err := n.cri.ContainerStatus(ctx, cs.GetContainerId()[len("kplane-sim://"):])
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, m := range st.GetMounts() {
		got[m.GetContainerPath()] = m.GetReadonly()
	}
	// Beside the volumes, the termination message file.
	if want := map[string]bool{"/mnt/cfg": true, "/mnt/sec": true, "/mnt/info": true, "/mnt/scratch": false, "/dev/termination-log": false}; !boolMapsEqual(got, want) {
		t.Errorf("mounts (path: read-only): got %v, want %v", got, want)
	}

	// A ConfigMap that is not there yet: FailedMount, retried.
	late := c.runPod(t, withVolumes("late", cmVol("cfg", "later")), "n1")
	waitEvent(t, c, late, "FailedMount", `MountVolume.SetUp failed for volume "cfg" : configmap "later" not found`)
	if p := c.waitPod(t, "default", "late", "Pending", phaseIs(PhasePending)); p.GetStatus().GetContainerStatuses()[0].GetState().GetWaiting().GetReason() != ReasonContainerCreating {
		t.Errorf("late: got %v, want ContainerCreating", p.GetStatus().GetContainerStatuses()[0].GetState())
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: "later", Namespace: "default"},
		Data: map[string]string{"app.conf": "here"}}); err != nil {
		t.Fatal(err)
	}
	c.waitPod(t, "default", "late", "Running", phaseIs(PhaseRunning))

	// A volume the node cannot provide is not skipped.
	pvc := c.runPod(t, withVolumes("claim", &corev1.Volume{Name: "data", VolumeSource: &corev1.VolumeSource{
		Nfs: &corev1.NFSVolumeSource{Server: "nfs.example.com", Path: "/exports"}}}), "n1")
	waitEvent(t, c, pvc, "FailedMount", `MountVolume.SetUp failed for volume "data" : no volume plugin matched: kplane's node agent cannot mount nfs volumes`)
	if p := c.waitPod(t, "default", "claim", "Pending", phaseIs(PhasePending)); p.GetStatus().GetContainerStatuses()[0].GetState().GetWaiting().GetReason() != ReasonContainerCreating {
		t.Errorf("claim: got %v, want ContainerCreating", p.GetStatus().GetContainerStatuses()[0].GetState())
	}

	// A pod that finished gives its volumes back at once, before it is
	// deleted.
	finished := withVolumes("finished", &corev1.Volume{Name: "scratch", VolumeSource: &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	finished.Spec.RestartPolicy = RestartNever
	finished.Spec.Containers[0].Env = []*corev1.EnvVar{{Name: simruntime.EnvRunSeconds, Value: "0"}}
	finished = c.runPod(t, finished, "n1")
	c.waitPod(t, "default", "finished", "Succeeded", phaseIs(PhaseSucceeded))
	for i := 0; ; i++ {
		_, err := os.Stat(filepath.Join(root, "pods", finished.Metadata.Uid))
		if os.IsNotExist(err) {
			break
		}
		if i == 600 {
			t.Fatalf("the finished pod's directory is still there (%v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Deletion removes the pod's directory.
	zero := int64(0)
	if err := c.pods.Delete(ctx, "default", "files", client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, "default", "files")
	// Deleted at once (grace 0), the pod is gone from the API before the
	// agent's teardown: wait for that, bounded.
	for i := 0; ; i++ {
		_, err := os.Stat(filepath.Join(root, "pods", p.Metadata.Uid))
		if os.IsNotExist(err) {
			break
		}
		if i == 600 {
			t.Fatalf("pod directory left after deletion (%v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func boolMapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// waitGone polls (60s at most) until the pod no longer exists.
func waitGone(t *testing.T, c *cluster, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.pods.Get(context.Background(), ns, name); apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s still there after 60s", ns, name)
}
