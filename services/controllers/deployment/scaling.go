// This file holds how a Deployment's replicas are spread over its
// ReplicaSets: maxSurge and maxUnavailable in pods, the replicas
// annotations, proportional scaling of a resized Deployment, and the
// RollingUpdate and Recreate strategies' steps.

package deployment

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// ResolveFenceposts turns maxSurge and maxUnavailable into pod counts for
// replicas desired pods: a percentage of surge rounds up, of unavailable
// down; if both come to 0, unavailable is 1 so the rollout can proceed.
func ResolveFenceposts(surge, unavailable *metav1.IntOrString, replicas int32) (int32, int32, error) {
	s, err := scaled(surge, replicas, true)
	if err != nil {
		return 0, 0, err
	}
	u, err := scaled(unavailable, replicas, false)
	if err != nil {
		return 0, 0, err
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return s, u, nil
}

func scaled(v *metav1.IntOrString, total int32, roundUp bool) (int32, error) {
	if v == nil {
		return 0, nil
	}
	if iv, ok := v.GetValue().(*metav1.IntOrString_IntVal); ok {
		return iv.IntVal, nil
	}
	s := v.GetStrVal()
	if !strings.HasSuffix(s, "%") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("invalid value %q: %w", s, err)
		}
		return int32(n), nil
	}
	p, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil {
		return 0, fmt.Errorf("invalid percentage %q: %w", s, err)
	}
	f := float64(p) * float64(total) / 100
	if roundUp {
		return int32(math.Ceil(f)), nil
	}
	return int32(math.Floor(f)), nil
}

// newReplicas is how many replicas the new ReplicaSet may have now under
// RollingUpdate: up to spec.replicas, within replicas+maxSurge in total.
func newReplicas(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) int32 {
	want := d.GetSpec().GetReplicas()
	ru := d.GetSpec().GetStrategy().GetRollingUpdate()
	surge, _, err := ResolveFenceposts(ru.GetMaxSurge(), ru.GetMaxUnavailable(), want)
	if err != nil {
		surge = 0
	}
	var cur, total int32
	if newRS != nil {
		cur = replicas(newRS)
		total = cur
	}
	for _, rs := range old {
		total += replicas(rs)
	}
	if cur >= want {
		return want
	}
	maxTotal := want + surge
	if total >= maxTotal {
		return cur
	}
	return cur + min(maxTotal-total, want-cur)
}

// maxSurge is d's maxSurge in pods (0 for Recreate).
func maxSurge(d *appsv1.Deployment) int32 {
	if d.GetSpec().GetStrategy().GetType() == "Recreate" {
		return 0
	}
	ru := d.GetSpec().GetStrategy().GetRollingUpdate()
	s, _, err := ResolveFenceposts(ru.GetMaxSurge(), ru.GetMaxUnavailable(), d.GetSpec().GetReplicas())
	if err != nil {
		return 0
	}
	return s
}

// setReplicasAnnotations records d's replicas and replicas+maxSurge in a
// ReplicaSet's annotations; it reports whether they changed.
func setReplicasAnnotations(a map[string]string, d *appsv1.Deployment) bool {
	desired := strconv.Itoa(int(d.GetSpec().GetReplicas()))
	maxR := strconv.Itoa(int(d.GetSpec().GetReplicas() + maxSurge(d)))
	if a[DesiredReplicasAnnotation] == desired && a[MaxReplicasAnnotation] == maxR {
		return false
	}
	a[DesiredReplicasAnnotation], a[MaxReplicasAnnotation] = desired, maxR
	return true
}

// scale sets rs's replicas to n and its replicas annotations to d's; it
// writes nothing if both are already so.
func (c *Controller) scale(ctx context.Context, d *appsv1.Deployment, rs *appsv1.ReplicaSet, n int32) (*appsv1.ReplicaSet, error) {
	u := proto.Clone(rs).(*appsv1.ReplicaSet)
	if u.Metadata.Annotations == nil {
		u.Metadata.Annotations = map[string]string{}
	}
	if !setReplicasAnnotations(u.Metadata.Annotations, d) && replicas(rs) == n {
		return rs, nil
	}
	from := replicas(rs)
	u.Spec.Replicas = proto.Int32(n)
	got, err := c.cfg.ReplicaSets.Update(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("deployment %s: scale %s to %d: %w", client.Key(d), client.Key(rs), n, err)
	}
	if n != from {
		dir := "up"
		if n < from {
			dir = "down"
		}
		ctrl.Eventf(c.cfg.Recorder, d, client.EventNormal, "ScalingReplicaSet", "Scaled %s replica set %s from %d to %d", dir, rs.GetMetadata().GetName(), from, n)
	}
	return got, nil
}

// isScalingEvent reports whether d was scaled since one of its active
// ReplicaSets was last sized (its desired-replicas annotation differs).
func isScalingEvent(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) bool {
	for _, rs := range append([]*appsv1.ReplicaSet{newRS}, old...) {
		if rs == nil || replicas(rs) == 0 {
			continue
		}
		v, ok := rs.GetMetadata().GetAnnotations()[DesiredReplicasAnnotation]
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(v); err == nil && int32(n) != d.GetSpec().GetReplicas() {
			return true
		}
	}
	return false
}

// active are the ReplicaSets with replicas > 0.
func active(rss []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range rss {
		if rs != nil && replicas(rs) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

// scaleReplicaSets applies a change of d's replicas to its ReplicaSets as
// Kubernetes does: with one active ReplicaSet (or none: the newest) it
// gets all replicas; with a saturated new ReplicaSet the old ones go to 0;
// otherwise, under RollingUpdate, the pods to add (or remove) up to
// replicas+maxSurge are shared among the active ReplicaSets in proportion
// to their sizes (ProportionalSizes). old is oldest first.
func (c *Controller) scaleReplicaSets(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) (bool, error) {
	want := d.GetSpec().GetReplicas()
	act := active(append(append([]*appsv1.ReplicaSet{}, old...), newRS))
	var only *appsv1.ReplicaSet
	switch {
	case len(act) == 1:
		only = act[0]
	case len(act) == 0 && newRS != nil:
		only = newRS
	case len(act) == 0 && len(old) > 0:
		only = old[len(old)-1]
	}
	if only != nil {
		if _, err := c.scale(ctx, d, only, want); err != nil {
			return false, err
		}
		return replicas(only) != want, nil
	}
	if len(act) == 0 {
		return false, nil
	}
	if newRS != nil && replicas(newRS) == want && newRS.GetMetadata().GetAnnotations()[DesiredReplicasAnnotation] == strconv.Itoa(int(want)) &&
		newRS.GetStatus().GetAvailableReplicas() == want {
		changed := false
		for _, rs := range active(old) {
			if _, err := c.scale(ctx, d, rs, 0); err != nil {
				return changed, err
			}
			changed = true
		}
		return changed, nil
	}
	if d.GetSpec().GetStrategy().GetType() == "Recreate" {
		return false, nil
	}
	sizes := ProportionalSizes(d, act)
	changed := false
	for _, rs := range act {
		n := sizes[rs.GetMetadata().GetName()]
		if _, err := c.scale(ctx, d, rs, n); err != nil {
			return changed, err
		}
		changed = changed || n != replicas(rs)
	}
	return changed, nil
}

// ProportionalSizes shares the change of d's replicas among its active
// ReplicaSets act (Kubernetes' proportional scaling): the room to fill is
// replicas+maxSurge (0 if replicas is 0) minus the pods the ReplicaSets
// have now; each ReplicaSet gets round(size × newMax / oldMax) − size of
// it, oldMax being its max-replicas annotation (or d's status.replicas),
// largest first (newer first on ties when growing, older first when
// shrinking), never more than what is left; the rounding leftover goes to
// the largest. It returns the new size of each by name.
func ProportionalSizes(d *appsv1.Deployment, act []*appsv1.ReplicaSet) map[string]int32 {
	want := d.GetSpec().GetReplicas()
	var total int32
	for _, rs := range act {
		total += replicas(rs)
	}
	var allowed int32
	if want > 0 {
		allowed = want + maxSurge(d)
	}
	toAdd := allowed - total
	sorted := append([]*appsv1.ReplicaSet(nil), act...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if a, b := replicas(sorted[i]), replicas(sorted[j]); a != b {
			return a > b
		}
		ti, tj := sorted[i].GetMetadata().GetCreationTimestamp().AsTime(), sorted[j].GetMetadata().GetCreationTimestamp().AsTime()
		if toAdd > 0 {
			return ti.After(tj)
		}
		return ti.Before(tj)
	})
	sizes := map[string]int32{}
	var added int32
	for _, rs := range sorted {
		n := replicas(rs)
		if toAdd != 0 && added != toAdd {
			var fraction int32
			if want == 0 {
				fraction = -n
			} else {
				before := d.GetStatus().GetReplicas()
				if v, err := strconv.Atoi(rs.GetMetadata().GetAnnotations()[MaxReplicasAnnotation]); err == nil && v > 0 {
					before = int32(v)
				}
				if before > 0 {
					fraction = int32(math.Round(float64(n)*float64(allowed)/float64(before))) - n
				}
			}
			left := toAdd - added
			p := max(fraction, left)
			if toAdd > 0 {
				p = min(fraction, left)
			}
			n += p
			added += p
		}
		sizes[rs.GetMetadata().GetName()] = n
	}
	if len(sorted) > 0 && toAdd != 0 {
		first := sorted[0].GetMetadata().GetName()
		sizes[first] = max(sizes[first]+toAdd-added, 0)
	}
	return sizes
}

// rollingUpdate takes one step of a RollingUpdate: grow the new ReplicaSet
// within maxSurge, shrink the old ones within maxUnavailable.
func (c *Controller) rollingUpdate(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) (bool, error) {
	want := d.GetSpec().GetReplicas()
	changed := false
	if n := replicas(newRS); n > want {
		if _, err := c.scale(ctx, d, newRS, want); err != nil {
			return false, err
		}
		return true, nil
	}
	if n := newReplicas(d, newRS, old); n != replicas(newRS) {
		got, err := c.scale(ctx, d, newRS, n)
		if err != nil {
			return false, err
		}
		proto.Reset(newRS)
		proto.Merge(newRS, got)
		return true, nil
	}
	ru := d.GetSpec().GetStrategy().GetRollingUpdate()
	_, maxUnavail, err := ResolveFenceposts(ru.GetMaxSurge(), ru.GetMaxUnavailable(), want)
	if err != nil {
		return false, fmt.Errorf("deployment %s: %w", client.Key(d), err)
	}
	var oldCount, all int32 = 0, replicas(newRS)
	for _, rs := range old {
		oldCount += replicas(rs)
		all += replicas(rs)
	}
	if oldCount == 0 {
		return false, nil
	}
	minAvailable := want - maxUnavail
	newUnavailable := replicas(newRS) - newRS.GetStatus().GetAvailableReplicas()
	maxScaleDown := all - minAvailable - newUnavailable
	if maxScaleDown <= 0 {
		return false, nil
	}
	// First the old ReplicaSets' unavailable pods: they cost no availability.
	for _, rs := range old {
		if maxScaleDown <= 0 {
			break
		}
		unhealthy := replicas(rs) - rs.GetStatus().GetAvailableReplicas()
		if replicas(rs) == 0 || unhealthy <= 0 || rs.GetStatus().GetObservedGeneration() < rs.GetMetadata().GetGeneration() {
			continue
		}
		down := min(unhealthy, maxScaleDown)
		got, err := c.scale(ctx, d, rs, replicas(rs)-down)
		if err != nil {
			return changed, err
		}
		maxScaleDown -= down
		proto.Reset(rs)
		proto.Merge(rs, got)
		changed = true
	}
	// Then available pods, as long as minAvailable stays available. A
	// ReplicaSet's status may not yet show a scale-down (its controller
	// deletes the pods, then writes the status; a controller manager that
	// took over from one that crashed in between sees the old count), and
	// its controller keeps at most spec.replicas pods: so count at most
	// that many of its pods available.
	available := min(newRS.GetStatus().GetAvailableReplicas(), replicas(newRS))
	for _, rs := range old {
		available += min(rs.GetStatus().GetAvailableReplicas(), replicas(rs))
	}
	budget := available - minAvailable
	for _, rs := range old {
		if budget <= 0 {
			break
		}
		if replicas(rs) == 0 {
			continue
		}
		down := min(replicas(rs), budget)
		if _, err := c.scale(ctx, d, rs, replicas(rs)-down); err != nil {
			return changed, err
		}
		budget -= down
		changed = true
	}
	return changed, nil
}

// recreate scales every old ReplicaSet to 0, waits for their pods to be
// gone, then scales the new one up.
func (c *Controller) recreate(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) (bool, error) {
	changed := false
	for _, rs := range old {
		if replicas(rs) > 0 {
			if _, err := c.scale(ctx, d, rs, 0); err != nil {
				return changed, err
			}
			changed = true
		}
	}
	if changed {
		return true, nil
	}
	for _, rs := range old {
		if rs.GetStatus().GetReplicas() > 0 || c.podsOf(rs) > 0 {
			return false, nil // old pods still running
		}
	}
	if replicas(newRS) != d.GetSpec().GetReplicas() {
		if _, err := c.scale(ctx, d, newRS, d.GetSpec().GetReplicas()); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}

// podsOf counts the pods (terminating included) rs controls.
func (c *Controller) podsOf(rs *appsv1.ReplicaSet) int {
	if c.cfg.PodInformer == nil {
		return 0
	}
	n := 0
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(rs.GetMetadata().GetNamespace()) {
		if r := ctrl.ControllerRef(p); r != nil && r.GetUid() == rs.GetMetadata().GetUid() {
			n++
		}
	}
	return n
}
