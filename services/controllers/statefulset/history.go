// This file holds a StatefulSet's history: ControllerRevisions named
// <set>-<hash> whose data is the patch that puts the pod template back
// ({"spec":{"template":{...,"$patch":"replace"}}}, what `kubectl rollout
// undo` applies, as for DaemonSets), numbered in order; the update revision
// (the current template) is found, renumbered or created on every sync, and
// revisions beyond revisionHistoryLimit that no pod runs are deleted.
package statefulset

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"
	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// errCollision is returned when a revision's name is taken by another
// template: collisionCount was bumped and the sync retries.
var errCollision = errors.New("statefulset: revision name collision; collisionCount bumped")

// templatePatch is the data of a revision of set: its template rendered
// through k8s.io/api's PodTemplateSpec (keys sorted, as Kubernetes writes
// it), so kubectl finds the revision matching a set by comparing bytes.
func templatePatch(set *appsv1.StatefulSet) ([]byte, error) {
	b, err := kubejson.Marshal(set.GetSpec().GetTemplate())
	if err != nil {
		return nil, fmt.Errorf("statefulset: template: %w", err)
	}
	var kt k8scorev1.PodTemplateSpec
	if err := json.Unmarshal(b, &kt); err != nil {
		return nil, fmt.Errorf("statefulset: template: %w", err)
	}
	if b, err = json.Marshal(kt); err != nil {
		return nil, fmt.Errorf("statefulset: template: %w", err)
	}
	var tmpl map[string]any
	if err := json.Unmarshal(b, &tmpl); err != nil {
		return nil, fmt.Errorf("statefulset: template: %w", err)
	}
	tmpl["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
}

// templateOf is the pod template a revision holds.
func templateOf(h *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	var data struct {
		Spec struct {
			Template map[string]any `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(h.GetData().GetRaw(), &data); err != nil {
		return nil, fmt.Errorf("statefulset: revision %s: %w", h.GetMetadata().GetName(), err)
	}
	delete(data.Spec.Template, "$patch")
	b, err := json.Marshal(data.Spec.Template)
	if err != nil {
		return nil, fmt.Errorf("statefulset: revision %s: %w", h.GetMetadata().GetName(), err)
	}
	t := &corev1.PodTemplateSpec{}
	if err := kubejson.Unmarshal(b, t, kubejson.Options{}); err != nil {
		return nil, fmt.Errorf("statefulset: revision %s: %w", h.GetMetadata().GetName(), err)
	}
	return t, nil
}

// revisionHash is the hash in a revision's name: FNV-32a of its data and
// the collision count, as Kubernetes' controller history computes it.
func revisionHash(data []byte, collisionCount *int32) string {
	h := fnv.New32a()
	_, _ = h.Write(data)
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		_, _ = h.Write(b)
	}
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// revisions returns set's revisions (adopting orphans its selector
// matches), oldest first, with the current one (status.currentRevision, or
// the update one when there is none) and the update one (the template the
// set has now), creating or renumbering the latter as Kubernetes does.
func (c *Controller) revisions(ctx context.Context, set *appsv1.StatefulSet, sel labels.Selector) (all []*appsv1.ControllerRevision, cur, upd *appsv1.ControllerRevision, err error) {
	patch, err := templatePatch(set)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, cached := range c.cfg.RevisionInformer.Store().ByNamespace(set.GetMetadata().GetNamespace()) {
		r := ctrl.ControllerRef(cached)
		switch {
		case r != nil && r.GetUid() == set.GetMetadata().GetUid():
			all = append(all, proto.Clone(cached).(*appsv1.ControllerRevision))
		case r == nil && cached.GetMetadata().GetDeletionTimestamp() == nil && sel.Matches(labels.Set(cached.GetMetadata().GetLabels())):
			u := proto.Clone(cached).(*appsv1.ControllerRevision)
			u.Metadata.OwnerReferences = append(u.Metadata.OwnerReferences, ctrl.NewControllerRef(set, "apps/v1", "StatefulSet"))
			h, err := c.cfg.Revisions.Update(ctx, u)
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue
			}
			if err != nil {
				return nil, nil, nil, fmt.Errorf("statefulset %s: adopt revision %s: %w", client.Key(set), client.Key(cached), err)
			}
			all = append(all, h)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].GetRevision() < all[j].GetRevision() })
	var next int64 = 1
	if len(all) > 0 {
		next = all[len(all)-1].GetRevision() + 1
	}
	var equal []*appsv1.ControllerRevision
	for _, h := range all {
		if string(h.GetData().GetRaw()) == string(patch) {
			equal = append(equal, h)
		}
	}
	switch {
	case len(equal) > 0 && equal[len(equal)-1] == all[len(all)-1]:
		upd = all[len(all)-1]
	case len(equal) > 0:
		// Back to an older template (a rollback): that revision becomes
		// the newest.
		u := proto.Clone(equal[len(equal)-1]).(*appsv1.ControllerRevision)
		u.Revision = next
		if upd, err = c.cfg.Revisions.Update(ctx, u); err != nil {
			return nil, nil, nil, fmt.Errorf("statefulset %s: renumber revision %s: %w", client.Key(set), u.GetMetadata().GetName(), err)
		}
		for i, h := range all {
			if h.GetMetadata().GetUid() == upd.GetMetadata().GetUid() {
				all[i] = upd
			}
		}
		sort.SliceStable(all, func(i, j int) bool { return all[i].GetRevision() < all[j].GetRevision() })
	default:
		if upd, err = c.snapshot(ctx, set, patch, next); err != nil {
			return nil, nil, nil, err
		}
		all = append(all, upd)
	}
	cur = upd
	for _, h := range all {
		if h.GetMetadata().GetName() == set.GetStatus().GetCurrentRevision() {
			cur = h
		}
	}
	return all, cur, upd, nil
}

// snapshot creates the revision of set's template. Should its name be
// taken by another template, collisionCount is bumped (which changes the
// hash) and the sync fails to be retried.
func (c *Controller) snapshot(ctx context.Context, set *appsv1.StatefulSet, patch []byte, revision int64) (*appsv1.ControllerRevision, error) {
	hash := revisionHash(patch, set.GetStatus().CollisionCount)
	lbls := map[string]string{}
	for k, v := range set.GetSpec().GetTemplate().GetMetadata().GetLabels() {
		lbls[k] = v
	}
	lbls[HashLabel] = hash
	h := &appsv1.ControllerRevision{
		ApiVersion: "apps/v1", Kind: "ControllerRevision",
		Metadata: &metav1.ObjectMeta{
			Name: set.GetMetadata().GetName() + "-" + hash, Namespace: set.GetMetadata().GetNamespace(), Labels: lbls,
			OwnerReferences: []*metav1.OwnerReference{ctrl.NewControllerRef(set, "apps/v1", "StatefulSet")},
		},
		Data:     &metav1.RawExtension{Raw: patch},
		Revision: revision,
	}
	got, err := c.cfg.Revisions.Create(ctx, h)
	if err == nil {
		return got, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("statefulset %s: create revision %s: %w", client.Key(set), h.Metadata.Name, err)
	}
	ex, gerr := c.cfg.Revisions.Get(ctx, h.Metadata.Namespace, h.Metadata.Name)
	if gerr != nil {
		return nil, fmt.Errorf("statefulset %s: get revision %s: %w", client.Key(set), h.Metadata.Name, gerr)
	}
	if r := ctrl.ControllerRef(ex); r != nil && r.GetUid() == set.GetMetadata().GetUid() && string(ex.GetData().GetRaw()) == string(patch) {
		return ex, nil
	}
	u := proto.Clone(set).(*appsv1.StatefulSet)
	if u.Status == nil {
		u.Status = &appsv1.StatefulSetStatus{}
	}
	u.Status.CollisionCount = proto.Int32(set.GetStatus().GetCollisionCount() + 1)
	if _, err := c.cfg.StatefulSets.UpdateStatus(ctx, u); err != nil {
		return nil, fmt.Errorf("statefulset %s: bump collisionCount: %w", client.Key(set), err)
	}
	return nil, fmt.Errorf("statefulset %s: %w", client.Key(set), errCollision)
}

// truncateHistory deletes the oldest revisions beyond
// revisionHistoryLimit, keeping the current and update ones and those a
// pod runs.
func (c *Controller) truncateHistory(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod, all []*appsv1.ControllerRevision, cur, upd *appsv1.ControllerRevision) error {
	live := map[string]bool{cur.GetMetadata().GetName(): true, upd.GetMetadata().GetName(): true}
	for _, p := range pods {
		live[p.GetMetadata().GetLabels()[HashLabel]] = true
	}
	var old []*appsv1.ControllerRevision
	for _, h := range all {
		if !live[h.GetMetadata().GetName()] {
			old = append(old, h)
		}
	}
	limit := 10
	if l := set.GetSpec().RevisionHistoryLimit; l != nil {
		limit = int(*l)
	}
	for i := 0; i < len(old)-limit; i++ {
		h := old[i]
		if err := c.cfg.Revisions.Delete(ctx, h.GetMetadata().GetNamespace(), h.GetMetadata().GetName(), client.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("statefulset %s: delete revision %s: %w", client.Key(set), h.GetMetadata().GetName(), err)
		}
	}
	return nil
}
