// This file holds the tests of environment from ConfigMaps and Secrets on a
// real API service, and of the node authorizer letting a node read only the
// objects its own pods refer to.

package nodeagent

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/nodeagent/simruntime"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// TestEnvFromConfigMapsAndSecrets: containers get variables from
// ConfigMaps and Secrets (valueFrom a key, envFrom with a prefix, optional
// ones absent) — on the built-in runtime KPLANE_SIM_LOG is the
// container's output, so the log shows the value it got; a missing key
// keeps the container waiting in CreateContainerConfigError with the
// kubelet's message and event until the key appears.
func TestEnvFromConfigMapsAndSecrets(t *testing.T) {
	c := startCluster(t)
	n := startSimNode(t, c, "n1", nil)
	ctx := context.Background()
	cms := client.Must[*corev1.ConfigMap](c.admin)
	secrets := client.Must[*corev1.Secret](c.admin)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: "app-config", Namespace: "default"},
		Data: map[string]string{"greeting": "hello from a configmap"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Create(ctx, &corev1.Secret{Metadata: &metav1.ObjectMeta{Name: "app-secret", Namespace: "default"},
		Data: map[string][]byte{"LOG": []byte("hello from a secret")}}); err != nil {
		t.Fatal(err)
	}
	yes := true
	withEnv := func(name string, env []*corev1.EnvVar, from []*corev1.EnvFromSource) *corev1.Pod {
		return simPod(name, nil, func(s *corev1.PodSpec) {
			s.Containers[0].Env, s.Containers[0].EnvFrom = env, from
		})
	}
	cmKey := func(key string) []*corev1.EnvVar {
		return []*corev1.EnvVar{{Name: simruntime.EnvLog, ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: &corev1.LocalObjectReference{Name: "app-config"}, Key: key}}}}
	}
	fromCM := c.runPod(t, withEnv("from-cm", cmKey("greeting"), nil), "n1")
	fromSecret := c.runPod(t, withEnv("from-secret", nil, []*corev1.EnvFromSource{
		{Prefix: "KPLANE_SIM_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "app-secret"}}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "absent"}, Optional: &yes}},
	}), "n1")
	missing := c.runPod(t, withEnv("missing", cmKey("later"), nil), "n1")

	logOf := func(p *corev1.Pod) string {
		t.Helper()
		resp, err := http.Get(n.logs + "/containerLogs/default/" + p.Metadata.Name + "/main")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, tt := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{fromCM, "hello from a configmap\n"},
		{fromSecret, "hello from a secret\n"},
	} {
		c.waitPod(t, "default", tt.pod.Metadata.Name, "Running", phaseIs(PhaseRunning))
		if got := logOf(tt.pod); got != tt.want {
			t.Errorf("pod %s: log %q, want %q", tt.pod.Metadata.Name, got, tt.want)
		}
	}

	const msg = "couldn't find key later in ConfigMap default/app-config"
	c.waitPod(t, "default", "missing", "CreateContainerConfigError", func(p *corev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) == 1 && cs[0].GetState().GetWaiting().GetReason() == ReasonCreateConfig &&
			cs[0].GetState().GetWaiting().GetMessage() == msg
	})
	waitEvent(t, c, missing, "Failed", "Error: "+msg)
	// The key appears: the next sync creates the container.
	cm, err := cms.Get(ctx, "default", "app-config")
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["later"] = "now it is there"
	if _, err := cms.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	c.waitPod(t, "default", "missing", "Running", phaseIs(PhaseRunning))
	if got := logOf(missing); got != "now it is there\n" {
		t.Errorf("pod missing: log %q, want the new key's value", got)
	}
}

// TestNodeReadsOnlyItsPodsObjects: the Node authorizer lets
// system:node:<name> get — or list and watch, one at a time by a
// metadata.name field selector — the ConfigMaps and Secrets that pods
// bound to that node name (valueFrom, envFrom), and no others — not unreferenced
// ones, not those of another node's pods, not after the pod is gone — as
// Kubernetes' node authorizer graph does.
func TestNodeReadsOnlyItsPodsObjects(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	cms := client.Must[*corev1.ConfigMap](c.admin)
	secrets := client.Must[*corev1.Secret](c.admin)
	for _, name := range []string{"n1-config", "n2-config", "unrelated"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"n1-secret", "n2-secret"} {
		if _, err := secrets.Create(ctx, &corev1.Secret{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "default"}}); err != nil {
			t.Fatal(err)
		}
	}
	podFor := func(name, cm, secret string) *corev1.Pod {
		return simPod(name, nil, func(s *corev1.PodSpec) {
			s.Containers[0].Env = []*corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: &corev1.LocalObjectReference{Name: cm}, Key: "k"}}}}
			s.Containers[0].EnvFrom = []*corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: &corev1.LocalObjectReference{Name: secret}}}}
		})
	}
	c.runPod(t, podFor("p1", "n1-config", "n1-secret"), "n1")
	c.runPod(t, podFor("p2", "n2-config", "n2-secret"), "n2")

	// No agent runs: these are the node identities alone.
	n1 := c.env.DialCert(t, "system:node:n1", "system:nodes")
	n1CMs, n1Secrets := client.Must[*corev1.ConfigMap](n1), client.Must[*corev1.Secret](n1)
	get := func(kind, name string) error {
		if kind == "configmap" {
			_, err := n1CMs.Get(ctx, "default", name)
			return err
		}
		_, err := n1Secrets.Get(ctx, "default", name)
		return err
	}
	testutil.EventuallyWithin(t, 10*time.Second, "n1 reads its pod's configmap", func() bool { return get("configmap", "n1-config") == nil })
	tests := []struct {
		name, kind, object string
		allowed            bool
	}{
		{"its pod's configmap (valueFrom)", "configmap", "n1-config", true},
		{"its pod's secret (envFrom)", "secret", "n1-secret", true},
		{"another node's pod's configmap", "configmap", "n2-config", false},
		{"another node's pod's secret", "secret", "n2-secret", false},
		{"a configmap no pod names", "configmap", "unrelated", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := get(tt.kind, tt.object)
			if tt.allowed && err != nil {
				t.Errorf("got %v, want allowed", err)
			}
			if !tt.allowed && !apierrors.IsForbidden(err) {
				t.Errorf("got %v, want Forbidden", err)
			}
		})
	}
	// Lists stay forbidden even of its own namespace's configmaps.
	if _, _, err := n1CMs.List(ctx, "default", client.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list configmaps as n1: got %v, want Forbidden", err)
	}
	// A list or watch of one object (metadata.name=NAME) is a read of that
	// object, as the node agent's watches make it.
	one := func(name string) client.ListOptions {
		return client.ListOptions{FieldSelector: "metadata.name=" + name}
	}
	for _, tt := range []struct {
		name, object string
		allowed      bool
	}{
		{"its pod's configmap", "n1-config", true},
		{"another node's pod's configmap", "n2-config", false},
		{"a configmap no pod names", "unrelated", false},
	} {
		t.Run("list and watch "+tt.name, func(t *testing.T) {
			items, _, err := n1CMs.List(ctx, "default", one(tt.object))
			switch {
			case tt.allowed && (err != nil || len(items) != 1 || items[0].GetMetadata().GetName() != tt.object):
				t.Errorf("list: got %d items, %v; want the one object", len(items), err)
			case !tt.allowed && !apierrors.IsForbidden(err):
				t.Errorf("list: got %v, want Forbidden", err)
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			w, err := n1CMs.Watch(wctx, "default", one(tt.object))
			if err == nil {
				defer w.Close()
				_, err = w.Next() // the stream's answer: an event, or the refusal
			}
			switch {
			case tt.allowed && err != nil:
				t.Errorf("watch: got %v, want allowed", err)
			case !tt.allowed && !apierrors.IsForbidden(err):
				t.Errorf("watch: got %v, want Forbidden", err)
			}
		})
	}
	// Across namespaces, even by name: refused.
	if _, _, err := n1Secrets.List(ctx, "", one("n1-secret")); !apierrors.IsForbidden(err) {
		t.Errorf("list one secret across namespaces: got %v, want Forbidden", err)
	}
	// Once the pod is gone, so is the relationship.
	zero := int64(0)
	if err := c.pods.Delete(ctx, "default", "p1", client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "n1 loses its deleted pod's configmap", func() bool { return apierrors.IsForbidden(get("configmap", "n1-config")) })
}
