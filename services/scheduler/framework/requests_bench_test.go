// This file holds the benchmark of computing a pod's facts, which the
// scheduler does on every pod event.

package framework_test

import (
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// BenchmarkNewPodInfo: the bench's pod, one container requesting cpu and
// memory.
func BenchmarkNewPodInfo(b *testing.B) {
	p := &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "default", Name: "pod-00001"},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "100m", "memory": "128Mi"}}}}}}
	b.ReportAllocs()
	for b.Loop() {
		framework.NewPodInfo(p)
	}
}
