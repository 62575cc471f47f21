// This file holds the test of the nominator: which nominated pods a pod's
// filters count.

package scheduler

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
)

func TestNominatorForPod(t *testing.T) {
	prio := func(n int32) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.Priority = proto.Int32(n) } }
	n := newNominator()
	n.set(fixture.Pod("high", "", "", prio(100)), "n1")
	n.set(fixture.Pod("same", "", "", prio(10)), "n1")
	n.set(fixture.Pod("low", "", "", prio(1)), "n2")
	n.set(fixture.Pod("gone", "", "", prio(100)), "n2")
	n.remove("default/gone")
	n.set(fixture.Pod("cleared", "", "", prio(100)), "n2")
	n.set(fixture.Pod("cleared", "", "", prio(100)), "")

	show := func(m map[string][]*framework.PodInfo) []string {
		var out []string
		for node, pods := range m {
			for _, p := range pods {
				out = append(out, node+": "+p.Pod.GetMetadata().GetName())
			}
		}
		slices.Sort(out)
		return out
	}
	tests := []struct {
		name string
		pod  *framework.PodInfo
		want []string
	}{
		{name: "equal and higher priority count, lower do not", pod: fixture.Pod("p", "", "", prio(10)), want: []string{"n1: high", "n1: same"}},
		{name: "a pod's own nomination does not count against it", pod: fixture.Pod("high", "", "", prio(100)), want: nil},
		{name: "everything counts for the lowest priority", pod: fixture.Pod("p", "", "", prio(0)), want: []string{"n1: high", "n1: same", "n2: low"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := show(n.forPod(tc.pod)); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
