// This file holds one sync of a StatefulSet's pods and claims, in
// Kubernetes' order: the replicas (ordinals in range) are created, or
// replaced when finished, lowest first; then the condemned (ordinals out of
// range) are deleted, highest first; then, with RollingUpdate, pods not at
// the update revision are deleted, highest first, down to the partition,
// to be recreated from it. OrderedReady stops at the first pod that is not
// yet Running and Ready (or is terminating); Parallel does not wait.
package statefulset

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// syncer is the state of one sync.
type syncer struct {
	c *Controller
	// set is the StatefulSet; curSet and updSet are it with the template
	// of the current and of the update revision.
	set, curSet, updSet *appsv1.StatefulSet
	cur, upd            *appsv1.ControllerRevision
}

// sync acts on pods (the set's) and returns them as they now are (created
// pods added, deleted ones marked terminating) for the status.
func (s *syncer) sync(ctx context.Context, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	set := s.set
	start := int(set.GetSpec().GetOrdinals().GetStart())
	n := int(set.GetSpec().GetReplicas())
	replicas := make([]*corev1.Pod, n)
	var condemned []*corev1.Pod
	for _, p := range pods {
		switch o := ordinalOf(set, p); {
		case o >= start && o < start+n:
			replicas[o-start] = p
		default:
			condemned = append(condemned, p)
		}
	}
	sort.Slice(condemned, func(i, j int) bool { return ordinalOf(set, condemned[i]) > ordinalOf(set, condemned[j]) })
	monotonic := set.GetSpec().GetPodManagementPolicy() != "Parallel"
	minReady := set.GetSpec().GetMinReadySeconds()
	now := s.c.now()
	result := func() []*corev1.Pod {
		var out []*corev1.Pod
		for _, p := range append(slices.Clone(replicas), condemned...) {
			if p != nil {
				out = append(out, p)
			}
		}
		return out
	}

	for i := range replicas {
		p := replicas[i]
		if p != nil && finished(p) && !terminating(p) {
			// A finished pod is replaced, as Kubernetes does.
			ctrl.Eventf(s.c.cfg.Recorder, set, "Warning", "RecreatingFailedPod", "StatefulSet %s/%s is recreating failed Pod %s",
				set.GetMetadata().GetNamespace(), set.GetMetadata().GetName(), p.GetMetadata().GetName())
			if err := s.deletePod(ctx, p); err != nil {
				return result(), err
			}
			replicas[i] = markTerminating(p)
			if monotonic {
				return result(), nil
			}
			continue
		}
		if p == nil {
			created, err := s.createPod(ctx, start+i)
			if err != nil {
				return result(), err
			}
			replicas[i] = created
			if monotonic {
				return result(), nil
			}
			continue
		}
		if err := s.ensureClaims(ctx, p, true); err != nil {
			return result(), err
		}
		if terminating(p) && monotonic {
			return result(), nil
		}
		if monotonic && (!runningAndReady(p) || !ctrl.PodAvailable(p, minReady, now)) {
			return result(), nil
		}
	}

	var firstUnhealthy *corev1.Pod
	for _, p := range append(slices.Clone(replicas), condemned...) {
		if p != nil && (!runningAndReady(p) || terminating(p)) {
			firstUnhealthy = p
			break
		}
	}
	for i, p := range condemned {
		if terminating(p) {
			if monotonic {
				return result(), nil
			}
			continue
		}
		if monotonic && !runningAndReady(p) && p != firstUnhealthy {
			return result(), nil
		}
		if err := s.ensureClaims(ctx, p, false); err != nil {
			return result(), err
		}
		if err := s.deletePod(ctx, p); err != nil {
			return result(), err
		}
		condemned[i] = markTerminating(p)
		if monotonic {
			return result(), nil
		}
	}

	if set.GetSpec().GetUpdateStrategy().GetType() != "RollingUpdate" {
		return result(), nil
	}
	partition := int(set.GetSpec().GetUpdateStrategy().GetRollingUpdate().GetPartition())
	for i := len(replicas) - 1; i >= partition; i-- {
		p := replicas[i]
		if p == nil {
			continue
		}
		if revisionOf(p) != s.upd.GetMetadata().GetName() && !terminating(p) {
			ctrl.Eventf(s.c.cfg.Recorder, set, "Normal", "SuccessfulDelete", "delete Pod %s in StatefulSet %s successful",
				p.GetMetadata().GetName(), set.GetMetadata().GetName())
			if err := s.c.cfg.Pods.Delete(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), client.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return result(), fmt.Errorf("statefulset %s: delete pod %s for update: %w", client.Key(set), p.GetMetadata().GetName(), err)
			}
			replicas[i] = markTerminating(p)
			return result(), nil
		}
		if !runningAndReady(p) || terminating(p) || !ctrl.PodAvailable(p, minReady, now) {
			return result(), nil
		}
	}
	return result(), nil
}

// markTerminating is a copy of p as it is once deleted.
func markTerminating(p *corev1.Pod) *corev1.Pod {
	u := proto.Clone(p).(*corev1.Pod)
	if u.Metadata.DeletionTimestamp == nil {
		u.Metadata.DeletionTimestamp = timestamppb.Now()
	}
	return u
}

func (s *syncer) deletePod(ctx context.Context, p *corev1.Pod) error {
	err := s.c.cfg.Pods.Delete(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), client.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		ctrl.Eventf(s.c.cfg.Recorder, s.set, "Warning", "FailedDelete", "delete Pod %s in StatefulSet %s failed error: %v",
			p.GetMetadata().GetName(), s.set.GetMetadata().GetName(), err)
		return fmt.Errorf("statefulset %s: delete pod %s: %w", client.Key(s.set), p.GetMetadata().GetName(), err)
	}
	ctrl.Eventf(s.c.cfg.Recorder, s.set, "Normal", "SuccessfulDelete", "delete Pod %s in StatefulSet %s successful",
		p.GetMetadata().GetName(), s.set.GetMetadata().GetName())
	return nil
}

// createPod creates the claims and then the pod of ordinal n: from the
// current revision below the partition, from the update revision
// otherwise (as Kubernetes' newVersionedStatefulSetPod).
func (s *syncer) createPod(ctx context.Context, n int) (*corev1.Pod, error) {
	from, rev := s.updSet, s.upd
	if ru := s.set.GetSpec().GetUpdateStrategy().GetRollingUpdate(); ru != nil &&
		n < int(s.set.GetSpec().GetOrdinals().GetStart())+int(ru.GetPartition()) {
		from, rev = s.curSet, s.cur
	}
	pod := newPod(from, n, rev.GetMetadata().GetName())
	if err := s.ensureClaims(ctx, pod, true); err != nil {
		return nil, err
	}
	got, err := s.c.cfg.Pods.Create(ctx, pod)
	if apierrors.IsAlreadyExists(err) {
		// A stale cache: the pod is there.
		return pod, nil
	}
	if err != nil {
		ctrl.Eventf(s.c.cfg.Recorder, s.set, "Warning", "FailedCreate", "create Pod %s in StatefulSet %s failed error: %v",
			pod.GetMetadata().GetName(), s.set.GetMetadata().GetName(), err)
		return nil, fmt.Errorf("statefulset %s: create pod %s: %w", client.Key(s.set), pod.GetMetadata().GetName(), err)
	}
	ctrl.Eventf(s.c.cfg.Recorder, s.set, "Normal", "SuccessfulCreate", "create Pod %s in StatefulSet %s successful",
		pod.GetMetadata().GetName(), s.set.GetMetadata().GetName())
	return got, nil
}

// newPod is set's pod of ordinal n at revision rev: the template's labels,
// annotations and spec; identity labels, hostname and subdomain; a volume
// per claim template naming the pod's claim.
func newPod(set *appsv1.StatefulSet, n int, rev string) *corev1.Pod {
	t := set.GetSpec().GetTemplate()
	name := podName(set, n)
	m := &metav1.ObjectMeta{
		Name: name, Namespace: set.GetMetadata().GetNamespace(),
		Labels: map[string]string{}, Annotations: map[string]string{},
		OwnerReferences: []*metav1.OwnerReference{ctrl.NewControllerRef(set, "apps/v1", "StatefulSet")},
	}
	for k, v := range t.GetMetadata().GetLabels() {
		m.Labels[k] = v
	}
	for k, v := range t.GetMetadata().GetAnnotations() {
		m.Annotations[k] = v
	}
	m.Labels[PodNameLabel] = name
	m.Labels[PodIndexLabel] = strconv.Itoa(n)
	m.Labels[HashLabel] = rev
	spec, _ := proto.Clone(t.GetSpec()).(*corev1.PodSpec)
	if spec == nil {
		spec = &corev1.PodSpec{}
	}
	spec.Hostname = name
	spec.Subdomain = set.GetSpec().GetServiceName()
	for _, ct := range set.GetSpec().GetVolumeClaimTemplates() {
		v := &corev1.Volume{Name: ct.GetMetadata().GetName(), VolumeSource: &corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(set, ct, n)}}}
		if i := slices.IndexFunc(spec.Volumes, func(x *corev1.Volume) bool { return x.GetName() == v.Name }); i >= 0 {
			spec.Volumes[i] = v
		} else {
			spec.Volumes = append(spec.Volumes, v)
		}
	}
	return &corev1.Pod{ApiVersion: "v1", Kind: "Pod", Metadata: m, Spec: spec}
}

// ensureClaims creates the missing claims of pod and sets their owner
// references as the retention policy asks (Kubernetes'
// updateClaimOwnerRefForSetAndPod): whenDeleted Delete makes the set their
// owner; whenScaled Delete makes a scaled-down pod (inRange false) their
// owner, so the garbage collector deletes them with it.
func (s *syncer) ensureClaims(ctx context.Context, pod *corev1.Pod, inRange bool) error {
	set := s.set
	n := ordinalOf(set, pod)
	for _, ct := range set.GetSpec().GetVolumeClaimTemplates() {
		name := claimName(set, ct, n)
		claim, ok := s.c.cfg.ClaimInformer.Store().Get(client.KeyOf(set.GetMetadata().GetNamespace(), name))
		if !ok {
			// Created unless it exists (a cache behind the API service).
			claim = newClaim(set, ct, name)
		}
		u := proto.Clone(claim).(*corev1.PersistentVolumeClaim)
		if u.Metadata == nil {
			u.Metadata = &metav1.ObjectMeta{}
		}
		u.Metadata.OwnerReferences = claimOwners(u.GetMetadata().GetOwnerReferences(), set, pod, inRange)
		if u.GetMetadata().GetUid() == "" {
			if _, err := s.c.cfg.Claims.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
				ctrl.Eventf(s.c.cfg.Recorder, set, "Warning", "FailedCreate", "create Claim %s for Pod %s in StatefulSet %s failed error: %v",
					name, pod.GetMetadata().GetName(), set.GetMetadata().GetName(), err)
				return fmt.Errorf("statefulset %s: create claim %s: %w", client.Key(set), name, err)
			} else if err == nil {
				ctrl.Eventf(s.c.cfg.Recorder, set, "Normal", "SuccessfulCreate", "create Claim %s Pod %s in StatefulSet %s success",
					name, pod.GetMetadata().GetName(), set.GetMetadata().GetName())
			}
			continue
		}
		if refsEqual(u.GetMetadata().GetOwnerReferences(), claim.GetMetadata().GetOwnerReferences()) || u.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if _, err := s.c.cfg.Claims.Update(ctx, u); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("statefulset %s: owners of claim %s: %w", client.Key(set), name, err)
		}
	}
	return nil
}

// newClaim is the claim of template ct named name: the template, with the
// set's selector labels added, as Kubernetes' getPersistentVolumeClaims.
func newClaim(set *appsv1.StatefulSet, ct *corev1.PersistentVolumeClaim, name string) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{ApiVersion: "v1", Kind: "PersistentVolumeClaim",
		Metadata: &metav1.ObjectMeta{Name: name, Namespace: set.GetMetadata().GetNamespace(), Labels: map[string]string{},
			Annotations: ct.GetMetadata().GetAnnotations()},
		Spec: proto.Clone(ct.GetSpec()).(*corev1.PersistentVolumeClaimSpec)}
	for k, v := range ct.GetMetadata().GetLabels() {
		c.Metadata.Labels[k] = v
	}
	for k, v := range set.GetSpec().GetSelector().GetMatchLabels() {
		c.Metadata.Labels[k] = v
	}
	return c
}

// claimOwners is refs with the references to set and pod rewritten for
// the retention policy. Another controller owning the claim leaves it
// without references to either, as in Kubernetes.
func claimOwners(refs []*metav1.OwnerReference, set *appsv1.StatefulSet, pod *corev1.Pod, inRange bool) []*metav1.OwnerReference {
	ours := func(r *metav1.OwnerReference) bool {
		return (r.GetKind() == "StatefulSet" && r.GetName() == set.GetMetadata().GetName()) ||
			(r.GetKind() == "Pod" && r.GetName() == pod.GetMetadata().GetName())
	}
	var out []*metav1.OwnerReference
	foreign := false
	for _, r := range refs {
		if ours(r) {
			continue
		}
		foreign = foreign || r.GetController()
		out = append(out, r)
	}
	if foreign {
		return out
	}
	p := set.GetSpec().GetPersistentVolumeClaimRetentionPolicy()
	switch {
	case p.GetWhenScaled() == "Delete" && !inRange:
		out = append(out, ctrl.NewControllerRef(pod, "v1", "Pod"))
	case p.GetWhenDeleted() == "Delete":
		out = append(out, ctrl.NewControllerRef(set, "apps/v1", "StatefulSet"))
	}
	return out
}

func refsEqual(a, b []*metav1.OwnerReference) bool {
	return slices.EqualFunc(a, b, func(x, y *metav1.OwnerReference) bool { return proto.Equal(x, y) })
}
