// Package serviceaccountadmission is Kubernetes' ServiceAccount admission
// plugin for pods: a new pod runs as the ServiceAccount "default" unless it
// names one, the ServiceAccount must exist, and — unless the pod or the
// ServiceAccount turns automountServiceAccountToken off — every container
// and init container mounts a projected kube-api-access-<random> volume at
// /var/run/secrets/kubernetes.io/serviceaccount holding a bound token
// (path "token", 3607 s), the cluster's CA (ConfigMap kube-root-ca.crt, key
// ca.crt) and the pod's namespace. The node agent fills that volume.
package serviceaccountadmission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

// Kubernetes' names and values for the token volume.
const (
	DefaultServiceAccount  = "default"
	VolumeNamePrefix       = "kube-api-access-"
	MountPath              = "/var/run/secrets/kubernetes.io/serviceaccount"
	TokenExpirationSeconds = 3607
	RootCAConfigMap        = "kube-root-ca.crt"
	// nameChars are the characters of generated name suffixes, as
	// apimachinery's name generator uses (no vowels, no confusable digits).
	nameChars = "bcdfghjklmnpqrstvwxz2456789"
)

// Plugin is the admission plugin (an apiserver.MutatingAdmission) and the
// cache of ServiceAccounts it reads (an apiserver.ObjectSink for
// "serviceaccounts").
type Plugin struct {
	// mountTokens: the API service issues tokens, so pods get the token
	// volume (without an issuer no node could fill it).
	mountTokens bool
	// wait bounds how long a pod's creation waits for a ServiceAccount the
	// cache has not seen yet (one created just before the pod).
	wait time.Duration

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every change
	sas     map[string]*bool
}

// New returns the plugin with an empty cache; register it as the sink of
// "serviceaccounts". mountTokens says whether the API service issues
// ServiceAccount tokens (it has a signing key): without them pods get no
// token volume, since no node could fill it.
func New(mountTokens bool) *Plugin {
	return &Plugin{mountTokens: mountTokens, wait: 2 * time.Second, changed: make(chan struct{}), sas: map[string]*bool{}}
}

func key(ns, name string) string { return ns + "/" + name }

// Upsert records a ServiceAccount (ObjectSink).
func (p *Plugin) Upsert(obj any) {
	sa, ok := obj.(*corev1.ServiceAccount)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var auto *bool
	if sa.AutomountServiceAccountToken != nil {
		auto = proto.Bool(sa.GetAutomountServiceAccountToken())
	}
	p.sas[key(sa.GetMetadata().GetNamespace(), sa.GetMetadata().GetName())] = auto
	close(p.changed)
	p.changed = make(chan struct{})
}

// Delete forgets a ServiceAccount (ObjectSink).
func (p *Plugin) Delete(obj any) {
	sa, ok := obj.(*corev1.ServiceAccount)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sas, key(sa.GetMetadata().GetNamespace(), sa.GetMetadata().GetName()))
}

// lookup finds a ServiceAccount's automount setting, waiting (bounded)
// for the cache to catch up with one it has not seen.
func (p *Plugin) lookup(ctx context.Context, ns, name string) (auto *bool, found bool) {
	timer := time.NewTimer(p.wait)
	defer timer.Stop()
	for {
		p.mu.Lock()
		auto, found = p.sas[key(ns, name)]
		changed := p.changed
		p.mu.Unlock()
		if found {
			return auto, true
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, false
		case <-ctx.Done():
			return nil, false
		}
	}
}

// Admit defaults and checks a pod being created; other requests pass.
func (p *Plugin) Admit(ctx context.Context, a *request.Admission) error {
	if a.Operation != request.Create || a.APIGroup != "" || a.Resource != "pods" || a.Subresource != "" {
		return nil
	}
	pod, ok := a.Object.(*corev1.Pod)
	if !ok {
		return nil
	}
	if pod.Spec == nil {
		pod.Spec = &corev1.PodSpec{}
	}
	// serviceAccount is the deprecated alias Kubernetes still reads (the
	// new field wins) and serves back equal to serviceAccountName.
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.ServiceAccountName = pod.Spec.DeprecatedServiceAccount
	}
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.ServiceAccountName = DefaultServiceAccount
	}
	pod.Spec.DeprecatedServiceAccount = pod.Spec.ServiceAccountName
	ns, name := a.Namespace, pod.Spec.ServiceAccountName
	if ns == "" {
		ns = pod.GetMetadata().GetNamespace()
	}
	auto, found := p.lookup(ctx, ns, name)
	if !found {
		return apierrors.NewForbidden("", "pods", pod.GetMetadata().GetName(),
			fmt.Sprintf("error looking up service account %s/%s: serviceaccount %q not found", ns, name, name))
	}
	mount := true
	switch {
	case pod.Spec.AutomountServiceAccountToken != nil:
		mount = pod.Spec.GetAutomountServiceAccountToken()
	case auto != nil:
		mount = *auto
	}
	if mount && p.mountTokens {
		addTokenVolume(pod.Spec)
	}
	return nil
}

// addTokenVolume mounts the kube-api-access volume in every container and
// init container that has nothing mounted at MountPath, and adds the
// volume if one of them needed it (an existing kube-api-access-* volume is
// reused).
func addTokenVolume(spec *corev1.PodSpec) {
	volume := ""
	names := map[string]bool{}
	for _, v := range spec.Volumes {
		names[v.GetName()] = true
		if strings.HasPrefix(v.GetName(), VolumeNamePrefix) {
			volume = v.GetName()
			break
		}
	}
	if volume == "" {
		b := make([]byte, 5)
		for i := range b {
			b[i] = nameChars[rand.IntN(len(nameChars))]
		}
		volume = VolumeNamePrefix + string(b)
	}
	needed := false
	for _, c := range append(append([]*corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		has := false
		for _, m := range c.VolumeMounts {
			if m.GetMountPath() == MountPath {
				has = true
				break
			}
		}
		if !has {
			c.VolumeMounts = append(c.VolumeMounts, &corev1.VolumeMount{Name: volume, ReadOnly: true, MountPath: MountPath})
			needed = true
		}
	}
	if needed && !names[volume] {
		spec.Volumes = append(spec.Volumes, tokenVolume(volume))
	}
}

// tokenVolume is Kubernetes' projected token volume.
func tokenVolume(name string) *corev1.Volume {
	return &corev1.Volume{Name: name, VolumeSource: &corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: proto.Int32(0o644),
		Sources: []*corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: proto.Int64(TokenExpirationSeconds), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: &corev1.LocalObjectReference{Name: RootCAConfigMap},
				Items: []*corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardApi: &corev1.DownwardAPIProjection{Items: []*corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{ApiVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}}
}
