// This file holds the test of which objects a node's pods relate it to.

package authz

import (
	"context"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

func TestRelatedByPods(t *testing.T) {
	pods := map[string][]*corev1.Pod{
		"n1": {{
			Metadata: meta("app", "web"),
			Spec: &corev1.PodSpec{NodeName: "n1",
				Volumes: []*corev1.Volume{{Name: "cfg", VolumeSource: &corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "web-config"}}}},
					{Name: "tls", VolumeSource: &corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-tls"}}},
					{Name: "data", VolumeSource: &corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-web-0"}}},
					{Name: "kube-api-access-x", VolumeSource: &corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
						{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: &corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
						{Secret: &corev1.SecretProjection{LocalObjectReference: &corev1.LocalObjectReference{Name: "projected-secret"}}}}}}}},
				ServiceAccountName: "web-sa",
				InitContainers:     []*corev1.Container{{Name: "init", EnvFrom: []*corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: &corev1.LocalObjectReference{Name: "init-env"}}}}}},
				Containers: []*corev1.Container{{Name: "c", Env: []*corev1.EnvVar{
					{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: &corev1.LocalObjectReference{Name: "db"}, Key: "password"}}},
					{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: &corev1.LocalObjectReference{Name: "modes"}, Key: "mode"}}},
				}}},
			},
		}},
	}
	claims := map[string]string{"app/data-web-0": "pv-1", "app/other": "pv-2"}
	az := NewNode(NodeConfig{RelatedToNode: RelatedByPods(func(_ context.Context, node string) ([]*corev1.Pod, error) { return pods[node], nil },
		func(ns, name string) string { return claims[ns+"/"+name] })})
	tests := []struct {
		name                     string
		node, resource, ns, what string
		verb, subresource        string // default get
		want                     bool
	}{
		{name: "projected configmap", node: "n1", resource: "configmaps", ns: "app", what: "kube-root-ca.crt", want: true},
		{name: "projected secret", node: "n1", resource: "secrets", ns: "app", what: "projected-secret", want: true},
		{name: "token of its pod's serviceaccount", node: "n1", resource: "serviceaccounts", ns: "app", what: "web-sa", verb: "create", subresource: "token", want: true},
		{name: "token of another serviceaccount", node: "n1", resource: "serviceaccounts", ns: "app", what: "default", verb: "create", subresource: "token"},
		{name: "token from another node", node: "n2", resource: "serviceaccounts", ns: "app", what: "web-sa", verb: "create", subresource: "token"},
		{name: "get a serviceaccount", node: "n1", resource: "serviceaccounts", ns: "app", what: "web-sa"},
		{name: "configmap volume", node: "n1", resource: "configmaps", ns: "app", what: "web-config", want: true},
		{name: "secret volume", node: "n1", resource: "secrets", ns: "app", what: "web-tls", want: true},
		{name: "secret env valueFrom", node: "n1", resource: "secrets", ns: "app", what: "db", want: true},
		{name: "configmap env valueFrom", node: "n1", resource: "configmaps", ns: "app", what: "modes", want: true},
		{name: "init container envFrom", node: "n1", resource: "secrets", ns: "app", what: "init-env", want: true},
		{name: "unreferenced secret", node: "n1", resource: "secrets", ns: "app", what: "other"},
		{name: "same name, other namespace", node: "n1", resource: "secrets", ns: "default", what: "db"},
		{name: "a configmap named like a secret", node: "n1", resource: "configmaps", ns: "app", what: "db"},
		{name: "another node", node: "n2", resource: "secrets", ns: "app", what: "db"},
		{name: "its pod's claim", node: "n1", resource: "persistentvolumeclaims", ns: "app", what: "data-web-0", want: true},
		{name: "another claim", node: "n1", resource: "persistentvolumeclaims", ns: "app", what: "other"},
		{name: "the volume of its pod's claim", node: "n1", resource: "persistentvolumes", what: "pv-1", want: true},
		{name: "another volume", node: "n1", resource: "persistentvolumes", what: "pv-2"},
		{name: "the volume from another node", node: "n2", resource: "persistentvolumes", what: "pv-1"},
		{name: "list claims", node: "n1", resource: "persistentvolumeclaims", ns: "app", verb: "list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := request.User{Name: request.NodeUserPrefix + tt.node, Groups: []string{request.NodesGroup}}
			verb := tt.verb
			if verb == "" {
				verb = "get"
			}
			d, err := az.Authorize(context.Background(), request.Attributes{User: u, Verb: verb, Resource: tt.resource, Subresource: tt.subresource, Namespace: tt.ns, Name: tt.what})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tt.want {
				t.Errorf("got allowed=%v (%q), want %v", d.Allowed, d.Reason, tt.want)
			}
		})
	}
}
