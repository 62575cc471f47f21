// This file holds the test of the host-port filter: conflicts by port,
// protocol and host IP, wildcard included.

package nodeports_test

import (
	"context"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/fixture"
	"github.com/kplane/kplane/services/scheduler/plugins/nodeports"
)

func withPorts(name string, ports ...*corev1.ContainerPort) *framework.PodInfo {
	return fixture.Pod(name, "", "", func(p *corev1.Pod) { p.Spec.Containers[0].Ports = ports })
}

func TestFilter(t *testing.T) {
	tcp80 := &corev1.ContainerPort{ContainerPort: 80, HostPort: 8080}
	tests := []struct {
		name     string
		pod      *framework.PodInfo
		existing []*framework.PodInfo
		want     framework.Code
	}{
		{name: "free port", pod: withPorts("p", tcp80), want: framework.Success},
		{name: "same port taken", pod: withPorts("p", tcp80), existing: []*framework.PodInfo{withPorts("a", tcp80)}, want: framework.Unschedulable},
		{name: "other protocol", pod: withPorts("p", tcp80), existing: []*framework.PodInfo{withPorts("a", &corev1.ContainerPort{HostPort: 8080, Protocol: "UDP"})}, want: framework.Success},
		{name: "different IPs", pod: withPorts("p", &corev1.ContainerPort{HostPort: 8080, HostIp: "10.0.0.1"}),
			existing: []*framework.PodInfo{withPorts("a", &corev1.ContainerPort{HostPort: 8080, HostIp: "10.0.0.2"})}, want: framework.Success},
		{name: "wildcard IP conflicts with a specific one", pod: withPorts("p", tcp80),
			existing: []*framework.PodInfo{withPorts("a", &corev1.ContainerPort{HostPort: 8080, HostIp: "10.0.0.2"})}, want: framework.Unschedulable},
		{name: "container port only", pod: withPorts("p", &corev1.ContainerPort{ContainerPort: 80}),
			existing: []*framework.PodInfo{withPorts("a", &corev1.ContainerPort{ContainerPort: 80})}, want: framework.Success},
	}
	p, _ := nodeports.New(nil, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := fixture.WithPods(fixture.Node("n", "4", "8Gi", nil), tc.existing...)
			state := framework.NewCycleState()
			if s := p.(framework.PreFilterPlugin).PreFilter(context.Background(), state, tc.pod, nil); s.IsSkip() {
				if tc.want != framework.Success {
					t.Fatalf("PreFilter skipped, want %v", tc.want)
				}
				return
			}
			s := p.(framework.FilterPlugin).Filter(context.Background(), state, tc.pod, node)
			if s.Code() != tc.want {
				t.Errorf("got %v %q, want %v", s.Code(), s.Reasons(), tc.want)
			}
		})
	}
}
