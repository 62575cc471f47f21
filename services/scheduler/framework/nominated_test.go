// This file holds the test of nominated pods in filtering: the room
// preemption made for a pod is not given to another.

package framework_test

import (
	"context"
	"slices"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/noderesourcesfit"
)

func TestNominatedPodsCountOnTheirNode(t *testing.T) {
	fake := func(n string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests["example.com/fakecpu"] = n }
	}
	node := func() *framework.NodeInfo {
		return fixture.WithPods(fixture.Node("n1", "4", "8Gi", func(n *corev1.Node) { n.Status.Allocatable["example.com/fakecpu"] = "1000" }),
			fixture.Pod("p3", "", "", fake("450")))
	}
	preemptor := fixture.Pod("p4", "", "", fake("500"))
	tests := []struct {
		name        string
		nominated   map[string][]*framework.PodInfo
		wantReasons []string // nil: fits
	}{
		{name: "nothing nominated: the room is free"},
		{name: "the room is held for the nominated pod", nominated: map[string][]*framework.PodInfo{"n1": {preemptor}},
			wantReasons: []string{"Insufficient example.com/fakecpu"}},
		{name: "a pod nominated elsewhere takes nothing here", nominated: map[string][]*framework.PodInfo{"n2": {preemptor}}},
	}
	fit, _ := noderesourcesfit.New(nil, nil)
	f, err := framework.New(registry(fit), framework.Config{Plugins: []framework.PluginRef{{Name: noderesourcesfit.Name}, {Name: "Binder"}}}, handle{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := node()
			state := framework.NewCycleState()
			state.Nominated = tc.nominated
			s := f.RunFilter(context.Background(), state, fixture.Pod("p2", "", "", fake("300")), n)
			if !slices.Equal(s.Reasons(), tc.wantReasons) {
				t.Errorf("got %v %q, want reasons %q", s.Code(), s.Reasons(), tc.wantReasons)
			}
			if got := n.Requested.Scalar["example.com/fakecpu"]; got != 450 || len(n.Pods) != 1 {
				t.Errorf("the node after filtering: got %d requested and %d pods, want 450 and 1 (nominated pods go on a copy)", got, len(n.Pods))
			}
		})
	}
}
