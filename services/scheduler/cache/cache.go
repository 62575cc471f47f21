// Package cache is the scheduler's view of the cluster: every node with
// the pods placed on it, built from the node and pod informers, plus the
// pods this scheduler has assumed — placed by its own decision, bind in
// flight — so that back-to-back decisions see each other's resource use
// before the bind's watch event comes back. A Snapshot is a copy for one
// scheduling cycle, refreshed incrementally (only changed nodes are copied).
package cache

import (
	"fmt"
	"sync"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

type podState struct {
	pod     *framework.PodInfo
	node    string
	assumed bool // placed by this scheduler; not yet seen bound by the informer
}

// Cache is safe for concurrent use.
type Cache struct {
	mu         sync.Mutex
	nodes      map[string]*framework.NodeInfo // includes nodes not (or no longer) known whose pods are
	pods       map[string]*podState           // by pod key
	generation int64
	dirty      map[string]bool // nodes changed since the last UpdateSnapshot
	listDirty  bool            // a node was added or removed
	images     map[string]int  // normalized image → number of nodes reporting it
	imagesGen  int64
}

// New returns an empty cache.
func New() *Cache {
	return &Cache{nodes: map[string]*framework.NodeInfo{}, pods: map[string]*podState{}, dirty: map[string]bool{}, images: map[string]int{}}
}

// nodeLocked returns the NodeInfo for name, creating a placeholder.
func (c *Cache) nodeLocked(name string) *framework.NodeInfo {
	n, ok := c.nodes[name]
	if !ok {
		n = framework.NewNodeInfo(name)
		c.nodes[name] = n
	}
	return n
}

func (c *Cache) touchLocked(n *framework.NodeInfo) {
	c.generation++
	n.Generation = c.generation
	c.dirty[n.Name] = true
}

func (c *Cache) countImagesLocked(n *framework.NodeInfo, delta int) {
	for img := range n.ImageSizes {
		c.images[img] += delta
		if c.images[img] <= 0 {
			delete(c.images, img)
		}
	}
	c.imagesGen++
}

// AddNode adds or replaces a node.
func (c *Cache) AddNode(node *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodeLocked(node.GetMetadata().GetName())
	if n.Node == nil {
		c.listDirty = true
	} else {
		c.countImagesLocked(n, -1)
	}
	n.SetNode(node)
	c.countImagesLocked(n, +1)
	c.touchLocked(n)
}

// UpdateNode replaces a node.
func (c *Cache) UpdateNode(node *corev1.Node) { c.AddNode(node) }

// RemoveNode removes a node. Its NodeInfo stays while pods still point at it.
func (c *Cache) RemoveNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok || n.Node == nil {
		return
	}
	c.countImagesLocked(n, -1)
	n.Node = nil
	c.listDirty = true
	c.touchLocked(n)
	if len(n.Pods) == 0 {
		delete(c.nodes, name)
	}
}

// AssumePod places pi on node before the bind has happened. It fails if
// the pod is already in the cache (assumed or bound).
func (c *Cache) AssumePod(pi *framework.PodInfo, node string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pods[pi.Key]; ok {
		return fmt.Errorf("cache: pod %s is already in the cache", pi.Key)
	}
	n := c.nodeLocked(node)
	n.AddPod(pi)
	c.touchLocked(n)
	c.pods[pi.Key] = &podState{pod: pi, node: node, assumed: true}
	return nil
}

// ForgetPod undoes AssumePod (the bind failed). A pod no longer assumed
// (the informer has seen it bound) is left alone.
func (c *Cache) ForgetPod(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.pods[key]
	if !ok || !ps.assumed {
		return
	}
	c.removeLocked(key, ps)
}

// IsAssumed reports whether the pod is assumed and not yet seen bound.
func (c *Cache) IsAssumed(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.pods[key]
	return ok && ps.assumed
}

// AddPod records a pod the informer reports bound to node (spec.nodeName).
// An assumed pod is confirmed, and moved if it landed elsewhere.
func (c *Cache) AddPod(pi *framework.PodInfo, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps, ok := c.pods[pi.Key]; ok {
		c.removeLocked(pi.Key, ps)
	}
	n := c.nodeLocked(node)
	n.AddPod(pi)
	c.touchLocked(n)
	c.pods[pi.Key] = &podState{pod: pi, node: node}
}

// RemovePod forgets a pod (deleted, or terminated and no longer using
// its node's resources).
func (c *Cache) RemovePod(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps, ok := c.pods[key]; ok {
		c.removeLocked(key, ps)
	}
}

func (c *Cache) removeLocked(key string, ps *podState) {
	delete(c.pods, key)
	n, ok := c.nodes[ps.node]
	if !ok {
		return
	}
	n.RemovePod(key)
	c.touchLocked(n)
	if n.Node == nil && len(n.Pods) == 0 {
		delete(c.nodes, ps.node)
	}
}

// NodeCount is the number of known nodes.
func (c *Cache) NodeCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ni := range c.nodes {
		if ni.Node != nil {
			n++
		}
	}
	return n
}

// PodNode returns the node a pod is placed on (assumed or bound).
func (c *Cache) PodNode(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.pods[key]
	if !ok {
		return "", false
	}
	return ps.node, true
}

// Snapshot is a point-in-time copy of the cache's nodes for one
// scheduling cycle; it implements framework.NodeLister. Only one goroutine
// may UpdateSnapshot it; reads during a cycle are safe.
type Snapshot struct {
	nodes     map[string]*framework.NodeInfo // only nodes with a Node
	list      []*framework.NodeInfo
	index     map[string]int
	images    map[string]int
	imagesGen int64
	// withAffinity and withAnti are the nodes with pods that have
	// inter-pod terms, and required anti-affinity terms.
	withAffinity, withAnti nodeSet
}

var _ framework.NodeLister = (*Snapshot)(nil)

// nodeSet is a list of nodes with an index by name, so that one node is
// put or removed without rebuilding the list.
type nodeSet struct {
	list  []*framework.NodeInfo
	index map[string]int
}

// set puts n in the set when in is true, else removes the node named name.
func (ns *nodeSet) set(name string, n *framework.NodeInfo, in bool) {
	i, ok := ns.index[name]
	switch {
	case in && ok:
		ns.list[i] = n
	case in:
		if ns.index == nil {
			ns.index = map[string]int{}
		}
		ns.index[name] = len(ns.list)
		ns.list = append(ns.list, n)
	case ok:
		last := len(ns.list) - 1
		ns.list[i] = ns.list[last]
		ns.index[ns.list[i].Name] = i
		ns.list[last] = nil
		ns.list = ns.list[:last]
		delete(ns.index, name)
	}
}

// NewSnapshot returns an empty snapshot.
func NewSnapshot() *Snapshot {
	return &Snapshot{nodes: map[string]*framework.NodeInfo{}, index: map[string]int{}, images: map[string]int{}, imagesGen: -1}
}

// List returns the nodes (shared: do not modify).
func (s *Snapshot) List() []*framework.NodeInfo { return s.list }

// Get returns one node.
func (s *Snapshot) Get(name string) (*framework.NodeInfo, bool) {
	n, ok := s.nodes[name]
	return n, ok
}

// NumNodesWithImage implements framework.NodeLister.
func (s *Snapshot) NumNodesWithImage(image string) int { return s.images[image] }

// HavePodsWithAffinity implements framework.NodeLister.
func (s *Snapshot) HavePodsWithAffinity() []*framework.NodeInfo { return s.withAffinity.list }

// HavePodsWithRequiredAntiAffinity implements framework.NodeLister.
func (s *Snapshot) HavePodsWithRequiredAntiAffinity() []*framework.NodeInfo { return s.withAnti.list }

// UpdateSnapshot brings s up to date, copying only the nodes that changed.
func (c *Cache) UpdateSnapshot(s *Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.dirty {
		n, ok := c.nodes[name]
		if !ok || n.Node == nil {
			delete(s.nodes, name)
			s.withAffinity.set(name, nil, false)
			s.withAnti.set(name, nil, false)
			continue
		}
		clone := n.Clone()
		s.nodes[name] = clone
		s.withAffinity.set(name, clone, len(clone.PodsWithAffinity) > 0)
		s.withAnti.set(name, clone, len(clone.PodsWithRequiredAntiAffinity) > 0)
		if i, ok := s.index[name]; ok && !c.listDirty {
			s.list[i] = clone
		}
	}
	clear(c.dirty)
	if c.listDirty {
		s.list = s.list[:0]
		clear(s.index)
		for name, n := range s.nodes {
			s.index[name] = len(s.list)
			s.list = append(s.list, n)
		}
		c.listDirty = false
	}
	if s.imagesGen != c.imagesGen {
		s.images = make(map[string]int, len(c.images))
		for k, v := range c.images {
			s.images[k] = v
		}
		s.imagesGen = c.imagesGen
	}
}
