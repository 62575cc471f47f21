// This file holds how a claim finds its volume: the smallest available
// volume of its class that fits its size, access modes and node, the
// bind written on both sides, the claims' and volumes' phases, and the
// provisioning of a new volume when none fits.

package persistentvolume

import (
	"context"
	"fmt"
	"path"
	"slices"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/internal/placement"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
	"github.com/kplane/kplane/proto/kubeconv"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// findVolume is the smallest volume pvc may bind: pre-bound to it, or
// Available, of its class, big enough, with its access modes and volume
// mode, matching its selector and, when node is set, usable on that node.
func (c *Controller) findVolume(pvc *corev1.PersistentVolumeClaim, class, node string) *corev1.PersistentVolume {
	want, err := resource.ParseQuantity(pvc.GetSpec().GetResources().GetRequests()["storage"])
	if err != nil {
		return nil
	}
	sel, err := kubeconv.Selector(pvc.GetSpec().GetSelector())
	if err != nil {
		return nil
	}
	var nodeObj *corev1.Node
	if node != "" {
		nodeObj, _ = c.cfg.NodeInformer.Store().Get(node)
	}
	var best *corev1.PersistentVolume
	var bestSize resource.Quantity
	for _, pv := range c.cfg.VolumeInf.Store().List() {
		if pv.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if r := pv.GetSpec().GetClaimRef(); r != nil {
			if r.GetNamespace() != pvc.GetMetadata().GetNamespace() || r.GetName() != pvc.GetMetadata().GetName() ||
				(r.GetUid() != "" && r.GetUid() != pvc.GetMetadata().GetUid()) {
				continue
			}
			return pv // pre-bound to this claim
		}
		if ph := pv.GetStatus().GetPhase(); ph != "Available" && ph != "Pending" && ph != "" {
			continue
		}
		if volumeClassOf(pv) != class || pv.GetSpec().GetVolumeMode() != pvc.GetSpec().GetVolumeMode() {
			continue
		}
		size, err := resource.ParseQuantity(pv.GetSpec().GetCapacity()["storage"])
		if err != nil || size.Cmp(want) < 0 {
			continue
		}
		if !hasModes(pv.GetSpec().GetAccessModes(), pvc.GetSpec().GetAccessModes()) {
			continue
		}
		if pvc.GetSpec().GetSelector() != nil && !sel.Matches(labels.Set(pv.GetMetadata().GetLabels())) {
			continue
		}
		if node != "" && !volumeFits(pv, nodeObj) {
			continue
		}
		if best == nil || size.Cmp(bestSize) < 0 || size.Cmp(bestSize) == 0 && pv.GetMetadata().GetName() < best.GetMetadata().GetName() {
			best, bestSize = pv, size
		}
	}
	return best
}

// VolumeFits reports whether pv's node affinity allows node (a volume
// without one fits everywhere; an unknown node nowhere it names).
func volumeFits(pv *corev1.PersistentVolume, node *corev1.Node) bool {
	terms := pv.GetSpec().GetNodeAffinity().GetRequired().GetNodeSelectorTerms()
	if len(terms) == 0 {
		return true
	}
	if node == nil {
		return false
	}
	return slices.ContainsFunc(terms, func(t *corev1.NodeSelectorTerm) bool { return placement.TermMatches(t, node) })
}

func hasModes(have, want []string) bool {
	for _, m := range want {
		if !slices.Contains(have, m) {
			return false
		}
	}
	return true
}

// bind points pv at pvc, then pvc at pv, then writes both statuses, as
// Kubernetes' binder does (each step is repeated by the next sync should a
// later one fail).
func (c *Controller) bind(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	v := proto.Clone(pv).(*corev1.PersistentVolume)
	if v.GetSpec().GetClaimRef().GetUid() != pvc.GetMetadata().GetUid() {
		v.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", ApiVersion: "v1", Namespace: pvc.GetMetadata().GetNamespace(),
			Name: pvc.GetMetadata().GetName(), Uid: pvc.GetMetadata().GetUid(), ResourceVersion: pvc.GetMetadata().GetResourceVersion()}
		if v.Metadata.Annotations == nil {
			v.Metadata.Annotations = map[string]string{}
		}
		v.Metadata.Annotations[BoundByControllerAnnot] = "yes"
		var err error
		if v, err = c.cfg.Volumes.Update(ctx, v); err != nil {
			return ignoreGone(err, "volume %s: bind to %s", pv.GetMetadata().GetName(), client.Key(pvc))
		}
	}
	if err := c.volumeStatus(ctx, v, "Bound", ""); err != nil {
		return err
	}
	p := proto.Clone(pvc).(*corev1.PersistentVolumeClaim)
	if p.GetSpec().GetVolumeName() != v.GetMetadata().GetName() || p.GetMetadata().GetAnnotations()[BindCompletedAnnotation] != "yes" {
		p.Spec.VolumeName = v.GetMetadata().GetName()
		if p.Metadata.Annotations == nil {
			p.Metadata.Annotations = map[string]string{}
		}
		p.Metadata.Annotations[BindCompletedAnnotation] = "yes"
		if v.GetMetadata().GetAnnotations()[BoundByControllerAnnot] == "yes" {
			p.Metadata.Annotations[BoundByControllerAnnot] = "yes"
		}
		var err error
		if p, err = c.cfg.Claims.Update(ctx, p); err != nil {
			return ignoreGone(err, "claim %s: bind to %s", client.Key(pvc), v.GetMetadata().GetName())
		}
	}
	return c.claimBound(ctx, p, v)
}

// claimBound writes a bound claim's status: Bound, with the volume's
// access modes and capacity.
func (c *Controller) claimBound(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	if pv.GetStatus().GetPhase() != "Bound" {
		if err := c.volumeStatus(ctx, pv, "Bound", ""); err != nil {
			return err
		}
	}
	return c.claimStatus(ctx, pvc, "Bound", pv)
}

func (c *Controller) claimStatus(ctx context.Context, pvc *corev1.PersistentVolumeClaim, phase string, pv *corev1.PersistentVolume) error {
	st := proto.Clone(pvc.GetStatus()).(*corev1.PersistentVolumeClaimStatus)
	if st == nil {
		st = &corev1.PersistentVolumeClaimStatus{}
	}
	st.Phase = phase
	if pv != nil {
		st.AccessModes = pv.GetSpec().GetAccessModes()
		st.Capacity = pv.GetSpec().GetCapacity()
	} else if phase == "Pending" {
		st.AccessModes, st.Capacity = nil, nil
	}
	if proto.Equal(st, pvc.GetStatus()) || (pvc.GetStatus() == nil && proto.Equal(st, &corev1.PersistentVolumeClaimStatus{})) {
		return nil
	}
	u := proto.Clone(pvc).(*corev1.PersistentVolumeClaim)
	u.Status = st
	_, err := c.cfg.Claims.UpdateStatus(ctx, u)
	return ignoreGone(err, "claim %s: status %s", client.Key(pvc), phase)
}

func (c *Controller) volumeStatus(ctx context.Context, pv *corev1.PersistentVolume, phase, reason string) error {
	if pv.GetStatus().GetPhase() == phase && pv.GetStatus().GetReason() == reason {
		return nil
	}
	u := proto.Clone(pv).(*corev1.PersistentVolume)
	u.Status = &corev1.PersistentVolumeStatus{Phase: phase, Reason: reason}
	_, err := c.cfg.Volumes.UpdateStatus(ctx, u)
	return ignoreGone(err, "volume %s: status %s", pv.GetMetadata().GetName(), phase)
}

// provision makes a node-local directory volume for pvc on node (the
// scheduler's choice; none for a class binding immediately, whose volume
// then has no node affinity) and binds it.
func (c *Controller) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass, node string) error {
	p := proto.Clone(pvc).(*corev1.PersistentVolumeClaim)
	if p.GetMetadata().GetAnnotations()[ProvisionerAnnotation] != Provisioner {
		if p.Metadata.Annotations == nil {
			p.Metadata.Annotations = map[string]string{}
		}
		p.Metadata.Annotations[ProvisionerAnnotation] = Provisioner
		p.Metadata.Annotations[BetaProvisionerAnnot] = Provisioner
		var err error
		if p, err = c.cfg.Claims.Update(ctx, p); err != nil {
			return ignoreGone(err, "claim %s: provisioner annotation", client.Key(pvc))
		}
	}
	name := "pvc-" + p.GetMetadata().GetUid()
	mode := "Filesystem"
	if p.GetSpec().VolumeMode != nil {
		mode = p.GetSpec().GetVolumeMode()
	}
	pv := &corev1.PersistentVolume{
		ApiVersion: "v1", Kind: "PersistentVolume",
		Metadata: &metav1.ObjectMeta{Name: name, Annotations: map[string]string{ProvisionedByAnnotation: Provisioner},
			Finalizers: []string{VolumeProtectionFinalize}},
		Spec: &corev1.PersistentVolumeSpec{
			Capacity:                      map[string]string{"storage": p.GetSpec().GetResources().GetRequests()["storage"]},
			AccessModes:                   p.GetSpec().GetAccessModes(),
			PersistentVolumeReclaimPolicy: sc.GetReclaimPolicy(),
			StorageClassName:              sc.GetMetadata().GetName(),
			MountOptions:                  sc.GetMountOptions(),
			VolumeMode:                    proto.String(mode),
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", ApiVersion: "v1", Namespace: p.GetMetadata().GetNamespace(),
				Name: p.GetMetadata().GetName(), Uid: p.GetMetadata().GetUid(), ResourceVersion: p.GetMetadata().GetResourceVersion()},
			PersistentVolumeSource: &corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: path.Join(c.cfg.VolumeDir, p.GetMetadata().GetNamespace()+"_"+p.GetMetadata().GetName()+"_"+name),
				Type: proto.String("DirectoryOrCreate")}},
		},
	}
	if pv.Spec.PersistentVolumeReclaimPolicy == "" {
		pv.Spec.PersistentVolumeReclaimPolicy = "Delete"
	}
	if node != "" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []*corev1.NodeSelectorTerm{{
			MatchExpressions: []*corev1.NodeSelectorRequirement{{Key: hostnameLabel, Operator: "In", Values: []string{node}}}}}}}
	}
	got, err := c.cfg.Volumes.Create(ctx, pv)
	if apierrors.IsAlreadyExists(err) {
		got, err = c.cfg.Volumes.Get(ctx, "", name)
	}
	if err != nil {
		ctrl.Eventf(c.cfg.Recorder, pvc, "Warning", "ProvisioningFailed", "failed to provision volume with StorageClass %q: %v", sc.GetMetadata().GetName(), err)
		return fmt.Errorf("persistentvolume: provision for %s: %w", client.Key(pvc), err)
	}
	ctrl.Eventf(c.cfg.Recorder, pvc, "Normal", "ProvisioningSucceeded", "Successfully provisioned volume %s", name)
	return c.bind(ctx, p, got)
}
