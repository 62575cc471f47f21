// This file holds a Deployment's status: its replica counts and the
// Progressing and Available conditions kubectl rollout status reads.

package deployment

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

func condition(conds []*appsv1.DeploymentCondition, t string) *appsv1.DeploymentCondition {
	for _, c := range conds {
		if c.GetType() == t {
			return c
		}
	}
	return nil
}

// setCondition puts cond into st, keeping lastTransitionTime when the
// status does not change (and lastUpdateTime when nothing changes).
func setCondition(st *appsv1.DeploymentStatus, cond *appsv1.DeploymentCondition) {
	prev := condition(st.Conditions, cond.Type)
	if prev != nil && prev.Status == cond.Status {
		cond.LastTransitionTime = prev.LastTransitionTime
		if prev.Reason == cond.Reason && prev.Message == cond.Message && cond.LastUpdateTime == nil {
			cond.LastUpdateTime = prev.LastUpdateTime
		}
	}
	if cond.LastUpdateTime == nil {
		cond.LastUpdateTime = cond.LastTransitionTime
	}
	out := st.Conditions[:0]
	for _, c := range st.Conditions {
		if c.Type != cond.Type {
			out = append(out, c)
		}
	}
	st.Conditions = append(out, cond)
}

// syncStatus computes and writes d's status; progressed says this sync
// scaled something (progress for the Progressing condition). While the
// rollout has a progress deadline to meet, it asks to run again just after
// it.
func (c *Controller) syncStatus(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, all []*appsv1.ReplicaSet, progressed bool) (client.Result, error) {
	// Re-read what this sync changed, so status reflects it.
	fresh := make([]*appsv1.ReplicaSet, 0, len(all))
	for _, rs := range all {
		if got, ok := c.cfg.RSInformer.Store().Get(client.Key(rs)); ok && replicas(got) == replicas(rs) {
			fresh = append(fresh, got)
		} else {
			fresh = append(fresh, rs)
		}
	}
	want := d.GetSpec().GetReplicas()
	now := timestamppb.New(c.now().Truncate(time.Second))
	st := &appsv1.DeploymentStatus{}
	if d.GetStatus() != nil {
		st = proto.Clone(d.GetStatus()).(*appsv1.DeploymentStatus)
	}
	prev := proto.Clone(st).(*appsv1.DeploymentStatus)
	st.ObservedGeneration = d.GetMetadata().GetGeneration()
	st.Replicas, st.ReadyReplicas, st.AvailableReplicas, st.UpdatedReplicas = 0, 0, 0, 0
	for _, rs := range fresh {
		st.Replicas += rs.GetStatus().GetReplicas()
		st.ReadyReplicas += rs.GetStatus().GetReadyReplicas()
		st.AvailableReplicas += rs.GetStatus().GetAvailableReplicas()
	}
	// The new ReplicaSet's count comes from the same copies as the totals,
	// so that updatedReplicas never exceeds replicas (the API service
	// refuses such a status, as Kubernetes does).
	if newRS != nil {
		for _, rs := range fresh {
			if client.Key(rs) == client.Key(newRS) {
				st.UpdatedReplicas = rs.GetStatus().GetReplicas()
			}
		}
	}
	st.UnavailableReplicas = max(want-st.AvailableReplicas, 0)
	_, maxUnavail, _ := ResolveFenceposts(d.GetSpec().GetStrategy().GetRollingUpdate().GetMaxSurge(), d.GetSpec().GetStrategy().GetRollingUpdate().GetMaxUnavailable(), want)
	if d.GetSpec().GetStrategy().GetType() == "Recreate" {
		maxUnavail = want
	}
	if st.AvailableReplicas >= want-maxUnavail {
		setCondition(st, &appsv1.DeploymentCondition{Type: "Available", Status: "True", Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability.", LastTransitionTime: now})
	} else {
		setCondition(st, &appsv1.DeploymentCondition{Type: "Available", Status: "False", Reason: "MinimumReplicasUnavailable", Message: "Deployment does not have minimum availability.", LastTransitionTime: now})
	}
	var res client.Result
	name := ""
	if newRS != nil {
		name = newRS.GetMetadata().GetName()
	}
	complete := newRS != nil && st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want
	deadline := d.GetSpec().ProgressDeadlineSeconds
	switch {
	case d.GetSpec().GetPaused():
		setCondition(st, &appsv1.DeploymentCondition{Type: "Progressing", Status: "Unknown", Reason: "DeploymentPaused", Message: "Deployment is paused", LastTransitionTime: now})
	case complete:
		setCondition(st, &appsv1.DeploymentCondition{Type: "Progressing", Status: "True", Reason: "NewReplicaSetAvailable", Message: fmt.Sprintf("ReplicaSet %q has successfully progressed.", name), LastTransitionTime: now})
	default:
		pc := condition(st.Conditions, "Progressing")
		moved := progressed || prev.GetReplicas() != st.Replicas || prev.GetUpdatedReplicas() != st.UpdatedReplicas ||
			prev.GetReadyReplicas() != st.ReadyReplicas || prev.GetAvailableReplicas() != st.AvailableReplicas ||
			pc == nil || pc.GetReason() == "NewReplicaSetAvailable"
		switch {
		case moved:
			setCondition(st, &appsv1.DeploymentCondition{Type: "Progressing", Status: "True", Reason: "ReplicaSetUpdated", Message: fmt.Sprintf("ReplicaSet %q is progressing.", name), LastTransitionTime: now, LastUpdateTime: now})
		case deadline != nil && pc.GetReason() != "ProgressDeadlineExceeded":
			last := pc.GetLastUpdateTime().AsTime()
			limit := time.Duration(*deadline) * time.Second
			if left := last.Add(limit).Sub(c.now()); left <= 0 {
				setCondition(st, &appsv1.DeploymentCondition{Type: "Progressing", Status: "False", Reason: "ProgressDeadlineExceeded", Message: fmt.Sprintf("ReplicaSet %q has timed out progressing.", name), LastTransitionTime: now, LastUpdateTime: now})
				ctrl.Eventf(c.cfg.Recorder, d, client.EventWarning, "ProgressDeadlineExceeded", "Deployment %q has timed out progressing.", d.GetMetadata().GetName())
			} else {
				res.RequeueAfter = left + time.Second
			}
		}
	}
	if proto.Equal(st, d.GetStatus()) {
		return res, nil
	}
	u := proto.Clone(d).(*appsv1.Deployment)
	u.Status = st
	if _, err := c.cfg.Deployments.UpdateStatus(ctx, u); err != nil {
		if apierrors.IsNotFound(err) {
			return res, nil
		}
		return res, fmt.Errorf("deployment %s: update status: %w", client.Key(d), err)
	}
	return res, nil
}
