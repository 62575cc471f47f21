// This file holds the tests of a container's environment (values, field and
// resource references, ConfigMaps and Secrets through a fake) and of its
// Linux resources from requests and limits.

package nodeagent

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// fakeObjects serves ConfigMaps and Secrets from maps (a unit-test double
// of the agent's own envObjects; the e2e tests read real ones).
type fakeObjects struct {
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
}

func (f fakeObjects) ConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	if cm, ok := f.cms[ns+"/"+name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound("", "configmap", name)
}

func (f fakeObjects) Secret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound("", "secret", name)
}

func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{
		Metadata: &metav1.ObjectMeta{Name: "web", Namespace: "prod", Uid: "u1",
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"team": "a"}},
		Spec: &corev1.PodSpec{NodeName: "n1", ServiceAccountName: "sa",
			Containers: []*corev1.Container{{Name: "side", Resources: &corev1.ResourceRequirements{Limits: map[string]string{"memory": "64Mi"}}}}},
	}
	objs := fakeObjects{
		cms:     map[string]*corev1.ConfigMap{"prod/cfg": {Data: map[string]string{"MODE": "fast", "LEVEL": "3", "bad-name=": "x", "1st": "y"}}},
		secrets: map[string]*corev1.Secret{"prod/db": {Data: map[string][]byte{"password": []byte("s3cret"), "user": []byte("app")}}},
	}
	in := envInputs{podIP: "10.0.0.5", hostIP: "192.168.1.1", allocatable: map[string]string{"cpu": "4", "memory": "8Gi"}, objects: objs}
	ref := func(p string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: p}}
	}
	cmKey := func(name, key string, optional bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: &corev1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}
	}
	secKey := func(name, key string, optional bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: &corev1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}
	}
	res := func(container, r, div string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: container, Resource: r, Divisor: div}}
	}
	yes := true
	c := &corev1.Container{
		Name:      "main",
		Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "250m"}, Limits: map[string]string{"memory": "1Gi"}},
		EnvFrom: []*corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "cfg"}}},
			{Prefix: "DB_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "db"}}},
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "absent"}, Optional: &yes}},
		},
		Env: []*corev1.EnvVar{
			{Name: "PLAIN", Value: "v"},
			{Name: "NAME", ValueFrom: ref("metadata.name")},
			{Name: "NS", ValueFrom: ref("metadata.namespace")},
			{Name: "UID", ValueFrom: ref("metadata.uid")},
			{Name: "NODE", ValueFrom: ref("spec.nodeName")},
			{Name: "SA", ValueFrom: ref("spec.serviceAccountName")},
			{Name: "IP", ValueFrom: ref("status.podIP")},
			{Name: "HOST", ValueFrom: ref("status.hostIP")},
			{Name: "APP", ValueFrom: ref("metadata.labels['app']")},
			{Name: "TEAM", ValueFrom: ref("metadata.annotations['team']")},
			{Name: "CM", ValueFrom: cmKey("cfg", "MODE", false)},
			{Name: "CM_OPT_KEY", ValueFrom: cmKey("cfg", "nope", true)},
			{Name: "CM_OPT_MAP", ValueFrom: cmKey("absent", "x", true)},
			{Name: "PASS", ValueFrom: secKey("db", "password", false)},
			{Name: "MODE", Value: "slow"}, // replaces envFrom's MODE
			{Name: "CPU_M", ValueFrom: res("", "requests.cpu", "1m")},
			{Name: "CPU_LIMIT", ValueFrom: res("", "limits.cpu", "")},
			{Name: "MEM_MI", ValueFrom: res("", "limits.memory", "1Mi")},
			{Name: "SIDE_MEM", ValueFrom: res("side", "limits.memory", "")},
			{Name: "CPU_ZERO_DIVISOR", ValueFrom: res("", "requests.cpu", "0")},
			{Name: "COMPOSED", Value: "$(NAME).$(NS):$(LEVEL);$$(NAME);$(LATER)"},
			{Name: "LATER", Value: "x"},
		},
	}
	env, skipped, err := containerEnv(context.Background(), pod, c, in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var order []string
	for _, kv := range env {
		got[kv.GetKey()] = kv.GetValue()
		order = append(order, kv.GetKey())
	}
	want := map[string]string{
		"LEVEL": "3", "MODE": "slow", "DB_password": "s3cret", "DB_user": "app",
		"PLAIN": "v", "NAME": "web", "NS": "prod", "UID": "u1", "NODE": "n1", "SA": "sa",
		"IP": "10.0.0.5", "HOST": "192.168.1.1", "APP": "web", "TEAM": "a",
		"CM": "fast", "PASS": "s3cret",
		"CPU_M": "250", "CPU_ZERO_DIVISOR": "1", "CPU_LIMIT": "4", "MEM_MI": "1024", "SIDE_MEM": "67108864",
		// A value refers to the variables defined before it, envFrom's too.
		"COMPOSED": "web.prod:3;$(NAME);$(LATER)", "LATER": "x",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("environment (-want +got):\n%s", diff)
	}
	if !slices.Equal(skipped, []string{"1st", "bad-name="}) {
		t.Errorf("skipped: got %q, want [1st bad-name=]", skipped)
	}
	if order[0] != "LEVEL" || order[1] != "MODE" {
		t.Errorf("order: got %q, want envFrom's keys first, sorted", order)
	}

	// What keeps a container from being created, with the kubelet's words.
	errs := []struct {
		name string
		c    *corev1.Container
		want string
	}{
		{"missing configmap", &corev1.Container{EnvFrom: []*corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "absent"}}}}},
			`configmap "absent" not found`},
		{"missing secret", &corev1.Container{Env: []*corev1.EnvVar{{Name: "X", ValueFrom: secKey("absent", "k", false)}}},
			`secret "absent" not found`},
		{"missing configmap key", &corev1.Container{Env: []*corev1.EnvVar{{Name: "X", ValueFrom: cmKey("cfg", "nope", false)}}},
			"couldn't find key nope in ConfigMap prod/cfg"},
		{"missing secret key", &corev1.Container{Env: []*corev1.EnvVar{{Name: "X", ValueFrom: secKey("db", "nope", false)}}},
			"couldn't find key nope in Secret prod/db"},
		{"unsupported field", &corev1.Container{Env: []*corev1.EnvVar{{Name: "X", ValueFrom: ref("spec.nope")}}},
			"unsupported fieldPath: spec.nope"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := containerEnv(context.Background(), pod, tt.c, in)
			if err == nil || err.Error() != tt.want {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
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

func TestLinuxSecurityContext(t *testing.T) {
	u, g, fs, no, yes := int64(1000), int64(3000), int64(2000), false, true
	cu := int64(1002)
	got := linuxSecurityContext(
		&corev1.PodSecurityContext{RunAsUser: &u, RunAsGroup: &g, FsGroup: &fs, SupplementalGroups: []int64{5}},
		&corev1.SecurityContext{RunAsUser: &cu, ReadOnlyRootFilesystem: &yes, AllowPrivilegeEscalation: &no})
	if got.GetRunAsUser().GetValue() != 1002 || got.GetRunAsGroup().GetValue() != 3000 || !got.GetReadonlyRootfs() || !got.GetNoNewPrivs() ||
		!slices.Equal(got.GetSupplementalGroups(), []int64{5, 2000}) {
		t.Fatalf("got %v", got)
	}
	if got := linuxSecurityContext(nil, nil); got.GetRunAsUser() != nil || got.GetNoNewPrivs() {
		t.Fatalf("no security context: got %v", got)
	}
}
