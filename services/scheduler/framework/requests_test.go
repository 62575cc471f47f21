// This file holds the tests of a pod's computed requests: containers,
// init and sidecar containers, overhead, extended resources and the
// non-zero scoring defaults, as Kubernetes counts them.

package framework_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

func TestPodRequests(t *testing.T) {
	ctr := func(name string, req map[string]string) *corev1.Container {
		return &corev1.Container{Name: name, Resources: &corev1.ResourceRequirements{Requests: req}}
	}
	sidecar := func(name string, req map[string]string) *corev1.Container {
		c := ctr(name, req)
		c.RestartPolicy = proto.String("Always")
		return c
	}
	tests := []struct {
		name        string
		spec        *corev1.PodSpec
		want        framework.Resource
		wantNonZero framework.Resource
	}{
		{name: "containers add up; extended resources and hugepages are scalars",
			spec: &corev1.PodSpec{Containers: []*corev1.Container{
				ctr("a", map[string]string{"cpu": "100m", "memory": "1Gi", "example.com/fakecpu": "2"}),
				ctr("b", map[string]string{"cpu": "200m", "ephemeral-storage": "1Gi", "example.com/fakecpu": "3", "hugepages-2Mi": "4Mi"}),
			}},
			want: framework.Resource{MilliCPU: 300, Memory: 1 << 30, EphemeralStorage: 1 << 30, Pods: 1,
				Scalar: map[string]int64{"example.com/fakecpu": 5, "hugepages-2Mi": 4 << 20}},
			wantNonZero: framework.Resource{MilliCPU: 300, Memory: 1<<30 + framework.DefaultMemoryRequest, Pods: 1}},
		{name: "an init container larger than the app containers sets the need",
			spec: &corev1.PodSpec{
				InitContainers: []*corev1.Container{ctr("init", map[string]string{"cpu": "1", "example.com/fakecpu": "4"})},
				Containers:     []*corev1.Container{ctr("a", map[string]string{"cpu": "100m", "example.com/fakecpu": "1"})},
			},
			want:        framework.Resource{MilliCPU: 1000, Pods: 1, Scalar: map[string]int64{"example.com/fakecpu": 4}},
			wantNonZero: framework.Resource{MilliCPU: 1000, Memory: framework.DefaultMemoryRequest, Pods: 1}},
		{name: "sidecars add to the app containers and to the init containers after them",
			spec: &corev1.PodSpec{
				InitContainers: []*corev1.Container{
					sidecar("side", map[string]string{"cpu": "200m"}),
					ctr("init", map[string]string{"cpu": "500m"}),
				},
				Containers: []*corev1.Container{ctr("a", map[string]string{"cpu": "100m"})},
			},
			want:        framework.Resource{MilliCPU: 700, Pods: 1},
			wantNonZero: framework.Resource{MilliCPU: 700, Memory: 2 * framework.DefaultMemoryRequest, Pods: 1}},
		{name: "overhead is added",
			spec: &corev1.PodSpec{
				Overhead:   map[string]string{"cpu": "250m", "memory": "64Mi"},
				Containers: []*corev1.Container{ctr("a", map[string]string{"cpu": "100m"})},
			},
			want:        framework.Resource{MilliCPU: 350, Memory: 64 << 20, Pods: 1},
			wantNonZero: framework.Resource{MilliCPU: 350, Memory: 64<<20 + framework.DefaultMemoryRequest, Pods: 1}},
		{name: "nothing requested: scoring assumes the defaults",
			spec:        &corev1.PodSpec{Containers: []*corev1.Container{ctr("a", nil), ctr("b", nil)}},
			want:        framework.Resource{Pods: 1},
			wantNonZero: framework.Resource{MilliCPU: 2 * framework.DefaultMilliCPURequest, Memory: 2 * framework.DefaultMemoryRequest, Pods: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pi := framework.NewPodInfo(&corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: tc.spec})
			if diff := cmp.Diff(tc.want, pi.Requests); diff != "" {
				t.Errorf("Requests (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantNonZero, pi.NonZeroRequests); diff != "" {
				t.Errorf("NonZeroRequests (-want +got):\n%s", diff)
			}
		})
	}
}

// A clone's requested extended resources are its own: preemption removes
// pods from clones of snapshot nodes.
func TestNodeInfoCloneScalars(t *testing.T) {
	pod := framework.NewPodInfo(&corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "a",
			Resources: &corev1.ResourceRequirements{Requests: map[string]string{"example.com/fakecpu": "2"}}}}}})
	n := framework.NewNodeInfo("n")
	n.SetNode(&corev1.Node{Metadata: &metav1.ObjectMeta{Name: "n"},
		Status: &corev1.NodeStatus{Allocatable: map[string]string{"pods": "110", "example.com/fakecpu": "5"}}})
	n.AddPod(pod)
	c := n.Clone()
	c.RemovePod(pod.Key)
	if got := n.Requested.Scalar["example.com/fakecpu"]; got != 2 {
		t.Errorf("original after the clone's removal: got %d, want 2", got)
	}
	if got := c.Requested.Scalar["example.com/fakecpu"]; got != 0 {
		t.Errorf("clone: got %d, want 0", got)
	}
	if got := n.Allocatable.Scalar["example.com/fakecpu"]; got != 5 {
		t.Errorf("allocatable: got %d, want 5", got)
	}
}
