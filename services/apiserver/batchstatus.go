// This file holds the checks of a Job's status writes, as Kubernetes'
// batch validation makes them (ValidateJobStatusUpdate with JobManagedBy):
// each rule checked only when the write changes what it is about.

package apiserver

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	k8sbatchv1 "k8s.io/api/batch/v1"
	k8smetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
)

// jobCondition reports whether conds has condition t with status True.
func jobCondition(conds []*batchv1.JobCondition, t string) bool {
	for _, c := range conds {
		if c.GetType() == t {
			return c.GetStatus() == "True"
		}
	}
	return false
}

// validateJobStatus is ValidateJobStatusUpdate with the options Kubernetes
// v1.33 turns on (JobManagedBy): a rule about a field is checked only when
// the write changes what the rule is about, so that a status broken before
// does not block unrelated writes.
func validateJobStatus(o, old *batchv1.Job) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("status")
	st, ost := o.GetStatus(), old.GetStatus()
	if st == nil {
		st = &batchv1.JobStatus{}
	}
	if ost == nil {
		ost = &batchv1.JobStatus{}
	}
	for _, c := range []struct {
		v    int32
		name string
	}{{st.GetActive(), "active"}, {st.GetSucceeded(), "succeeded"}, {st.GetFailed(), "failed"}} {
		if c.v < 0 {
			errs = append(errs, field.Invalid(p.Child(c.name), int64(c.v), "must be greater than or equal to 0"))
		}
	}
	errs = append(errs, nonNegative(st.Ready, p.Child("ready"))...)
	errs = append(errs, nonNegative(st.Terminating, p.Child("terminating"))...)
	conds, oconds := st.GetConditions(), ost.GetConditions()
	complete, failed := jobCondition(conds, "Complete"), jobCondition(conds, "Failed")
	finished := complete || failed
	wasFinished := jobCondition(oconds, "Complete") || jobCondition(oconds, "Failed")
	completeChanged := complete != jobCondition(oconds, "Complete")
	failedChanged := failed != jobCondition(oconds, "Failed")
	completionTimeChanged := !proto.Equal(st.GetCompletionTime(), ost.GetCompletionTime())
	startTimeChanged := !proto.Equal(st.GetStartTime(), ost.GetStartTime())
	cp := p.Child("conditions")
	if (completeChanged || failedChanged) && complete && failed {
		errs = append(errs, field.Invalid(cp, field.OmitValueType{}, "cannot set Complete=True and Failed=true conditions"))
	}
	if (completeChanged || jobCondition(conds, "FailureTarget") != jobCondition(oconds, "FailureTarget")) && complete && jobCondition(conds, "FailureTarget") {
		errs = append(errs, field.Invalid(cp, field.OmitValueType{}, "cannot set Complete=True and FailureTarget=true conditions"))
	}
	if (completeChanged || completionTimeChanged) && !complete && st.GetCompletionTime() != nil {
		errs = append(errs, field.Invalid(p.Child("completionTime"), kubeTime(st.GetCompletionTime()), "cannot set completionTime when there is no Complete=True condition"))
	}
	if (completeChanged || completionTimeChanged) && complete && st.GetCompletionTime() == nil {
		errs = append(errs, field.Required(p.Child("completionTime"), "completionTime is required for Complete jobs"))
	}
	if (startTimeChanged || completionTimeChanged) && st.GetCompletionTime() != nil && st.GetStartTime() != nil &&
		st.GetCompletionTime().AsTime().Before(st.GetStartTime().AsTime()) {
		errs = append(errs, field.Invalid(p.Child("completionTime"), kubeTime(st.GetCompletionTime()), "completionTime cannot be set before startTime"))
	}
	if failedChanged && failed && !jobCondition(conds, "FailureTarget") {
		errs = append(errs, field.Invalid(cp, field.OmitValueType{}, "cannot set Failed=True condition without the FailureTarget=true condition"))
	}
	if (completeChanged || jobCondition(conds, "SuccessCriteriaMet") != jobCondition(oconds, "SuccessCriteriaMet")) && complete && !jobCondition(conds, "SuccessCriteriaMet") {
		errs = append(errs, field.Invalid(cp, field.OmitValueType{}, "cannot set Complete=True condition without the SuccessCriteriaMet=true condition"))
	}
	if (finished != wasFinished || st.GetActive() != ost.GetActive()) && finished && st.GetActive() > 0 {
		errs = append(errs, field.Invalid(p.Child("active"), st.GetActive(), "active>0 is invalid for finished job"))
	}
	zeroSuspended := o.GetSpec().GetSuspend() && o.GetSpec().Completions != nil && o.GetSpec().GetCompletions() == 0
	if (finished != wasFinished || startTimeChanged) && !zeroSuspended && finished && st.GetStartTime() == nil {
		errs = append(errs, field.Required(p.Child("startTime"), "startTime is required for finished job"))
	}
	u := st.GetUncountedTerminatedPods()
	if (finished != wasFinished || !proto.Equal(u, ost.GetUncountedTerminatedPods())) && finished && len(u.GetSucceeded())+len(u.GetFailed()) > 0 {
		errs = append(errs, field.Invalid(p.Child("uncountedTerminatedPods"), kubeValue[k8sbatchv1.UncountedTerminatedPods](u), "uncountedTerminatedPods needs to be empty for finished job"))
	}
	if st.GetCompletedIndexes() != ost.GetCompletedIndexes() && st.GetCompletedIndexes() != "" && o.GetSpec().GetCompletionMode() != "Indexed" {
		errs = append(errs, field.Invalid(p.Child("completedIndexes"), st.GetCompletedIndexes(), "cannot set non-empty completedIndexes when non-indexed completion mode"))
	}
	if (finished != wasFinished || !proto.Equal(wrapInt32(st.Terminating), wrapInt32(ost.Terminating))) && finished && st.GetTerminating() > 0 {
		errs = append(errs, field.Invalid(p.Child("terminating"), st.GetTerminating(), "terminating>0 is invalid for finished job"))
	}
	if (!proto.Equal(wrapInt32(st.Ready), wrapInt32(ost.Ready)) || st.GetActive() != ost.GetActive()) && st.GetReady() > st.GetActive() {
		errs = append(errs, field.Invalid(p.Child("ready"), st.GetReady(), "cannot set more ready pods than active"))
	}
	for _, t := range []string{"Failed", "Complete", "FailureTarget"} {
		if jobCondition(oconds, t) && !jobCondition(conds, t) {
			errs = append(errs, field.Invalid(cp, field.OmitValueType{}, fmt.Sprintf("cannot disable the terminal %s=True condition", t)))
		}
	}
	if st.GetFailed() < ost.GetFailed() {
		errs = append(errs, field.Invalid(p.Child("failed"), st.GetFailed(), "cannot decrease the failed counter"))
	}
	scaledDown := o.GetSpec().GetCompletionMode() == "Indexed" && proto.Equal(wrapInt32(o.GetSpec().Completions), wrapInt32(o.GetSpec().Parallelism))
	if !scaledDown && st.GetSucceeded() < ost.GetSucceeded() {
		errs = append(errs, field.Invalid(p.Child("succeeded"), st.GetSucceeded(), "cannot decrease the succeeded counter"))
	}
	if st.GetCompletionTime() != nil && ost.GetCompletionTime() != nil && completionTimeChanged {
		errs = append(errs, field.Invalid(p.Child("completionTime"), kubeTime(st.GetCompletionTime()), "completionTime cannot be mutated"))
	}
	resuming := jobCondition(oconds, "Suspended") && jobConditionFalse(conds, "Suspended")
	if startTimeChanged && !resuming && ost.GetStartTime() != nil && !o.GetSpec().GetSuspend() {
		errs = append(errs, field.Required(p.Child("startTime"), "startTime cannot be removed for unsuspended job"))
	}
	if jobCondition(oconds, "SuccessCriteriaMet") && !jobCondition(conds, "SuccessCriteriaMet") {
		errs = append(errs, field.Invalid(cp, field.OmitValueType{}, "cannot disable the SuccessCriteriaMet=True condition"))
	}
	return errs
}

// jobConditionFalse reports whether conds has condition t with status False.
func jobConditionFalse(conds []*batchv1.JobCondition, t string) bool {
	for _, c := range conds {
		if c.GetType() == t {
			return c.GetStatus() == "False"
		}
	}
	return false
}

// kubeTime is a timestamp as Kubernetes prints it in an Invalid error.
func kubeTime(t interface{ AsTime() time.Time }) k8smetav1.Time {
	return k8smetav1.NewTime(t.AsTime())
}
