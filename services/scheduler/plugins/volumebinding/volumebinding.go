// Package volumebinding keeps pods off nodes where their
// PersistentVolumeClaims cannot be met, as Kubernetes' VolumeBinding
// plugin: a claim that is missing or being deleted, or unbound with a
// class that binds immediately, makes the pod unschedulable; a bound
// claim's volume must allow the node (its node affinity); an unbound claim
// whose class waits for the first consumer needs, on the node, an
// available volume that fits it or a class with a provisioner. Once a node
// is chosen, Reserve records it in such claims'
// volume.kubernetes.io/selected-node annotation, for the volume
// controller to bind or provision there. Unlike Kubernetes, the pod's
// binding does not wait for the claims to be bound (PreBind): kplane's node
// agent does not mount claims.
package volumebinding

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kplane/kplane/internal/placement"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name.
const Name = "VolumeBinding"

// Kubernetes' user-facing rejections.
const (
	ReasonUnboundImmediate = "pod has unbound immediate PersistentVolumeClaims"
	ReasonNodeConflict     = "node(s) had volume node affinity conflict"
	ReasonNoVolume         = "node(s) didn't find available persistent volumes to bind"
	selectedNode           = "volume.kubernetes.io/selected-node"
	stateKey               = Name
)

// Plugin is the VolumeBinding filter and reserver.
type Plugin struct {
	claims  *client.Client[*corev1.PersistentVolumeClaim]
	volumes *client.Client[*corev1.PersistentVolume]
	classes *client.Client[*storagev1.StorageClass]
}

var (
	_ framework.PreFilterPlugin = (*Plugin)(nil)
	_ framework.FilterPlugin    = (*Plugin)(nil)
	_ framework.ReservePlugin   = (*Plugin)(nil)
)

// New is the plugin's factory. Without a connection (unit tests of other
// plugins) every pod with claims is let through.
func New(_ []byte, h framework.Handle) (framework.Plugin, error) {
	p := &Plugin{}
	var conn grpc.ClientConnInterface
	if h != nil {
		conn = h.ClientConn()
	}
	if conn != nil {
		p.claims = client.Must[*corev1.PersistentVolumeClaim](conn)
		p.volumes = client.Must[*corev1.PersistentVolume](conn)
		p.classes = client.Must[*storagev1.StorageClass](conn)
	}
	return p, nil
}

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// state is what PreFilter found for Filter and Reserve.
type state struct {
	bound []*corev1.PersistentVolume // volumes of bound claims
	// waiting are the unbound claims that wait for their first consumer;
	// candidates the volumes any of them might bind; provisioned[i] tells
	// whether waiting[i]'s class has a provisioner.
	waiting     []*corev1.PersistentVolumeClaim
	provisioned []bool
	candidates  []*corev1.PersistentVolume
}

// PreFilter reads the pod's claims (skipping pods without any) and refuses
// the pod outright when one is missing, being deleted or unbound with
// Immediate binding.
func (p *Plugin) PreFilter(ctx context.Context, cs *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	var names []string
	for _, v := range pod.Pod.GetSpec().GetVolumes() {
		if n := v.GetPersistentVolumeClaim().GetClaimName(); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 || p.claims == nil {
		return framework.NewStatus(framework.Skip)
	}
	ns := pod.Pod.GetMetadata().GetNamespace()
	st := &state{}
	for _, n := range names {
		pvc, err := p.claims.Get(ctx, ns, n)
		if apierrors.IsNotFound(err) {
			return framework.NewStatus(framework.UnschedulableAndUnresolvable, fmt.Sprintf("persistentvolumeclaim %q not found", n))
		}
		if err != nil {
			return framework.AsStatus(fmt.Errorf("volumebinding: claim %s/%s: %w", ns, n, err))
		}
		if pvc.GetMetadata().GetDeletionTimestamp() != nil {
			return framework.NewStatus(framework.UnschedulableAndUnresolvable, fmt.Sprintf("persistentvolumeclaim %q is being deleted", n))
		}
		if v := pvc.GetSpec().GetVolumeName(); v != "" {
			pv, err := p.volumes.Get(ctx, "", v)
			if apierrors.IsNotFound(err) {
				return framework.NewStatus(framework.UnschedulableAndUnresolvable, "pvc(s) bound to non-existent pv(s)")
			}
			if err != nil {
				return framework.AsStatus(fmt.Errorf("volumebinding: volume %s: %w", v, err))
			}
			st.bound = append(st.bound, pv)
			continue
		}
		class := pvc.GetSpec().GetStorageClassName()
		if a, ok := pvc.GetMetadata().GetAnnotations()["volume.beta.kubernetes.io/storage-class"]; ok {
			class = a
		}
		var sc *storagev1.StorageClass
		if class != "" {
			if sc, err = p.classes.Get(ctx, "", class); err != nil && !apierrors.IsNotFound(err) {
				return framework.AsStatus(fmt.Errorf("volumebinding: class %s: %w", class, err))
			}
		}
		if sc.GetVolumeBindingMode() != "WaitForFirstConsumer" {
			return framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonUnboundImmediate)
		}
		st.waiting = append(st.waiting, pvc)
		st.provisioned = append(st.provisioned, sc.GetProvisioner() != "" && sc.GetProvisioner() != "kubernetes.io/no-provisioner")
	}
	if len(st.waiting) > 0 {
		pvs, _, err := p.volumes.List(ctx, "", client.ListOptions{})
		if err != nil {
			return framework.AsStatus(fmt.Errorf("volumebinding: volumes: %w", err))
		}
		for _, pv := range pvs {
			if pv.GetSpec().GetClaimRef() == nil && pv.GetMetadata().GetDeletionTimestamp() == nil {
				st.candidates = append(st.candidates, pv)
			}
		}
	}
	cs.Write(stateKey, st)
	return nil
}

// Filter refuses a node that a bound claim's volume does not allow, or
// where a waiting claim has neither a fitting volume nor a provisioner.
func (p *Plugin) Filter(_ context.Context, cs *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	v, ok := cs.Read(stateKey)
	if !ok {
		return nil
	}
	st := v.(*state)
	for _, pv := range st.bound {
		if !fits(pv, node.Node) {
			return framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonNodeConflict)
		}
	}
	taken := map[string]bool{}
	for i, pvc := range st.waiting {
		if pv := match(pvc, st.candidates, node.Node, taken); pv != nil {
			taken[pv.GetMetadata().GetName()] = true
			continue
		}
		if !st.provisioned[i] {
			return framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonNoVolume)
		}
	}
	return nil
}

// Reserve records the node in each waiting claim.
func (p *Plugin) Reserve(ctx context.Context, cs *framework.CycleState, _ *framework.PodInfo, nodeName string) *framework.Status {
	v, ok := cs.Read(stateKey)
	if !ok {
		return nil
	}
	for _, pvc := range v.(*state).waiting {
		if pvc.GetMetadata().GetAnnotations()[selectedNode] == nodeName {
			continue
		}
		u := proto.Clone(pvc).(*corev1.PersistentVolumeClaim)
		if u.Metadata.Annotations == nil {
			u.Metadata.Annotations = map[string]string{}
		}
		u.Metadata.Annotations[selectedNode] = nodeName
		if _, err := p.claims.Update(ctx, u); err != nil {
			return framework.AsStatus(fmt.Errorf("volumebinding: select node for claim %s: %w", client.Key(pvc), err))
		}
	}
	return nil
}

// Unreserve leaves the annotation: the next attempt overwrites it.
func (p *Plugin) Unreserve(context.Context, *framework.CycleState, *framework.PodInfo, string) {}

func fits(pv *corev1.PersistentVolume, node *corev1.Node) bool {
	terms := pv.GetSpec().GetNodeAffinity().GetRequired().GetNodeSelectorTerms()
	return len(terms) == 0 || slices.ContainsFunc(terms, func(t *corev1.NodeSelectorTerm) bool { return placement.TermMatches(t, node) })
}

// match is a volume among candidates (not in taken) the claim could bind
// on node: same class and volume mode, big enough, with its access modes.
func match(pvc *corev1.PersistentVolumeClaim, candidates []*corev1.PersistentVolume, node *corev1.Node, taken map[string]bool) *corev1.PersistentVolume {
	want, err := resource.ParseQuantity(pvc.GetSpec().GetResources().GetRequests()["storage"])
	if err != nil {
		return nil
	}
	for _, pv := range candidates {
		if taken[pv.GetMetadata().GetName()] || pv.GetSpec().GetStorageClassName() != pvc.GetSpec().GetStorageClassName() ||
			pv.GetSpec().GetVolumeMode() != pvc.GetSpec().GetVolumeMode() || !fits(pv, node) {
			continue
		}
		size, err := resource.ParseQuantity(pv.GetSpec().GetCapacity()["storage"])
		if err != nil || size.Cmp(want) < 0 {
			continue
		}
		ok := true
		for _, m := range pvc.GetSpec().GetAccessModes() {
			ok = ok && slices.Contains(pv.GetSpec().GetAccessModes(), m)
		}
		if ok {
			return pv
		}
	}
	return nil
}
