// This file holds the pods-by-node index the Node authorizer asks which pods
// are bound to a node, fed by the service's own watch of pods.

package authz

import (
	"context"
	"sync"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// PodIndex is the pods-by-node part of Kubernetes' node authorizer graph:
// an ObjectSink fed with every pod by the API service's own watch
// (Config.Informers["pods"]), answering which pods are bound to a node, so
// that RelatedByPods grants a node the ConfigMaps and Secrets of its pods
// and no others. Like Kubernetes' graph it follows the store with the
// watch's small delay: a node that reads a pod's ConfigMap the instant the
// pod is bound may be refused once and retries.
type PodIndex struct {
	mu     sync.RWMutex
	byNode map[string]map[string]*corev1.Pod // node -> namespace/name -> pod
	nodeOf map[string]string                 // namespace/name -> node
	// claims: namespace/name of a PersistentVolumeClaim -> the volume it
	// is bound to (Config.Informers["persistentvolumeclaims"]), so that a
	// node may read the volumes of its pods' claims.
	claims map[string]string
}

// NewPodIndex returns an empty index.
func NewPodIndex() *PodIndex {
	return &PodIndex{byNode: map[string]map[string]*corev1.Pod{}, nodeOf: map[string]string{}, claims: map[string]string{}}
}

func podKey(p *corev1.Pod) string {
	return p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName()
}

// Upsert records a pod (ObjectSink); pods not bound to a node are not kept.
func (ix *PodIndex) Upsert(obj any) {
	if c, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		ix.mu.Lock()
		defer ix.mu.Unlock()
		ix.claims[c.GetMetadata().GetNamespace()+"/"+c.GetMetadata().GetName()] = c.GetSpec().GetVolumeName()
		return
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k, node := podKey(p), p.GetSpec().GetNodeName()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.removeLocked(k)
	if node == "" {
		return
	}
	if ix.byNode[node] == nil {
		ix.byNode[node] = map[string]*corev1.Pod{}
	}
	ix.byNode[node][k] = p
	ix.nodeOf[k] = node
}

// Delete forgets a pod (ObjectSink).
func (ix *PodIndex) Delete(obj any) {
	if c, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		ix.mu.Lock()
		defer ix.mu.Unlock()
		delete(ix.claims, c.GetMetadata().GetNamespace()+"/"+c.GetMetadata().GetName())
		return
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.removeLocked(podKey(p))
}

func (ix *PodIndex) removeLocked(k string) {
	node, ok := ix.nodeOf[k]
	if !ok {
		return
	}
	delete(ix.nodeOf, k)
	delete(ix.byNode[node], k)
	if len(ix.byNode[node]) == 0 {
		delete(ix.byNode, node)
	}
}

// PodsOnNode lists the pods bound to node (a PodsOnNode for RelatedByPods).
func (ix *PodIndex) PodsOnNode(_ context.Context, node string) ([]*corev1.Pod, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]*corev1.Pod, 0, len(ix.byNode[node]))
	for _, p := range ix.byNode[node] {
		out = append(out, p)
	}
	return out, nil
}

// ClaimVolume is the volume the claim namespace/name is bound to ("" when
// unknown or unbound).
func (ix *PodIndex) ClaimVolume(namespace, name string) string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.claims[namespace+"/"+name]
}
