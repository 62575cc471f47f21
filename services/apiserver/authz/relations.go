// This file holds how a node's pods relate it to other objects: a Secret or
// ConfigMap that a pod bound to the node uses as a volume or in its
// environment, its ServiceAccount, its PersistentVolumeClaims and the
// volumes they are bound to.

package authz

import (
	"context"
	"fmt"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// PodsOnNode lists the pods bound to a node (spec.nodeName), typically from
// the apiserver's pod cache.
type PodsOnNode func(ctx context.Context, node string) ([]*corev1.Pod, error)

// RelatedByPods returns a NodeConfig.RelatedToNode that grants a node its
// pods' configmaps and secrets — those named by a volume (or a projected
// volume's source), an env valueFrom or an envFrom of any container or init
// container of a pod bound to the node, in that pod's namespace — and their
// serviceaccounts: the part of Kubernetes' node graph kplane's schema can
// express.
func RelatedByPods(pods PodsOnNode, claimVolume func(namespace, name string) string) func(ctx context.Context, node, resource, namespace, name string) (bool, error) {
	return func(ctx context.Context, node, resource, namespace, name string) (bool, error) {
		list, err := pods(ctx, node)
		if err != nil {
			return false, fmt.Errorf("pods on node %q: %w", node, err)
		}
		for _, p := range list {
			if p.GetSpec().GetNodeName() != node {
				continue
			}
			if resource == "persistentvolumes" {
				// Cluster-scoped: through a claim of the pod bound to it.
				for _, v := range p.GetSpec().GetVolumes() {
					if c := v.GetPersistentVolumeClaim(); c != nil && claimVolume != nil &&
						claimVolume(p.GetMetadata().GetNamespace(), c.GetClaimName()) == name {
						return true, nil
					}
				}
				continue
			}
			if p.GetMetadata().GetNamespace() != namespace {
				continue
			}
			if podReferences(p.GetSpec(), resource, name) {
				return true, nil
			}
		}
		return false, nil
	}
}

func podReferences(spec *corev1.PodSpec, resource, name string) bool {
	if resource == "serviceaccounts" {
		return spec.GetServiceAccountName() == name
	}
	for _, v := range spec.GetVolumes() {
		switch resource {
		case "persistentvolumeclaims":
			if v.GetPersistentVolumeClaim() != nil && v.GetPersistentVolumeClaim().GetClaimName() == name {
				return true
			}
		case "configmaps":
			if v.GetConfigMap() != nil && v.GetConfigMap().GetName() == name {
				return true
			}
		case "secrets":
			if v.GetSecret() != nil && v.GetSecret().GetSecretName() == name {
				return true
			}
		}
		for _, s := range v.GetProjected().GetSources() {
			if resource == "configmaps" && s.GetConfigMap() != nil && s.GetConfigMap().GetLocalObjectReference().GetName() == name {
				return true
			}
			if resource == "secrets" && s.GetSecret() != nil && s.GetSecret().GetLocalObjectReference().GetName() == name {
				return true
			}
		}
	}
	containers := append(append([]*corev1.Container(nil), spec.GetInitContainers()...), spec.GetContainers()...)
	for _, c := range containers {
		for _, e := range c.GetEnv() {
			vf := e.GetValueFrom()
			if resource == "configmaps" && vf.GetConfigMapKeyRef() != nil && vf.GetConfigMapKeyRef().GetName() == name {
				return true
			}
			if resource == "secrets" && vf.GetSecretKeyRef() != nil && vf.GetSecretKeyRef().GetName() == name {
				return true
			}
		}
		for _, ef := range c.GetEnvFrom() {
			if resource == "configmaps" && ef.GetConfigMapRef() != nil && ef.GetConfigMapRef().GetName() == name {
				return true
			}
			if resource == "secrets" && ef.GetSecretRef() != nil && ef.GetSecretRef().GetName() == name {
				return true
			}
		}
	}
	return false
}
