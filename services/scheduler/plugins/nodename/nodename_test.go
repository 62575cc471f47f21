// This file holds the test of the NodeName filter.

package nodename_test

import (
	"context"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/nodename"
)

func TestFilter(t *testing.T) {
	tests := []struct {
		name     string
		nodeName string
		node     string
		want     framework.Code
	}{
		{name: "no nodeName", nodeName: "", node: "a", want: framework.Success},
		{name: "matching", nodeName: "a", node: "a", want: framework.Success},
		{name: "other node", nodeName: "b", node: "a", want: framework.UnschedulableAndUnresolvable},
	}
	p, _ := nodename.New(nil, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := fixture.Pod("p", "", "", func(p *corev1.Pod) { p.Spec.NodeName = tc.nodeName })
			s := p.(framework.FilterPlugin).Filter(context.Background(), nil, pod, fixture.Node(tc.node, "1", "1Gi", nil))
			if s.Code() != tc.want {
				t.Errorf("got %v, want %v", s.Code(), tc.want)
			}
		})
	}
}
