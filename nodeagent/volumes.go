// This file sets up a pod's volumes on the node: the per-pod directories
// under <RootDir>/pods/<uid>/volumes/<plugin>/<name> (the kubelet's
// layout), emptyDirs (Memory ones on tmpfs), hostPath checks, claims'
// volumes, and their refresh on each sync (volumepayloads.go writes their
// files, volumecleanup.go removes them). Which volumes are mounted and which are refused is written in
// nodeagent/README.md.

package nodeagent

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// The kubelet's plugin directory names under a pod's volumes directory.
const (
	pluginEmptyDir    = "kubernetes.io~empty-dir"
	pluginConfigMap   = "kubernetes.io~configmap"
	pluginSecret      = "kubernetes.io~secret"
	pluginDownwardAPI = "kubernetes.io~downward-api"
	pluginProjected   = "kubernetes.io~projected"
)

// Kubernetes' default file modes of volume files (0644).
const defaultVolumeMode = 0o644

// volumePath is where a set-up volume is on the host, and whether the
// kubelet mounts it read-only whatever the volumeMount says (configMap,
// secret, downwardAPI and projected volumes).
type volumePath struct {
	path     string
	readOnly bool
}

var _ tokenSource = apiTokens{}

// podDir is <RootDir>/pods/<uid>.
func (a *Agent) podDir(uid string) string {
	return filepath.Join(a.cfg.RootDir, "pods", uid)
}

// volumeDir is where a volume of a plugin lives.
func (a *Agent) volumeDir(uid, plugin, name string) string {
	return filepath.Join(a.podDir(uid), "volumes", plugin, name)
}

// mountError is a volume that cannot be set up: its message is the
// FailedMount event's, as the kubelet words it.
type mountError struct {
	volume string
	err    error
}

func (e *mountError) Error() string {
	return fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", e.volume, e.err)
}

func (e *mountError) Unwrap() error { return e.err }

// setUpVolumes makes every volume of the pod ready on the host (or
// refreshes its content) and returns where each is. Every volume that
// fails is one error in errs (each becomes a FailedMount event); the pod's
// containers may not start while any fails.
func (a *Agent) setUpVolumes(ctx context.Context, pod *corev1.Pod, rec *podRecord) (map[string]volumePath, []error) {
	out := map[string]volumePath{}
	var errs []error
	for _, v := range pod.GetSpec().GetVolumes() {
		p, err := a.setUpVolume(ctx, pod, rec, v)
		if err != nil {
			errs = append(errs, &mountError{volume: v.GetName(), err: err})
			continue
		}
		out[v.GetName()] = p
	}
	return out, errs
}

// setUpVolume sets up one volume.
func (a *Agent) setUpVolume(ctx context.Context, pod *corev1.Pod, rec *podRecord, v *corev1.Volume) (volumePath, error) {
	uid := pod.GetMetadata().GetUid()
	src := v.GetVolumeSource()
	name := v.GetName()
	switch {
	case src.GetEmptyDir() != nil:
		dir := a.volumeDir(uid, pluginEmptyDir, name)
		return volumePath{path: dir}, a.setUpEmptyDir(pod, src.GetEmptyDir(), dir)
	case src.GetHostPath() != nil:
		hp := src.GetHostPath()
		return volumePath{path: hp.GetPath()}, checkHostPath(hp.GetPath(), hp.GetType())
	case src.GetConfigMap() != nil:
		cm := src.GetConfigMap()
		dir := a.volumeDir(uid, pluginConfigMap, name)
		payload := map[string]fileProjection{}
		if err := a.configMapPayload(ctx, pod, cm.GetLocalObjectReference().GetName(), cm.GetItems(), cm.GetOptional(), modeOr(cm.DefaultMode), payload); err != nil {
			return volumePath{}, err
		}
		_, err := writeAtomic(dir, payload)
		return volumePath{path: dir, readOnly: true}, err
	case src.GetSecret() != nil:
		s := src.GetSecret()
		dir := a.volumeDir(uid, pluginSecret, name)
		payload := map[string]fileProjection{}
		if err := a.secretPayload(ctx, pod, s.GetSecretName(), s.GetItems(), s.GetOptional(), modeOr(s.DefaultMode), payload); err != nil {
			return volumePath{}, err
		}
		if err := a.memoryBacked(pod, dir); err != nil {
			return volumePath{}, err
		}
		_, err := writeAtomic(dir, payload)
		return volumePath{path: dir, readOnly: true}, err
	case src.GetDownwardApi() != nil:
		d := src.GetDownwardApi()
		dir := a.volumeDir(uid, pluginDownwardAPI, name)
		payload := map[string]fileProjection{}
		if err := a.downwardPayload(pod, d.GetItems(), modeOr(d.DefaultMode), payload); err != nil {
			return volumePath{}, err
		}
		_, err := writeAtomic(dir, payload)
		return volumePath{path: dir, readOnly: true}, err
	case src.GetProjected() != nil:
		dir := a.volumeDir(uid, pluginProjected, name)
		payload, err := a.projectedPayload(ctx, pod, rec, name, src.GetProjected())
		if err != nil {
			return volumePath{}, err
		}
		if err := a.memoryBacked(pod, dir); err != nil {
			return volumePath{}, err
		}
		_, err = writeAtomic(dir, payload)
		return volumePath{path: dir, readOnly: true}, err
	}
	if c := src.GetPersistentVolumeClaim(); c != nil {
		return a.claimVolume(ctx, pod, c)
	}
	return volumePath{}, fmt.Errorf("no volume plugin matched: kplane's node agent cannot mount %s volumes", volumeKind(src))
}

// claimVolume is a persistentVolumeClaim volume: the claim must be bound,
// and its volume a hostPath or local one (what the node-local provisioner
// makes), which is then mounted as that host directory. Other volume
// sources need plugins the agent does not have.
func (a *Agent) claimVolume(ctx context.Context, pod *corev1.Pod, src *corev1.PersistentVolumeClaimVolumeSource) (volumePath, error) {
	ns, name := pod.GetMetadata().GetNamespace(), src.GetClaimName()
	claim, err := a.claims.Get(ctx, ns, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return volumePath{}, fmt.Errorf("persistentvolumeclaim %q not found", name)
		}
		return volumePath{}, fmt.Errorf("get persistentvolumeclaim %q: %w", name, err)
	}
	pvName := claim.GetSpec().GetVolumeName()
	if claim.GetStatus().GetPhase() != "Bound" || pvName == "" {
		return volumePath{}, fmt.Errorf("persistentvolumeclaim %q is not bound", name)
	}
	pv, err := a.volumes.Get(ctx, "", pvName)
	if err != nil {
		return volumePath{}, fmt.Errorf("get persistentvolume %q: %w", pvName, err)
	}
	s := pv.GetSpec().GetPersistentVolumeSource()
	ro := src.GetReadOnly()
	switch {
	case s.GetHostPath() != nil:
		hp := s.GetHostPath()
		return volumePath{path: hp.GetPath(), readOnly: ro}, checkHostPath(hp.GetPath(), hp.GetType())
	case s.GetLocal() != nil:
		p := s.GetLocal().GetPath()
		if info, err := os.Stat(p); err != nil || !info.IsDir() {
			return volumePath{}, fmt.Errorf("local volume %q: path %q does not exist on the node", pvName, p)
		}
		return volumePath{path: p, readOnly: ro}, nil
	}
	kind := "unknown"
	s.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		kind = fd.JSONName()
		return false
	})
	return volumePath{}, fmt.Errorf("no volume plugin matched: kplane's node agent cannot mount persistent volumes of %s (volume %q)", kind, pvName)
}

// volumeKind names the source a volume uses (its JSON field name).
func volumeKind(src *corev1.VolumeSource) string {
	kind := "unknown"
	if src == nil {
		return kind
	}
	src.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		kind = fd.JSONName()
		return false
	})
	return kind
}

// setUpEmptyDir makes an emptyDir's directory (mode 0777, as the kubelet
// does); a Memory one is a tmpfs mounted on it, sized as the kubelet sizes
// it: the smallest of the node's allocatable memory, the pod's memory
// limit and the sizeLimit. On the built-in runtime, where no container
// could see a mount, a Memory emptyDir is a plain directory.
func (a *Agent) setUpEmptyDir(pod *corev1.Pod, ed *corev1.EmptyDirVolumeSource, dir string) error {
	switch ed.GetMedium() {
	case "", "Memory":
	default:
		return fmt.Errorf("kplane's node agent does not support emptyDir medium %q", ed.GetMedium())
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return err
	}
	if ed.GetMedium() != "Memory" || a.simulated {
		return nil
	}
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		return err
	}
	opts := ""
	if size := a.memoryVolumeSize(pod, ed); size > 0 {
		opts = fmt.Sprintf("size=%d", size)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// memoryBacked makes dir a tmpfs, as the kubelet keeps secret and
// projected volumes in memory so that secrets and tokens never reach the
// node's disk. On the built-in runtime it is a plain directory.
func (a *Agent) memoryBacked(pod *corev1.Pod, dir string) error {
	return a.setUpEmptyDir(pod, &corev1.EmptyDirVolumeSource{Medium: "Memory"}, dir)
}

// memoryVolumeSize is a Memory emptyDir's size in bytes (0: the tmpfs
// default).
func (a *Agent) memoryVolumeSize(pod *corev1.Pod, ed *corev1.EmptyDirVolumeSource) int64 {
	var size int64
	if q, err := resource.ParseQuantity(a.cfg.Capacity["memory"]); err == nil {
		size = q.Value()
	}
	lower := func(v int64) {
		if v > 0 && (size == 0 || v < size) {
			size = v
		}
	}
	// The pod's limit: only when every container has one.
	var limit int64
	all := len(pod.GetSpec().GetContainers()) > 0
	for _, c := range pod.GetSpec().GetContainers() {
		q, err := resource.ParseQuantity(c.GetResources().GetLimits()["memory"])
		if err != nil {
			all = false
			break
		}
		limit += q.Value()
	}
	if all {
		lower(limit)
	}
	if ed.SizeLimit != nil {
		if q, err := resource.ParseQuantity(ed.GetSizeLimit()); err == nil {
			lower(q.Value())
		}
	}
	return size
}

// isMountPoint reports whether dir is a mount point (its device differs
// from its parent's).
func isMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// checkHostPath checks (and for the ...OrCreate types makes) a hostPath
// volume's path as its type says, with the kubelet's messages.
func checkHostPath(path string, typ string) error {
	if typ == "" {
		return nil
	}
	st, statErr := os.Stat(path)
	exists := statErr == nil
	isDir := exists && st.IsDir()
	switch typ {
	case "DirectoryOrCreate":
		if !exists {
			return os.MkdirAll(path, 0o755)
		}
		fallthrough
	case "Directory":
		if !isDir {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", path)
		}
	case "FileOrCreate":
		if !exists {
			f, err := os.OpenFile(path, os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		}
		fallthrough
	case "File":
		if !exists || !st.Mode().IsRegular() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", path)
		}
	case "Socket":
		if !exists || st.Mode()&fs.ModeSocket == 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a socket file", path)
		}
	case "CharDevice":
		if !exists || st.Mode()&fs.ModeCharDevice == 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a character device", path)
		}
	case "BlockDevice":
		if !exists || st.Mode()&fs.ModeDevice == 0 || st.Mode()&fs.ModeCharDevice != 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a block device", path)
		}
	default:
		return fmt.Errorf("%s is an invalid volume type", typ)
	}
	return nil
}

// syncVolumes sets up the pod's volumes when it has none yet, and
// refreshes them — new ConfigMap and Secret content, a token due for
// renewal — at most every ResyncInterval, as the kubelet's periodic sync
// does. Each failing volume is a FailedMount event. ok is false while the
// volumes were never all set up (then wait is when to retry); once they
// were, a failed refresh keeps the content the containers already see.
func (a *Agent) syncVolumes(ctx context.Context, pod *corev1.Pod, rec *podRecord, now time.Time) (ok bool, wait time.Duration) {
	if len(pod.GetSpec().GetVolumes()) == 0 {
		rec.volumesReady = true
		return true, 0
	}
	// The resync (every ResyncInterval) brings the refreshes; only a
	// token's renewal asks for a sync of its own.
	renew := func() time.Duration {
		if t := nextTokenRenewal(rec); !t.IsZero() {
			return max(t.Sub(now), time.Millisecond)
		}
		return 0
	}
	t := nextTokenRenewal(rec)
	if rec.volumesReady && now.Sub(rec.volumesAt) < a.cfg.ResyncInterval*9/10 && (t.IsZero() || now.Before(t)) {
		return true, renew()
	}
	vols, errs := a.setUpVolumes(ctx, pod, rec)
	for _, err := range errs {
		a.rec.FieldEventf(pod, "", client.EventWarning, "FailedMount", "%v", err)
	}
	rec.volumesAt = now
	if len(errs) > 0 && !rec.volumesReady {
		return false, a.cfg.Backoff.Base
	}
	if len(errs) == 0 {
		rec.volumes, rec.volumesReady = vols, true
	}
	return true, renew()
}
