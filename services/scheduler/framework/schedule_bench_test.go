// This file holds the benchmark of one scheduling attempt's algorithm over
// a snapshot: the resource filter and scorers over 1,000 nodes.

package framework_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/balancedallocation"
	"github.com/kplane/kplane/services/scheduler/plugins/leastallocated"
	"github.com/kplane/kplane/services/scheduler/plugins/noderesourcesfit"
)

// BenchmarkSchedule: the bench's pod (100m, 128Mi) over 1,000 nodes with
// ten such pods each, every node feasible.
func BenchmarkSchedule(b *testing.B) {
	fit, _ := noderesourcesfit.New(nil, nil)
	least, _ := leastallocated.New(nil, nil)
	balanced, _ := balancedallocation.New(nil, nil)
	f, err := framework.New(registry(fit, least, balanced), framework.Config{Plugins: []framework.PluginRef{
		{Name: noderesourcesfit.Name}, {Name: leastallocated.Name}, {Name: balancedallocation.Name}, {Name: "Binder"}}}, handle{})
	if err != nil {
		b.Fatal(err)
	}
	nodes := make([]*framework.NodeInfo, 1000)
	for i := range nodes {
		nodes[i] = fixture.Node(fmt.Sprintf("n%04d", i), "32", "128Gi", nil)
		for j := range 10 {
			nodes[i].AddPod(fixture.Pod(fmt.Sprintf("p%04d-%d", i, j), "100m", "128Mi", nil))
		}
	}
	pod := fixture.Pod("p", "100m", "128Mi", nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Schedule(context.Background(), framework.NewCycleState(), pod, nodes); err != nil {
			b.Fatal(err)
		}
	}
}
