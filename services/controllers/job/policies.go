// This file holds the Job's success policy and pod failure policy, as
// Kubernetes v1.33 applies them. The success policy ends an Indexed Job
// once some indexes succeeded. The pod failure policy's first rule matching
// a failed pod (a container's non-zero exit code, or a pod condition)
// decides whether the pod fails the Job at once (FailJob), is not counted
// toward backoffLimit (Ignore) or is counted (Count). FailIndex needs
// backoffLimitPerIndex, which kplane does not act on: such a rule counts
// the failure.
package job

import (
	"fmt"
	"slices"

	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// matchPodFailurePolicy returns, for a failed pod, the message failing
// the Job (FailJob), whether the failure counts toward backoffLimit, and
// the action of the rule that matched ("" if none).
func matchPodFailurePolicy(pfp *batchv1.PodFailurePolicy, p *corev1.Pod) (string, bool, string) {
	if pfp == nil {
		return "", true, ""
	}
	m := p.GetMetadata()
	for i, r := range pfp.GetRules() {
		var msg string
		switch {
		case r.GetOnExitCodes() != nil:
			cs := matchExitCodes(p.GetStatus(), r.GetOnExitCodes())
			if cs == nil {
				continue
			}
			msg = fmt.Sprintf("Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d",
				cs.GetName(), m.GetNamespace(), m.GetName(), cs.GetState().GetTerminated().GetExitCode(), r.GetAction(), i)
		case len(r.GetOnPodConditions()) > 0:
			c := matchPodConditions(p.GetStatus(), r.GetOnPodConditions())
			if c == nil {
				continue
			}
			msg = fmt.Sprintf("Pod %s/%s has condition %v matching %v rule at index %d", m.GetNamespace(), m.GetName(), c.GetType(), r.GetAction(), i)
		default:
			continue
		}
		switch r.GetAction() {
		case "Ignore":
			return "", false, "Ignore"
		case "Count", "FailIndex":
			return "", true, r.GetAction()
		case "FailJob":
			return msg, true, "FailJob"
		}
	}
	return "", true, ""
}

// matchExitCodes is the first terminated container (then init container)
// with a non-zero exit code the requirement matches.
func matchExitCodes(st *corev1.PodStatus, req *batchv1.PodFailurePolicyOnExitCodesRequirement) *corev1.ContainerStatus {
	for _, list := range [][]*corev1.ContainerStatus{st.GetContainerStatuses(), st.GetInitContainerStatuses()} {
		for _, cs := range list {
			t := cs.GetState().GetTerminated()
			if t == nil || t.GetExitCode() == 0 || (req.ContainerName != nil && req.GetContainerName() != cs.GetName()) {
				continue
			}
			in := slices.Contains(req.GetValues(), t.GetExitCode())
			if (req.GetOperator() == "In" && in) || (req.GetOperator() == "NotIn" && !in) {
				return cs
			}
		}
	}
	return nil
}

// matchPodConditions is the first pod condition a pattern matches.
func matchPodConditions(st *corev1.PodStatus, patterns []*batchv1.PodFailurePolicyOnPodConditionsPattern) *corev1.PodCondition {
	for _, c := range st.GetConditions() {
		for _, pt := range patterns {
			if c.GetType() == pt.GetType() && c.GetStatus() == pt.GetStatus() {
				return c
			}
		}
	}
	return nil
}

// failJobMessage is the message of the first failed pod a FailJob rule
// matches, or "".
func failJobMessage(job *batchv1.Job, pods []*corev1.Pod) string {
	if job.GetSpec().GetPodFailurePolicy() == nil {
		return ""
	}
	for _, p := range pods {
		if podFailed(job, p) {
			if msg, _, _ := matchPodFailurePolicy(job.GetSpec().GetPodFailurePolicy(), p); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// nonIgnored counts the failed pods the pod failure policy does not
// ignore.
func nonIgnored(job *batchv1.Job, failed []*corev1.Pod) int32 {
	var n int32
	for _, p := range failed {
		if _, counts, _ := matchPodFailurePolicy(job.GetSpec().GetPodFailurePolicy(), p); counts {
			n++
		}
	}
	return n
}

// matchSuccessPolicy reports whether an Indexed Job's succeeded indexes
// meet a rule of its success policy, with Kubernetes' message naming the
// first rule met: all of its succeededIndexes, or succeededCount of them
// (of all indexes without succeededIndexes).
func matchSuccessPolicy(sp *batchv1.SuccessPolicy, completions int, succeeded map[int]bool) (string, bool) {
	if sp == nil || len(succeeded) == 0 {
		return "", false
	}
	for i, r := range sp.GetRules() {
		msg := fmt.Sprintf("Matched rules at index %d", i)
		if r.SucceededIndexes != nil {
			required := parseIndexes(r.GetSucceededIndexes(), completions)
			if len(required) == 0 {
				continue
			}
			n := 0
			for ix := range required {
				if succeeded[ix] {
					n++
				}
			}
			if (r.SucceededCount != nil && n >= int(r.GetSucceededCount())) || (r.SucceededCount == nil && n >= len(required)) {
				return msg, true
			}
		} else if r.SucceededCount != nil && len(succeeded) >= int(r.GetSucceededCount()) {
			return msg, true
		}
	}
	return "", false
}
