// This file sets up a pod's volumes on the node and tears them down: the
// per-pod directories under <RootDir>/pods/<uid>/volumes/<plugin>/<name>
// (the kubelet's layout), their content, and the tmpfs of Memory
// emptyDirs. Which volumes are mounted and which are refused is written in
// nodeagent/README.md.

package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/apimachinery/pkg/api/resource"

	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apierrors"
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

// tokenSource issues ServiceAccount tokens bound to a pod (TokenRequest).
type tokenSource interface {
	PodToken(ctx context.Context, pod *corev1.Pod, audience string, expirationSeconds int64) (token string, expires time.Time, err error)
}

// apiTokens asks the API service for tokens.
type apiTokens struct {
	client authenticationv1.AuthenticationServiceClient
}

var _ tokenSource = apiTokens{}

// PodToken requests a token of the pod's ServiceAccount bound to the pod,
// as the kubelet's token manager does.
func (t apiTokens) PodToken(ctx context.Context, pod *corev1.Pod, audience string, exp int64) (string, time.Time, error) {
	m := pod.GetMetadata()
	var auds []string
	if audience != "" {
		auds = []string{audience}
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	resp, err := t.client.CreateServiceAccountToken(ctx, &authenticationv1.CreateServiceAccountTokenRequest{
		Namespace: m.GetNamespace(), Name: pod.GetSpec().GetServiceAccountName(),
		TokenRequest: &authenticationv1.TokenRequest{Spec: &authenticationv1.TokenRequestSpec{
			Audiences: auds, ExpirationSeconds: &exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{ApiVersion: "v1", Kind: "Pod", Name: m.GetName(), Uid: m.GetUid()},
		}},
	})
	if err != nil {
		return "", time.Time{}, apierrors.FromError(err)
	}
	st := resp.GetTokenRequest().GetStatus()
	return st.GetToken(), st.GetExpirationTimestamp().AsTime(), nil
}

// cachedToken is a token the agent holds for a pod's projected volume.
type cachedToken struct {
	token           string
	issued, expires time.Time
}

// due reports whether the token must be renewed: past 80 % of its
// lifetime, or older than 24 hours, as the kubelet's token manager does.
func (c cachedToken) due(now time.Time) bool {
	if c.token == "" {
		return true
	}
	ttl := c.expires.Sub(c.issued)
	return !now.Before(c.issued.Add(ttl*8/10)) || now.Sub(c.issued) > 24*time.Hour
}

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

// modeOr is a defaultMode, or Kubernetes' default 0644.
func modeOr(m *int32) os.FileMode {
	if m == nil {
		return defaultVolumeMode
	}
	return os.FileMode(*m) & fs.ModePerm
}

// itemMode is a KeyToPath's own mode, or the volume's default.
func itemMode(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m) & fs.ModePerm
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

// configMapPayload adds a ConfigMap's keys (all, or the items) to payload.
// A missing ConfigMap that is optional adds nothing; a missing one that is
// not is the kubelet's error, as is an item naming a key it lacks.
func (a *Agent) configMapPayload(ctx context.Context, pod *corev1.Pod, name string, items []*corev1.KeyToPath, optional bool, mode os.FileMode, payload map[string]fileProjection) error {
	cm, err := a.volObjs.ConfigMap(ctx, pod.GetMetadata().GetNamespace(), name)
	if apierrors.IsNotFound(err) {
		if optional {
			return nil
		}
		return fmt.Errorf("configmap %q not found", name)
	}
	if err != nil {
		return err
	}
	data := map[string][]byte{}
	for k, v := range cm.GetData() {
		data[k] = []byte(v)
	}
	for k, v := range cm.GetBinaryData() {
		data[k] = v
	}
	return addItems(data, items, optional, mode, payload, "configmap references non-existent config key: %s")
}

// secretPayload is configMapPayload for a Secret.
func (a *Agent) secretPayload(ctx context.Context, pod *corev1.Pod, name string, items []*corev1.KeyToPath, optional bool, mode os.FileMode, payload map[string]fileProjection) error {
	s, err := a.volObjs.Secret(ctx, pod.GetMetadata().GetNamespace(), name)
	if apierrors.IsNotFound(err) {
		if optional {
			return nil
		}
		return fmt.Errorf("secret %q not found", name)
	}
	if err != nil {
		return err
	}
	return addItems(s.GetData(), items, optional, mode, payload, "references non-existent secret key: %s")
}

// addItems puts every key of data (no items) or the items' keys under
// their paths.
func addItems(data map[string][]byte, items []*corev1.KeyToPath, optional bool, mode os.FileMode, payload map[string]fileProjection, missing string) error {
	if len(items) == 0 {
		for k, v := range data {
			payload[k] = fileProjection{data: v, mode: mode}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.GetKey()]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf(missing, it.GetKey())
		}
		payload[it.GetPath()] = fileProjection{data: v, mode: itemMode(it.Mode, mode)}
	}
	return nil
}

// downwardPayload adds the downwardAPI items: pod fields (labels and
// annotations as sorted key="value" lines) and container resources.
func (a *Agent) downwardPayload(pod *corev1.Pod, items []*corev1.DownwardAPIVolumeFile, mode os.FileMode, payload map[string]fileProjection) error {
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.GetFieldRef() != nil:
			switch fp := it.GetFieldRef().GetFieldPath(); fp {
			case "metadata.labels":
				v = formatMap(pod.GetMetadata().GetLabels())
			case "metadata.annotations":
				v = formatMap(pod.GetMetadata().GetAnnotations())
			default:
				v, err = podField(pod, fp, envInputs{})
			}
		case it.GetResourceFieldRef() != nil:
			var first *corev1.Container
			if cs := pod.GetSpec().GetContainers(); len(cs) > 0 {
				first = cs[0]
			}
			v, err = resourceField(pod, first, it.GetResourceFieldRef(), a.cfg.Capacity)
		}
		if err != nil {
			return err
		}
		payload[it.GetPath()] = fileProjection{data: []byte(v), mode: itemMode(it.Mode, mode)}
	}
	return nil
}

// formatMap is labels or annotations as a downwardAPI file shows them:
// one key="value" line per key (the value quoted as Go quotes strings),
// sorted by key, no final newline.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	return b.String()
}

// projectedPayload is a projected volume's files: its configMap, secret,
// downwardAPI and serviceAccountToken sources. A clusterTrustBundle source
// is refused (kplane serves no ClusterTrustBundles).
func (a *Agent) projectedPayload(ctx context.Context, pod *corev1.Pod, rec *podRecord, volume string, p *corev1.ProjectedVolumeSource) (map[string]fileProjection, error) {
	mode := modeOr(p.DefaultMode)
	payload := map[string]fileProjection{}
	for i, s := range p.GetSources() {
		switch {
		case s.GetConfigMap() != nil:
			c := s.GetConfigMap()
			if err := a.configMapPayload(ctx, pod, c.GetLocalObjectReference().GetName(), c.GetItems(), c.GetOptional(), mode, payload); err != nil {
				return nil, err
			}
		case s.GetSecret() != nil:
			c := s.GetSecret()
			if err := a.secretPayload(ctx, pod, c.GetLocalObjectReference().GetName(), c.GetItems(), c.GetOptional(), mode, payload); err != nil {
				return nil, err
			}
		case s.GetDownwardApi() != nil:
			if err := a.downwardPayload(pod, s.GetDownwardApi().GetItems(), mode, payload); err != nil {
				return nil, err
			}
		case s.GetServiceAccountToken() != nil:
			t := s.GetServiceAccountToken()
			exp := int64(3600)
			if t.ExpirationSeconds != nil {
				exp = t.GetExpirationSeconds()
			}
			tok, err := a.podToken(ctx, pod, rec, fmt.Sprintf("%s/%d", volume, i), t.GetAudience(), exp)
			if err != nil {
				return nil, fmt.Errorf("failed to fetch token: %w", err)
			}
			payload[t.GetPath()] = fileProjection{data: []byte(tok), mode: mode}
		case s.GetClusterTrustBundle() != nil:
			return nil, errors.New("clusterTrustBundle projections are not supported: kplane serves no ClusterTrustBundles")
		}
	}
	return payload, nil
}

// podToken returns the pod's token for one projection, renewing it at
// 80 % of its lifetime.
func (a *Agent) podToken(ctx context.Context, pod *corev1.Pod, rec *podRecord, key, audience string, exp int64) (string, error) {
	now := time.Now()
	if c, ok := rec.tokens[key]; ok && !c.due(now) {
		return c.token, nil
	}
	if a.tokens == nil {
		return "", errors.New("no token source")
	}
	tok, expires, err := a.tokens.PodToken(ctx, pod, audience, exp)
	if err != nil {
		return "", err
	}
	if rec.tokens == nil {
		rec.tokens = map[string]cachedToken{}
	}
	rec.tokens[key] = cachedToken{token: tok, issued: now, expires: expires}
	return tok, nil
}

// nextTokenRenewal is when the soonest of the pod's tokens is due (zero:
// none).
func nextTokenRenewal(rec *podRecord) time.Time {
	var next time.Time
	for _, c := range rec.tokens {
		at := c.issued.Add(c.expires.Sub(c.issued) * 8 / 10)
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// tearDownVolumes unmounts the pod's tmpfs volumes and removes its
// directory. It removes nothing while a mount under the directory
// remains (the content of what is mounted there is not the pod's to
// remove).
func (a *Agent) tearDownVolumes(uid string) error {
	if uid == "" {
		return nil
	}
	dir := a.podDir(uid)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil // a pod without volumes, or already removed
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	// Deepest first.
	slices.SortFunc(mounts, func(x, y string) int { return len(y) - len(x) })
	for _, m := range mounts {
		if err := unix.Unmount(m, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
	}
	if left, err := mountsUnder(dir); err != nil || len(left) > 0 {
		if err == nil {
			err = fmt.Errorf("still mounted: %v", left)
		}
		return fmt.Errorf("pod directory %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove pod directory: %w", err)
	}
	return nil
}

// releaseVolumes tears down the volumes of a pod that finished (Succeeded
// or Failed): no container of it will start again, so its tmpfs memory is
// given back now, as the kubelet unmounts the volumes of terminated pods,
// rather than when the pod is deleted. A failure is retried at deletion.
func (a *Agent) releaseVolumes(rec *podRecord) {
	rec.volumes, rec.volumesReady, rec.tokens = nil, false, nil
	if err := a.tearDownVolumes(rec.uid); err != nil {
		a.log.Warn("removing the volumes of a finished pod failed", "uid", rec.uid, "err", err)
	}
}

// mountsUnder lists the mount points at or below dir, from
// /proc/self/mountinfo.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// collectOrphanedVolumes removes the pod directories of pods the node no
// longer has (deleted while the agent was down).
func (a *Agent) collectOrphanedVolumes(live map[string]bool) {
	entries, err := os.ReadDir(filepath.Join(a.cfg.RootDir, "pods"))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.log.Warn("listing pod directories failed", "err", err)
		}
		return
	}
	for _, e := range entries {
		if !e.IsDir() || live[e.Name()] {
			continue
		}
		a.log.Info("removing an orphaned pod directory", "uid", e.Name())
		if err := a.tearDownVolumes(e.Name()); err != nil {
			a.log.Warn("removing an orphaned pod directory failed", "uid", e.Name(), "err", err)
		}
	}
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
