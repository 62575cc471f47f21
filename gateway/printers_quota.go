// This file holds the Table rows of ResourceQuotas and PriorityClasses, as
// kube-apiserver prints them (LimitRanges have no printer of their own:
// kube-apiserver's default row).

package gateway

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
)

// printResourceQuota: the name, "used/hard" of each resource the status
// holds (limits.* in the LIMIT column, the rest in REQUEST), and the age.
func printResourceQuota(q *corev1.ResourceQuota, now time.Time) printedRow {
	names := make([]string, 0, len(q.Status.Hard))
	for n := range q.Status.Hard {
		names = append(names, string(n))
	}
	sort.Strings(names)
	var req, lim []string
	for _, n := range names {
		used, hard := q.Status.Used[corev1.ResourceName(n)], q.Status.Hard[corev1.ResourceName(n)]
		cell := fmt.Sprintf("%s: %s/%s", n, used.String(), hard.String())
		if pieces := strings.Split(n, "."); len(pieces) > 1 && pieces[0] == "limits" {
			lim = append(lim, cell)
		} else {
			req = append(req, cell)
		}
	}
	return row(q.Name, strings.Join(req, ", "), strings.Join(lim, ", "), sinceTime(q.CreationTimestamp.Time, now))
}

// printPriorityClass: name, value, global default, age and (wide) the
// preemption policy.
func printPriorityClass(pc *schedulingv1.PriorityClass, now time.Time) printedRow {
	policy := ""
	if pc.PreemptionPolicy != nil {
		policy = string(*pc.PreemptionPolicy)
	}
	return row(pc.Name, int64(pc.Value), pc.GlobalDefault, sinceTime(pc.CreationTimestamp.Time, now), policy)
}
