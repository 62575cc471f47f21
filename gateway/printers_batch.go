// This file holds the Table rows of batch/v1 Jobs and CronJobs, with the
// cells kube-apiserver's printers compute (status from the conditions,
// completions, duration, the CronJob's schedule and last run).
package gateway

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// printJob is a Job's row: NAME STATUS COMPLETIONS DURATION AGE, and wide
// CONTAINERS IMAGES SELECTOR.
func printJob(obj *batchv1.Job, now time.Time) printedRow {
	var completions string
	switch {
	case obj.Spec.Completions != nil:
		completions = fmt.Sprintf("%d/%d", obj.Status.Succeeded, *obj.Spec.Completions)
	case obj.Spec.Parallelism != nil && *obj.Spec.Parallelism > 1:
		completions = fmt.Sprintf("%d/1 of %d", obj.Status.Succeeded, *obj.Spec.Parallelism)
	default:
		completions = fmt.Sprintf("%d/1", obj.Status.Succeeded)
	}
	var took string
	switch {
	case obj.Status.StartTime == nil:
	case obj.Status.CompletionTime == nil:
		took = duration.HumanDuration(now.Sub(obj.Status.StartTime.Time))
	default:
		took = duration.HumanDuration(obj.Status.CompletionTime.Sub(obj.Status.StartTime.Time))
	}
	// The order kube-apiserver checks the conditions in: a finished Job
	// shows how it finished even while it is being deleted.
	status := "Running"
	switch {
	case jobConditionTrue(obj.Status.Conditions, batchv1.JobComplete):
		status = "Complete"
	case jobConditionTrue(obj.Status.Conditions, batchv1.JobFailed):
		status = "Failed"
	case obj.DeletionTimestamp != nil:
		status = "Terminating"
	case jobConditionTrue(obj.Status.Conditions, batchv1.JobSuspended):
		status = "Suspended"
	case jobConditionTrue(obj.Status.Conditions, batchv1.JobFailureTarget):
		status = "FailureTarget"
	}
	names, images := containerCells(obj.Spec.Template.Spec.Containers)
	return row(obj.Name, status, completions, took, sinceTime(obj.CreationTimestamp.Time, now),
		names, images, metav1.FormatLabelSelector(obj.Spec.Selector))
}

// printCronJob is a CronJob's row: NAME SCHEDULE TIMEZONE SUSPEND ACTIVE
// LAST SCHEDULE AGE, and wide CONTAINERS IMAGES SELECTOR.
func printCronJob(obj *batchv1.CronJob, now time.Time) printedRow {
	last := "<none>"
	if t := obj.Status.LastScheduleTime; t != nil {
		last = sinceTime(t.Time, now)
	}
	tz := "<none>"
	if obj.Spec.TimeZone != nil {
		tz = *obj.Spec.TimeZone
	}
	suspend := "<unset>"
	if obj.Spec.Suspend != nil {
		suspend = "False"
		if *obj.Spec.Suspend {
			suspend = "True"
		}
	}
	names, images := containerCells(obj.Spec.JobTemplate.Spec.Template.Spec.Containers)
	return row(obj.Name, obj.Spec.Schedule, tz, suspend, int64(len(obj.Status.Active)), last,
		sinceTime(obj.CreationTimestamp.Time, now), names, images, metav1.FormatLabelSelector(obj.Spec.JobTemplate.Spec.Selector))
}

// jobConditionTrue reports whether the first condition of type t is True,
// as kube-apiserver's printer looks it up.
func jobConditionTrue(conds []batchv1.JobCondition, t batchv1.JobConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
