// This file holds a DaemonSet's history: the ControllerRevisions that
// snapshot its pod template (data is the strategic merge patch that puts
// the template back, which `kubectl rollout undo` applies), named
// <daemonset>-<hash> and labelled controller-revision-hash=<hash>, the
// current one found (or created) on every sync and the old ones beyond
// revisionHistoryLimit deleted when no pod runs them.
package daemonset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"
	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/deployment"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// errStaleCollision is returned when a revision's name is taken by another
// template: the DaemonSet's collisionCount was bumped and the sync retries.
var errStaleCollision = errors.New("daemonset: revision name collision; collisionCount bumped")

// templatePatch is what a ControllerRevision of ds holds, byte for byte as
// Kubernetes writes it: {"spec":{"template":{...,"$patch":"replace"}}}
// with the template rendered through k8s.io/api's PodTemplateSpec and the
// keys sorted. kubectl compares the same bytes to find the revision
// matching a DaemonSet.
func templatePatch(ds *appsv1.DaemonSet) ([]byte, error) {
	b, err := kubejson.Marshal(ds.GetSpec().GetTemplate())
	if err != nil {
		return nil, fmt.Errorf("daemonset: template: %w", err)
	}
	var kt k8scorev1.PodTemplateSpec
	if err := json.Unmarshal(b, &kt); err != nil {
		return nil, fmt.Errorf("daemonset: template: %w", err)
	}
	if b, err = json.Marshal(kt); err != nil {
		return nil, fmt.Errorf("daemonset: template: %w", err)
	}
	var tmpl map[string]any
	if err := json.Unmarshal(b, &tmpl); err != nil {
		return nil, fmt.Errorf("daemonset: template: %w", err)
	}
	tmpl["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
}

// history finds the revisions ds controls (adopting orphans its selector
// matches), separates the one holding its current template from the old
// ones, creating it (or giving it the next revision number) as needed.
func (c *Controller) history(ctx context.Context, ds *appsv1.DaemonSet, sel labels.Selector) (cur *appsv1.ControllerRevision, old []*appsv1.ControllerRevision, err error) {
	patch, err := templatePatch(ds)
	if err != nil {
		return nil, nil, err
	}
	var current []*appsv1.ControllerRevision
	for _, cached := range c.cfg.RevisionInformer.Store().ByNamespace(ds.GetMetadata().GetNamespace()) {
		r := ctrl.ControllerRef(cached)
		var h *appsv1.ControllerRevision
		switch {
		case r != nil && r.GetUid() == ds.GetMetadata().GetUid():
			h = proto.Clone(cached).(*appsv1.ControllerRevision)
		case r == nil && cached.GetMetadata().GetDeletionTimestamp() == nil && sel.Matches(labels.Set(cached.GetMetadata().GetLabels())):
			u := proto.Clone(cached).(*appsv1.ControllerRevision)
			u.Metadata.OwnerReferences = append(u.Metadata.OwnerReferences, ctrl.NewControllerRef(ds, "apps/v1", "DaemonSet"))
			h, err = c.cfg.Revisions.Update(ctx, u)
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue
			}
			if err != nil {
				return nil, nil, fmt.Errorf("daemonset %s: adopt revision %s: %w", client.Key(ds), client.Key(cached), err)
			}
		default:
			continue
		}
		if _, ok := h.GetMetadata().GetLabels()[HashLabel]; !ok {
			// As Kubernetes: a revision without the hash label gets its name.
			if h.Metadata.Labels == nil {
				h.Metadata.Labels = map[string]string{}
			}
			h.Metadata.Labels[HashLabel] = h.GetMetadata().GetName()
			if h, err = c.cfg.Revisions.Update(ctx, h); err != nil {
				return nil, nil, fmt.Errorf("daemonset %s: label revision: %w", client.Key(ds), err)
			}
		}
		if string(h.GetData().GetRaw()) == string(patch) {
			current = append(current, h)
		} else {
			old = append(old, h)
		}
	}
	next := maxRevision(old) + 1
	if len(current) == 0 {
		cur, err = c.snapshot(ctx, ds, patch, next)
		return cur, old, err
	}
	cur, err = c.dedup(ctx, ds, current)
	if err != nil {
		return nil, nil, err
	}
	if cur.GetRevision() < next {
		u := proto.Clone(cur).(*appsv1.ControllerRevision)
		u.Revision = next
		if cur, err = c.cfg.Revisions.Update(ctx, u); err != nil {
			return nil, nil, fmt.Errorf("daemonset %s: renumber revision %s: %w", client.Key(ds), u.GetMetadata().GetName(), err)
		}
	}
	return cur, old, nil
}

func maxRevision(hs []*appsv1.ControllerRevision) int64 {
	var m int64
	for _, h := range hs {
		m = max(m, h.GetRevision())
	}
	return m
}

// dedup keeps the highest-numbered of several revisions holding the same
// template, relabels the pods of the others with its hash, and deletes them.
func (c *Controller) dedup(ctx context.Context, ds *appsv1.DaemonSet, hs []*appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	keep := hs[0]
	for _, h := range hs[1:] {
		if h.GetRevision() >= keep.GetRevision() {
			keep = h
		}
	}
	if len(hs) == 1 {
		return keep, nil
	}
	hash := keep.GetMetadata().GetLabels()[HashLabel]
	for _, p := range c.podsOf(ds) {
		if p.GetMetadata().GetLabels()[HashLabel] == hash {
			continue
		}
		u := p
		if u.Metadata.Labels == nil {
			u.Metadata.Labels = map[string]string{}
		}
		u.Metadata.Labels[HashLabel] = hash
		if _, err := c.cfg.Pods.Update(ctx, u); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("daemonset %s: relabel pod %s: %w", client.Key(ds), client.Key(p), err)
		}
	}
	for _, h := range hs {
		if h == keep {
			continue
		}
		if err := c.cfg.Revisions.Delete(ctx, h.GetMetadata().GetNamespace(), h.GetMetadata().GetName(), client.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("daemonset %s: delete duplicate revision %s: %w", client.Key(ds), h.GetMetadata().GetName(), err)
		}
	}
	return keep, nil
}

// snapshot creates the revision of ds's current template. Should its name
// be taken by a revision holding another template, it bumps the
// DaemonSet's collisionCount (which changes the hash) and fails so the
// sync is retried.
func (c *Controller) snapshot(ctx context.Context, ds *appsv1.DaemonSet, patch []byte, revision int64) (*appsv1.ControllerRevision, error) {
	hash := deployment.TemplateHash(ds.GetSpec().GetTemplate(), ds.GetStatus().CollisionCount)
	lbls := map[string]string{}
	for k, v := range ds.GetSpec().GetTemplate().GetMetadata().GetLabels() {
		lbls[k] = v
	}
	lbls[HashLabel] = hash
	var annotations map[string]string
	if a := ds.GetMetadata().GetAnnotations(); len(a) > 0 {
		annotations = make(map[string]string, len(a))
		for k, v := range a {
			annotations[k] = v
		}
	}
	h := &appsv1.ControllerRevision{
		ApiVersion: "apps/v1", Kind: "ControllerRevision",
		Metadata: &metav1.ObjectMeta{
			Name: ds.GetMetadata().GetName() + "-" + hash, Namespace: ds.GetMetadata().GetNamespace(),
			Labels: lbls, Annotations: annotations,
			OwnerReferences: []*metav1.OwnerReference{ctrl.NewControllerRef(ds, "apps/v1", "DaemonSet")},
		},
		Data:     &metav1.RawExtension{Raw: patch},
		Revision: revision,
	}
	got, err := c.cfg.Revisions.Create(ctx, h)
	if err == nil {
		return got, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("daemonset %s: create revision %s: %w", client.Key(ds), h.Metadata.Name, err)
	}
	ex, gerr := c.cfg.Revisions.Get(ctx, h.Metadata.Namespace, h.Metadata.Name)
	if gerr != nil {
		return nil, fmt.Errorf("daemonset %s: get revision %s: %w", client.Key(ds), h.Metadata.Name, gerr)
	}
	if r := ctrl.ControllerRef(ex); r != nil && r.GetUid() == ds.GetMetadata().GetUid() && string(ex.GetData().GetRaw()) == string(patch) {
		return ex, nil
	}
	fresh, gerr := c.cfg.DaemonSets.Get(ctx, ds.GetMetadata().GetNamespace(), ds.GetMetadata().GetName())
	if gerr != nil {
		return nil, fmt.Errorf("daemonset %s: %w", client.Key(ds), gerr)
	}
	if fresh.GetStatus().GetCollisionCount() != ds.GetStatus().GetCollisionCount() {
		return nil, fmt.Errorf("daemonset %s: stale collisionCount: %w", client.Key(ds), errStaleCollision)
	}
	if fresh.Status == nil {
		fresh.Status = &appsv1.DaemonSetStatus{}
	}
	fresh.Status.CollisionCount = proto.Int32(fresh.GetStatus().GetCollisionCount() + 1)
	if _, err := c.cfg.DaemonSets.UpdateStatus(ctx, fresh); err != nil {
		return nil, fmt.Errorf("daemonset %s: bump collisionCount: %w", client.Key(ds), err)
	}
	return nil, fmt.Errorf("daemonset %s: %w", client.Key(ds), errStaleCollision)
}

// cleanupHistory deletes the oldest old revisions beyond
// revisionHistoryLimit, skipping those a pod still runs.
func (c *Controller) cleanupHistory(ctx context.Context, ds *appsv1.DaemonSet, old []*appsv1.ControllerRevision) error {
	toKill := len(old) - int(ds.GetSpec().GetRevisionHistoryLimit())
	if ds.GetSpec().RevisionHistoryLimit == nil {
		toKill = len(old) - 10
	}
	if toKill <= 0 {
		return nil
	}
	live := map[string]bool{}
	for _, p := range c.podsOf(ds) {
		if h := p.GetMetadata().GetLabels()[HashLabel]; h != "" {
			live[h] = true
		}
	}
	sort.SliceStable(old, func(i, j int) bool { return old[i].GetRevision() < old[j].GetRevision() })
	for _, h := range old {
		if toKill <= 0 {
			break
		}
		if live[h.GetMetadata().GetLabels()[HashLabel]] {
			continue
		}
		if err := c.cfg.Revisions.Delete(ctx, h.GetMetadata().GetNamespace(), h.GetMetadata().GetName(), client.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("daemonset %s: delete revision %s: %w", client.Key(ds), h.GetMetadata().GetName(), err)
		}
		toKill--
	}
	return nil
}
