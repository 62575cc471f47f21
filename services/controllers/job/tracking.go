// This file holds how a Job counts its finished pods exactly once (the
// uncounted list, the tracking finalizer, then the counters), its pod
// back-off, and its conditions and terminal state.

package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// backoffRecord updates and returns key's back-off record with the pods
// newly seen finished: a success resets it, failures add to it.
func (c *Controller) backoffRecord(key string, succeeded, failed []*corev1.Pod) backoffRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.backoff[key]
	if len(succeeded) > 0 {
		r = backoffRecord{}
	}
	for _, p := range failed {
		r.failures++
		if t := finishedAt(p); t.After(r.lastFailure) {
			r.lastFailure = t
		}
	}
	c.backoff[key] = r
	return r
}

// remaining is how long r still holds back the next pod at now.
func (c *Controller) remaining(r backoffRecord, now time.Time) time.Duration {
	if r.failures == 0 {
		return 0
	}
	d := c.cfg.PodFailureBackoff
	for i := 1; i < r.failures; i++ {
		d *= 2
		if d >= c.cfg.MaxBackoff {
			d = c.cfg.MaxBackoff
			break
		}
	}
	if left := r.lastFailure.Add(d).Sub(now); left > 0 {
		return left
	}
	return 0
}

// trackAndFinish counts finished pods exactly once (uncounted first, then
// the finalizer removed, then the counter), sets the Job's interim and
// terminal conditions, and writes the status when it changed.
func (c *Controller) trackAndFinish(ctx context.Context, key string, s *jobSync, flush bool, now time.Time) error {
	job, st := s.job, s.job.Status
	u := st.UncountedTerminatedPods
	indexed := job.GetSpec().GetCompletionMode() == "Indexed"
	withFinalizer := map[string]bool{}
	for _, p := range s.pods {
		if ctrl.HasFinalizer(p.GetMetadata(), TrackingFinalizer) {
			withFinalizer[p.GetMetadata().GetUid()] = true
		}
	}
	if countUncounted(st, withFinalizer) {
		flush = true
	}
	failing := s.finished != nil && s.finished.GetType() == "FailureTarget"
	var release []*corev1.Pod
	for _, p := range s.pods {
		if !ctrl.HasFinalizer(p.GetMetadata(), TrackingFinalizer) {
			continue
		}
		failed := podFailed(job, p)
		if !(job.GetMetadata().GetDeletionTimestamp() != nil || s.finished != nil || p.GetStatus().GetPhase() == "Succeeded" || failed) {
			continue
		}
		release = append(release, p)
		uid := p.GetMetadata().GetUid()
		switch {
		case p.GetStatus().GetPhase() == "Succeeded" && !s.uncountedFailed[uid]:
			if !indexed && !s.uncountedSucceeded[uid] {
				u.Succeeded = append(u.Succeeded, uid)
				s.uncountedSucceeded[uid] = true
				flush = true
			}
		case failed || failing:
			// Once the Job fails, every pod not succeeded counts as failed.
			_, counts, _ := matchPodFailurePolicy(job.GetSpec().GetPodFailurePolicy(), p)
			if ix, ok := podIndex(p); counts && !s.uncountedFailed[uid] && (!indexed || ok && ix < int(job.GetSpec().GetCompletions())) {
				u.Failed = append(u.Failed, uid)
				s.uncountedFailed[uid] = true
				flush = true
			}
		}
		if len(u.Succeeded)+len(u.Failed) >= maxUncountedPods {
			break
		}
	}
	if indexed {
		ci := formatIndexes(s.succeededIndexes)
		if ci != st.GetCompletedIndexes() {
			flush = true
		}
		st.CompletedIndexes = ci
		st.Succeeded = int32(len(s.succeededIndexes))
		if s.failedIndexes != nil {
			fi := formatIndexes(s.failedIndexes)
			if st.FailedIndexes == nil || st.GetFailedIndexes() != fi {
				st.FailedIndexes = proto.String(fi)
				flush = true
			}
		}
	}
	// The interim condition goes in before the finalizers are removed.
	var terminal *batchv1.JobCondition
	if s.finished != nil {
		switch s.finished.GetType() {
		case "FailureTarget":
			if condition(st.Conditions, "FailureTarget") == nil {
				st.Conditions = append(st.Conditions, s.finished)
				flush = true
			}
			terminal = newCondition("Failed", s.finished.GetReason(), s.finished.GetMessage(), now)
		case "SuccessCriteriaMet":
			if condition(st.Conditions, "SuccessCriteriaMet") == nil {
				st.Conditions = append(st.Conditions, s.finished)
				flush = true
			}
			terminal = newCondition("Complete", s.finished.GetReason(), s.finished.GetMessage(), now)
		}
	}
	if flush {
		got, err := c.cfg.Jobs.UpdateStatus(ctx, job)
		if err != nil {
			return fmt.Errorf("adding uncounted pods to status: %w", err)
		}
		job.Metadata.ResourceVersion = got.GetMetadata().GetResourceVersion()
		flush = false
	}
	var rmErrs []error
	ownedByJob := func(p *corev1.Pod) bool {
		r := ctrl.ControllerRef(p)
		return r != nil && r.GetUid() == job.GetMetadata().GetUid()
	}
	for _, p := range release {
		if err := c.removeFinalizer(ctx, p, ownedByJob); err != nil {
			rmErrs = append(rmErrs, err)
			continue
		}
		delete(withFinalizer, p.GetMetadata().GetUid())
	}
	if countUncounted(st, withFinalizer) {
		flush = true
	}
	finished := false
	if terminal != nil && len(u.Succeeded)+len(u.Failed) == 0 && st.GetTerminating() == 0 && len(rmErrs) == 0 {
		setCondition(st, terminal.GetType(), "True", terminal.GetReason(), terminal.GetMessage(), now)
		if terminal.GetType() == "Complete" {
			st.CompletionTime = terminal.GetLastTransitionTime()
		}
		finished, flush = true, true
	}
	if flush {
		if _, err := c.cfg.Jobs.UpdateStatus(ctx, job); err != nil {
			return errors.Join(append(rmErrs, fmt.Errorf("removing uncounted pods from status: %w", err))...)
		}
	}
	if finished {
		if terminal.GetType() == "Complete" {
			ctrl.Eventf(c.cfg.Recorder, job, client.EventNormal, "Completed", "Job completed")
		} else {
			ctrl.Eventf(c.cfg.Recorder, job, client.EventWarning, terminal.GetReason(), "%s", terminal.GetMessage())
		}
		c.forget(key)
	}
	return errors.Join(rmErrs...)
}

// countUncounted moves the uncounted pods whose finalizer is gone into the
// counters, and reports whether it moved any.
func countUncounted(st *batchv1.JobStatus, withFinalizer map[string]bool) bool {
	u := st.UncountedTerminatedPods
	keep := func(uids []string) []string {
		var out []string
		for _, uid := range uids {
			if withFinalizer[uid] {
				out = append(out, uid)
			}
		}
		return out
	}
	s, f := keep(u.Succeeded), keep(u.Failed)
	changed := len(s) != len(u.Succeeded) || len(f) != len(u.Failed)
	st.Succeeded += int32(len(u.Succeeded) - len(s))
	st.Failed += int32(len(u.Failed) - len(f))
	u.Succeeded, u.Failed = s, f
	return changed
}

// jobFinished reports whether the Job has its terminal condition.
func jobFinished(j *batchv1.Job) bool {
	for _, c := range j.GetStatus().GetConditions() {
		if (c.GetType() == "Complete" || c.GetType() == "Failed") && c.GetStatus() == "True" {
			return true
		}
	}
	return false
}

// podTerminal reports whether p finished.
func podTerminal(p *corev1.Pod) bool {
	ph := p.GetStatus().GetPhase()
	return ph == "Succeeded" || ph == "Failed"
}

// podFailed is Kubernetes' isPodFailed: a Failed pod or, unless the Job
// replaces only failed pods, one deleted before it succeeded (an orphan
// that never reaches Failed).
func podFailed(job *batchv1.Job, p *corev1.Pod) bool {
	if p.GetStatus().GetPhase() == "Failed" {
		return true
	}
	if onlyReplaceFailed(job) {
		return false
	}
	return p.GetMetadata().GetDeletionTimestamp() != nil && p.GetStatus().GetPhase() != "Succeeded"
}

// onlyReplaceFailed reports whether a pod being deleted is replaced only
// once it has failed (podReplacementPolicy Failed, the default with a pod
// failure policy).
func onlyReplaceFailed(job *batchv1.Job) bool {
	return job.GetSpec().GetPodReplacementPolicy() == "Failed" || job.GetSpec().GetPodFailurePolicy() != nil
}

// finishedAt is when p finished: its last container's finish, else its
// deletion, else its creation.
func finishedAt(p *corev1.Pod) time.Time {
	var t time.Time
	for _, cs := range p.GetStatus().GetContainerStatuses() {
		if f := cs.GetState().GetTerminated().GetFinishedAt(); f != nil && f.AsTime().After(t) {
			t = f.AsTime()
		}
	}
	if t.IsZero() && p.GetMetadata().GetDeletionTimestamp() != nil {
		t = p.GetMetadata().GetDeletionTimestamp().AsTime()
	}
	if t.IsZero() {
		t = p.GetMetadata().GetCreationTimestamp().AsTime()
	}
	return t
}

// pastBackoffLimitOnFailure is Kubernetes' check for restartPolicy
// OnFailure, whose failures are container restarts: the restarts of the
// active pods reach backoffLimit.
func pastBackoffLimitOnFailure(job *batchv1.Job, pods []*corev1.Pod) bool {
	if job.GetSpec().GetTemplate().GetSpec().GetRestartPolicy() != "OnFailure" {
		return false
	}
	var restarts int32
	for _, p := range pods {
		if ph := p.GetStatus().GetPhase(); ph != "Running" && ph != "Pending" {
			continue
		}
		for _, cs := range p.GetStatus().GetInitContainerStatuses() {
			restarts += cs.GetRestartCount()
		}
		for _, cs := range p.GetStatus().GetContainerStatuses() {
			restarts += cs.GetRestartCount()
		}
	}
	limit := job.GetSpec().GetBackoffLimit()
	if limit == 0 {
		return restarts > 0
	}
	return restarts >= limit
}

// pastDeadline reports whether the Job has run activeDeadlineSeconds.
func pastDeadline(job *batchv1.Job, now time.Time) bool {
	d := job.GetSpec().ActiveDeadlineSeconds
	start := job.GetStatus().GetStartTime()
	if d == nil || start == nil || job.GetSpec().GetSuspend() {
		return false
	}
	return !now.Before(start.AsTime().Add(time.Duration(*d) * time.Second))
}

func set(uids []string) map[string]bool {
	m := make(map[string]bool, len(uids))
	for _, u := range uids {
		m[u] = true
	}
	return m
}

// condition is conds' condition of type t, or nil.
func condition(conds []*batchv1.JobCondition, t string) *batchv1.JobCondition {
	for _, c := range conds {
		if c.GetType() == t {
			return c
		}
	}
	return nil
}

// newCondition is a condition as the controller sets it: lastProbeTime and
// lastTransitionTime now.
func newCondition(t, reason, message string, now time.Time) *batchv1.JobCondition {
	ts := timestamppb.New(now.Truncate(time.Second))
	return &batchv1.JobCondition{Type: t, Status: "True", Reason: reason, Message: message, LastProbeTime: ts, LastTransitionTime: ts}
}

// setCondition sets condition t of st (Kubernetes' ensureJobConditionStatus)
// and reports whether it changed. A False condition is not added when
// absent.
func setCondition(st *batchv1.JobStatus, t, status, reason, message string, now time.Time) bool {
	ts := timestamppb.New(now.Truncate(time.Second))
	if c := condition(st.Conditions, t); c != nil {
		if c.GetStatus() == status && c.GetReason() == reason && c.GetMessage() == message {
			return false
		}
		if c.GetStatus() != status {
			c.LastTransitionTime = ts
		}
		c.Status, c.Reason, c.Message, c.LastProbeTime = status, reason, message, ts
		return true
	}
	if status == "False" {
		return false
	}
	st.Conditions = append(st.Conditions, &batchv1.JobCondition{Type: t, Status: status, Reason: reason, Message: message, LastProbeTime: ts, LastTransitionTime: ts})
	return true
}
