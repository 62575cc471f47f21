// This file holds the RollingUpdate strategy: without maxSurge, old pods
// are deleted (and replaced by the next sync) while fewer than
// maxUnavailable nodes are without an available pod; with maxSurge, a new
// pod starts beside the old one on up to maxSurge nodes at a time and the
// old one goes once the new one is available. OnDelete replaces nothing:
// a pod deleted by its user comes back with the current template.
package daemonset

import (
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// splitOnNode returns the node's one current and one old pod (either may
// be nil), leaving out pods being deleted; ok is false with more than one
// of either (manage removes the extra ones first).
func splitOnNode(ds *appsv1.DaemonSet, pods []*corev1.Pod, hash string) (newPod, oldPod *corev1.Pod, ok bool) {
	for _, p := range pods {
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if updated(p, ds, hash) {
			if newPod != nil {
				return nil, nil, false
			}
			newPod = p
		} else {
			if oldPod != nil {
				return nil, nil, false
			}
			oldPod = p
		}
	}
	return newPod, oldPod, true
}

// rollingUpdate deletes the old pods (or, surging, starts the new pods)
// the strategy allows now.
func (c *Controller) rollingUpdate(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, hash string) error {
	byNode := c.podsByNode(ds)
	nodeByName := map[string]*corev1.Node{}
	desired := 0
	for _, n := range nodes {
		nodeByName[n.GetMetadata().GetName()] = n
		if run, _ := shouldRun(n, ds); run {
			desired++
			if _, ok := byNode[n.GetMetadata().GetName()]; !ok {
				byNode[n.GetMetadata().GetName()] = nil
			}
		}
	}
	maxUnavailable, err := unavailableCount(ds, desired)
	if err != nil {
		return fmt.Errorf("daemonset %s: maxUnavailable: %w", client.Key(ds), err)
	}
	maxSurge, err := surgeCount(ds, desired)
	if err != nil {
		return fmt.Errorf("daemonset %s: maxSurge: %w", client.Key(ds), err)
	}
	minReady, now := ds.GetSpec().GetMinReadySeconds(), c.now()
	available := func(p *corev1.Pod) bool { return ctrl.PodAvailable(p, minReady, now) }
	names := sortedKeys(byNode)

	if maxSurge == 0 {
		unavailable := 0
		var replace, candidates []*corev1.Pod
		for _, name := range names {
			newPod, oldPod, ok := splitOnNode(ds, byNode[name], hash)
			switch {
			case !ok, oldPod == nil && newPod == nil, oldPod != nil && newPod != nil:
				unavailable++ // manage creates or deletes here
			case newPod != nil:
				if !available(newPod) {
					unavailable++
				}
			case !available(oldPod):
				replace = append(replace, oldPod)
				unavailable++
			case unavailable < maxUnavailable:
				candidates = append(candidates, oldPod)
			}
		}
		room := min(max(maxUnavailable-unavailable, 0), len(candidates))
		return c.syncNodes(ctx, ds, append(replace, candidates[:room]...), nil, hash)
	}

	var del, shouldNotRun []*corev1.Pod
	var allowed, candidates []string
	surging, availableNow := 0, 0
	for _, name := range names {
		newPod, oldPod, ok := splitOnNode(ds, byNode[name], hash)
		if !ok {
			surging++
			continue
		}
		switch {
		case oldPod != nil && available(oldPod), oldPod == nil && newPod != nil && available(newPod):
			availableNow++
		}
		switch {
		case oldPod == nil:
			// manage creates the pod if there is none
		case newPod == nil:
			n := nodeByName[name]
			run := false
			if n != nil {
				run, _ = shouldRun(n, ds)
			}
			switch {
			case !available(oldPod) && !run:
				del = append(del, oldPod)
			case !available(oldPod):
				allowed = append(allowed, name)
			case !run:
				shouldNotRun = append(shouldNotRun, oldPod)
			case surging < maxSurge:
				candidates = append(candidates, name)
			}
		default:
			if !available(newPod) {
				surging++
				continue
			}
			del = append(del, oldPod)
		}
	}
	// Pods on nodes that should no longer run one go only as pods
	// elsewhere become available, so availability never drops.
	if n := min(availableNow-desired, len(shouldNotRun)); n > 0 {
		del = append(del, shouldNotRun[:n]...)
	}
	room := min(max(maxSurge-surging, 0), len(candidates))
	return c.syncNodes(ctx, ds, del, append(allowed, candidates[:room]...), hash)
}

// sortedKeys are m's nodes in name order, for a deterministic choice of
// candidates (Kubernetes takes them in map order).
func sortedKeys(m map[string][]*corev1.Pod) []string { return slices.Sorted(maps.Keys(m)) }
