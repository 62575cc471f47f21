// This file holds the Table rows of flowcontrol.apiserver.k8s.io FlowSchemas
// and PriorityLevelConfigurations, with the cells kube-apiserver's printers
// compute, and the order it lists FlowSchemas in.
package gateway

import (
	"sort"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// printFlowControl prints typed's row when it is a FlowSchema or a
// PriorityLevelConfiguration; ok is false for any other kind.
func printFlowControl(typed runtime.Object, now time.Time) (_ printedRow, ok bool) {
	since := func(t metav1.Time) string { return sinceTime(t.Time, now) }
	switch obj := typed.(type) {
	case *flowcontrolv1.FlowSchema:
		distinguisher := "<none>"
		if d := obj.Spec.DistinguisherMethod; d != nil {
			distinguisher = string(d.Type)
		}
		missing := "?"
		for _, c := range obj.Status.Conditions {
			if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
				missing = string(c.Status)
				break
			}
		}
		return row(obj.Name, obj.Spec.PriorityLevelConfiguration.Name, int64(obj.Spec.MatchingPrecedence), distinguisher,
			since(obj.CreationTimestamp), missing), true
	case *flowcontrolv1.PriorityLevelConfiguration:
		var shares, queues, handSize, queueLength any = "<none>", "<none>", "<none>", "<none>"
		if l := obj.Spec.Limited; l != nil {
			if l.NominalConcurrencyShares != nil {
				shares = int64(*l.NominalConcurrencyShares)
			}
			if q := l.LimitResponse.Queuing; q != nil {
				queues, handSize, queueLength = int64(q.Queues), int64(q.HandSize), int64(q.QueueLengthLimit)
			}
		}
		return row(obj.Name, string(obj.Spec.Type), shares, queues, handSize, queueLength, since(obj.CreationTimestamp)), true
	}
	return printedRow{}, false
}

// sortFlowSchemas orders a FlowSchema list's objects as kube-apiserver's
// Table does: by matchingPrecedence, then by name.
func sortFlowSchemas(objs []map[string]any) {
	prec := func(o map[string]any) float64 {
		p, _ := get(o, "spec", "matchingPrecedence").(float64)
		return p
	}
	sort.SliceStable(objs, func(i, j int) bool {
		pi, pj := prec(objs[i]), prec(objs[j])
		if pi != pj {
			return pi < pj
		}
		return str(objs[i], "metadata", "name") < str(objs[j], "metadata", "name")
	})
}
