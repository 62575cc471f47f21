// This file checks that the scheduler's own sum for pods with only app
// containers agrees with k8s.io/component-helpers' PodRequests.

package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

func TestPlainPodRequests(t *testing.T) {
	tests := []struct {
		name       string
		containers []map[string]string
	}{
		{name: "cpu and memory", containers: []map[string]string{{"cpu": "100m", "memory": "128Mi"}}},
		{name: "nothing requested", containers: []map[string]string{nil, {}}},
		{name: "one of two resources", containers: []map[string]string{{"cpu": "1"}, {"memory": "1Gi"}}},
		{name: "zero requests are not defaulted", containers: []map[string]string{{"cpu": "0", "memory": "0"}}},
		{name: "every kind of resource", containers: []map[string]string{
			{"cpu": "1500m", "ephemeral-storage": "2Gi", "example.com/fakecpu": "3", "hugepages-1Gi": "2Gi", "nvidia.com/gpu": "1"},
			{"memory": "300Mi", "example.com/fakecpu": "2", "unknown-native-name": "5"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: &corev1.PodSpec{}}
			for _, req := range tc.containers {
				p.Spec.Containers = append(p.Spec.Containers, &corev1.Container{Name: "c", Resources: &corev1.ResourceRequirements{Requests: req}})
			}
			if !plainContainers(p) {
				t.Fatal("got not plain, want plain")
			}
			req, nz := podRequests(p)
			wantReq, wantNZ := libraryPodRequests(p)
			if diff := cmp.Diff(wantReq, req); diff != "" {
				t.Errorf("requests (-PodRequests +ours):\n%s", diff)
			}
			if diff := cmp.Diff(wantNZ, nz); diff != "" {
				t.Errorf("non-zero requests (-PodRequests +ours):\n%s", diff)
			}
		})
	}
}
