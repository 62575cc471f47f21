package nodeagent

import (
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{
		Metadata: &metav1.ObjectMeta{Name: "web", Namespace: "prod", Uid: "u1", Labels: map[string]string{"app": "web"}},
		Spec:     &corev1.PodSpec{NodeName: "n1"},
	}
	ref := func(p string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: p}}
	}
	c := &corev1.Container{Env: []*corev1.EnvVar{
		{Name: "PLAIN", Value: "v"},
		{Name: "NAME", ValueFrom: ref("metadata.name")},
		{Name: "NS", ValueFrom: ref("metadata.namespace")},
		{Name: "NODE", ValueFrom: ref("spec.nodeName")},
		{Name: "IP", ValueFrom: ref("status.podIP")},
		{Name: "HOST", ValueFrom: ref("status.hostIP")},
		{Name: "APP", ValueFrom: ref("metadata.labels['app']")},
		{Name: "UNSUPPORTED", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{}}},
	}}
	got := map[string]string{}
	for _, kv := range containerEnv(pod, c, "10.0.0.5", "192.168.1.1") {
		got[kv.GetKey()] = kv.GetValue()
	}
	tests := []struct{ name, key, want string }{
		{"plain", "PLAIN", "v"},
		{"name", "NAME", "web"},
		{"namespace", "NS", "prod"},
		{"node", "NODE", "n1"},
		{"pod IP", "IP", "10.0.0.5"},
		{"host IP", "HOST", "192.168.1.1"},
		{"label", "APP", "web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got[tt.key] != tt.want {
				t.Errorf("%s: got %q, want %q", tt.key, got[tt.key], tt.want)
			}
		})
	}
	if _, ok := got["UNSUPPORTED"]; ok {
		t.Errorf("a config map variable was set; want it left out")
	}
}

func TestLinuxResources(t *testing.T) {
	tests := []struct {
		name               string
		req, lim           map[string]string
		shares, quota, mem int64
	}{
		{"none", nil, nil, 2, 0, 0},
		{"cpu request", map[string]string{"cpu": "500m"}, nil, 512, 0, 0},
		{"cpu limit only", nil, map[string]string{"cpu": "2"}, 2048, 200000, 0},
		{"tiny request", map[string]string{"cpu": "1m"}, nil, 2, 0, 0},
		{"memory limit", nil, map[string]string{"memory": "128Mi"}, 2, 0, 128 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := linuxResources(&corev1.ResourceRequirements{Requests: tt.req, Limits: tt.lim})
			if r.GetCpuShares() != tt.shares || r.GetCpuQuota() != tt.quota || r.GetMemoryLimitInBytes() != tt.mem {
				t.Errorf("got shares %d quota %d memory %d, want %d %d %d",
					r.GetCpuShares(), r.GetCpuQuota(), r.GetMemoryLimitInBytes(), tt.shares, tt.quota, tt.mem)
			}
		})
	}
}
