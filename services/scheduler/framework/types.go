// This file holds what plugins read: a pod's scheduling-relevant facts
// computed once (PodInfo), a node with the pods on it (NodeInfo), resource
// arithmetic, and the per-attempt CycleState.
package framework

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// Resource is an amount of the resources the scheduler accounts for.
type Resource struct {
	MilliCPU         int64
	Memory           int64
	EphemeralStorage int64
	Pods             int64
	// Scalar holds the other resources by name (extended resources such as
	// example.com/gpu, hugepages-*), in units; nil when there are none.
	Scalar map[string]int64
}

// Add adds r2 to r.
func (r *Resource) Add(r2 Resource) {
	r.MilliCPU += r2.MilliCPU
	r.Memory += r2.Memory
	r.EphemeralStorage += r2.EphemeralStorage
	r.Pods += r2.Pods
	if len(r2.Scalar) > 0 && r.Scalar == nil {
		r.Scalar = make(map[string]int64, len(r2.Scalar))
	}
	for k, v := range r2.Scalar {
		r.Scalar[k] += v
	}
}

// Sub subtracts r2 from r.
func (r *Resource) Sub(r2 Resource) {
	r.MilliCPU -= r2.MilliCPU
	r.Memory -= r2.Memory
	r.EphemeralStorage -= r2.EphemeralStorage
	r.Pods -= r2.Pods
	if len(r2.Scalar) > 0 && r.Scalar == nil {
		r.Scalar = make(map[string]int64, len(r2.Scalar))
	}
	for k, v := range r2.Scalar {
		if r.Scalar[k] -= v; r.Scalar[k] == 0 {
			delete(r.Scalar, k)
		}
	}
}

// Clone returns a copy of r that shares nothing with it.
func (r Resource) Clone() Resource {
	if r.Scalar != nil {
		r.Scalar = maps.Clone(r.Scalar)
	}
	return r
}

// set records quantity q of the resource called name; names the scheduler
// does not account for are ignored.
func (r *Resource) set(name string, q resource.Quantity) {
	switch name {
	case "cpu":
		r.MilliCPU = q.MilliValue()
	case "memory":
		r.Memory = q.Value()
	case "ephemeral-storage":
		r.EphemeralStorage = q.Value()
	case "pods":
		r.Pods = q.Value()
	default:
		if IsScalarResourceName(name) {
			if r.Scalar == nil {
				r.Scalar = map[string]int64{}
			}
			r.Scalar[name] = q.Value()
		}
	}
}

// Defaults Kubernetes assumes, for scoring only, for a container that
// requests nothing (so that zero-request pods still spread).
const (
	DefaultMilliCPURequest int64 = 100
	DefaultMemoryRequest   int64 = 200 * 1024 * 1024
)

// ResourceList parses a Kubernetes resource map (quantities as strings).
// Unparsable quantities count as zero; the API service validates them.
func ResourceList(m map[string]string) Resource {
	var r Resource
	for k, v := range m {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			continue
		}
		r.set(k, q)
	}
	return r
}

// HostPort is one hostPort a pod asks for.
type HostPort struct {
	IP       string
	Protocol string
	Port     int32
}

// PodInfo is a pod with the facts the scheduler needs computed once.
// The Pod is shared with the informer's cache and must not be modified.
type PodInfo struct {
	Pod *corev1.Pod
	Key string // namespace/name
	UID string
	// Requests is what the pod needs on a node, as Kubernetes computes it:
	// its containers, the largest need during init (sidecars included),
	// and its overhead; Pods is 1.
	Requests Resource
	// NonZeroRequests is Requests with Kubernetes' scoring defaults for
	// containers that request no cpu or memory.
	NonZeroRequests Resource
	HostPorts       []HostPort
	Priority        int32
	// OwnerUID is the uid of the controller owner (e.g. the ReplicaSet), or "".
	OwnerUID string
	Images   []string
	// The pod's inter-pod affinity and anti-affinity terms, parsed once
	// (nil when it has none); AffinityErr is why they could not be.
	RequiredAffinityTerms      []AffinityTerm
	RequiredAntiAffinityTerms  []AffinityTerm
	PreferredAffinityTerms     []WeightedAffinityTerm
	PreferredAntiAffinityTerms []WeightedAffinityTerm
	AffinityErr                error

	// Queue bookkeeping, owned by the scheduling queue.
	Timestamp        time.Time // when it entered the active queue
	InitialTimestamp time.Time // first time it was queued
	Attempts         int
	// UnschedulablePlugins are the plugins that rejected it last time.
	UnschedulablePlugins map[string]bool
}

// NewPodInfo computes p's facts.
func NewPodInfo(p *corev1.Pod) *PodInfo {
	pi := &PodInfo{Pod: p, Key: p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName(), UID: p.GetMetadata().GetUid()}
	spec := p.GetSpec()
	pi.Requests, pi.NonZeroRequests = podRequests(p)
	pi.Requests.Pods = 1
	pi.NonZeroRequests.Pods = 1
	for _, c := range spec.GetContainers() {
		for _, port := range c.GetPorts() {
			if port.GetHostPort() > 0 {
				proto := port.GetProtocol()
				if proto == "" {
					proto = "TCP"
				}
				ip := port.GetHostIp()
				if ip == "" {
					ip = "0.0.0.0"
				}
				pi.HostPorts = append(pi.HostPorts, HostPort{IP: ip, Protocol: proto, Port: port.GetHostPort()})
			}
		}
		pi.Images = append(pi.Images, NormalizeImage(c.GetImage()))
	}
	pi.Priority = spec.GetPriority()
	if aff, err := parseAffinity(p); err != nil {
		pi.AffinityErr = err
	} else {
		pi.RequiredAffinityTerms, pi.RequiredAntiAffinityTerms = aff.RequiredAffinityTerms, aff.RequiredAntiAffinityTerms
		pi.PreferredAffinityTerms, pi.PreferredAntiAffinityTerms = aff.PreferredAffinityTerms, aff.PreferredAntiAffinityTerms
	}
	for _, o := range p.GetMetadata().GetOwnerReferences() {
		if o.GetController() {
			pi.OwnerUID = o.GetUid()
		}
	}
	return pi
}

// HasAffinity reports whether pi has any inter-pod affinity or
// anti-affinity term.
func (pi *PodInfo) HasAffinity() bool {
	return len(pi.RequiredAffinityTerms)+len(pi.RequiredAntiAffinityTerms)+len(pi.PreferredAffinityTerms)+len(pi.PreferredAntiAffinityTerms) > 0
}

// NormalizeImage turns a reference into its full form, as nodes report
// images: "nginx" → "docker.io/library/nginx:latest".
func NormalizeImage(ref string) string {
	if ref == "" {
		return ""
	}
	name := ref
	first, rest, hasSlash := strings.Cut(name, "/")
	switch {
	case !hasSlash:
		name = "docker.io/library/" + name
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		name = "docker.io/" + first + "/" + rest
	}
	last := name[strings.LastIndex(name, "/")+1:]
	if !strings.Contains(last, ":") && !strings.Contains(last, "@") {
		name += ":latest"
	}
	return name
}

// NodeInfo is a node and what the scheduler knows is placed on it: bound
// pods and pods assumed by this scheduler whose binds are in flight.
// A NodeInfo in a snapshot is read-only.
type NodeInfo struct {
	Node        *corev1.Node
	Name        string
	Allocatable Resource
	// Requested sums the Requests of Pods; NonZeroRequested their NonZeroRequests.
	Requested        Resource
	NonZeroRequested Resource
	Pods             map[string]*PodInfo // by Key
	UsedPorts        map[HostPort]int
	// ImageSizes maps every normalized image name the node reports to its size.
	ImageSizes map[string]int64
	// OwnerCounts counts the pods on the node by controller owner uid.
	OwnerCounts map[string]int
	// PodsWithAffinity are the pods of Pods with inter-pod affinity or
	// anti-affinity terms, PodsWithRequiredAntiAffinity those with required
	// anti-affinity terms: the few pods InterPodAffinity must look at for a
	// pod that has no terms of its own.
	PodsWithAffinity             []*PodInfo
	PodsWithRequiredAntiAffinity []*PodInfo
	// Facts copied from Node by SetNode, so filters over thousands of
	// nodes read one small struct instead of chasing the node's messages.
	Labels        map[string]string
	Taints        []*corev1.Taint
	Unschedulable bool
	// Ready is the status of the Ready condition ("True", "False",
	// "Unknown"), or "" if the node reports none.
	Ready string
	// Generation increases on every change (the cache uses it to refresh snapshots).
	Generation int64
}

// NewNodeInfo returns an empty NodeInfo named name.
func NewNodeInfo(name string) *NodeInfo {
	return &NodeInfo{Name: name, Pods: map[string]*PodInfo{}, UsedPorts: map[HostPort]int{}, ImageSizes: map[string]int64{}, OwnerCounts: map[string]int{}}
}

// SetNode sets the node object and what is derived from it.
func (n *NodeInfo) SetNode(node *corev1.Node) {
	n.Node = node
	n.Name = node.GetMetadata().GetName()
	n.Allocatable = ResourceList(node.GetStatus().GetAllocatable())
	if len(node.GetStatus().GetAllocatable()) == 0 {
		n.Allocatable = ResourceList(node.GetStatus().GetCapacity())
	}
	n.Labels = node.GetMetadata().GetLabels()
	n.Taints = node.GetSpec().GetTaints()
	n.Unschedulable = node.GetSpec().GetUnschedulable()
	n.Ready = ""
	for _, c := range node.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			n.Ready = c.GetStatus()
		}
	}
	n.ImageSizes = map[string]int64{}
	for _, img := range node.GetStatus().GetImages() {
		for _, name := range img.GetNames() {
			n.ImageSizes[NormalizeImage(name)] = img.GetSizeBytes()
		}
	}
}

// AddPod accounts pi on the node.
func (n *NodeInfo) AddPod(pi *PodInfo) {
	if _, ok := n.Pods[pi.Key]; ok {
		n.RemovePod(pi.Key)
	}
	n.Pods[pi.Key] = pi
	n.Requested.Add(pi.Requests)
	n.NonZeroRequested.Add(pi.NonZeroRequests)
	for _, hp := range pi.HostPorts {
		n.UsedPorts[hp]++
	}
	if pi.OwnerUID != "" {
		n.OwnerCounts[pi.OwnerUID]++
	}
	if pi.HasAffinity() {
		n.PodsWithAffinity = append(n.PodsWithAffinity, pi)
		if len(pi.RequiredAntiAffinityTerms) > 0 {
			n.PodsWithRequiredAntiAffinity = append(n.PodsWithRequiredAntiAffinity, pi)
		}
	}
}

// withoutPod returns pods without the one with key (a new slice: clones
// share the old one).
func withoutPod(pods []*PodInfo, key string) []*PodInfo {
	for i, p := range pods {
		if p.Key == key {
			out := make([]*PodInfo, 0, len(pods)-1)
			return append(append(out, pods[:i]...), pods[i+1:]...)
		}
	}
	return pods
}

// RemovePod removes the pod with key, reporting whether it was there.
func (n *NodeInfo) RemovePod(key string) bool {
	pi, ok := n.Pods[key]
	if !ok {
		return false
	}
	delete(n.Pods, key)
	n.Requested.Sub(pi.Requests)
	n.NonZeroRequested.Sub(pi.NonZeroRequests)
	for _, hp := range pi.HostPorts {
		if n.UsedPorts[hp]--; n.UsedPorts[hp] <= 0 {
			delete(n.UsedPorts, hp)
		}
	}
	if pi.OwnerUID != "" {
		if n.OwnerCounts[pi.OwnerUID]--; n.OwnerCounts[pi.OwnerUID] <= 0 {
			delete(n.OwnerCounts, pi.OwnerUID)
		}
	}
	if pi.HasAffinity() {
		n.PodsWithAffinity = withoutPod(n.PodsWithAffinity, key)
		n.PodsWithRequiredAntiAffinity = withoutPod(n.PodsWithRequiredAntiAffinity, key)
	}
	return true
}

// Clone copies n deeply enough that changes to the clone's maps do not
// show in n (pods and the node object are shared, being read-only).
func (n *NodeInfo) Clone() *NodeInfo {
	c := *n
	c.Requested = n.Requested.Clone()
	c.Pods = make(map[string]*PodInfo, len(n.Pods))
	for k, v := range n.Pods {
		c.Pods[k] = v
	}
	c.UsedPorts = make(map[HostPort]int, len(n.UsedPorts))
	for k, v := range n.UsedPorts {
		c.UsedPorts[k] = v
	}
	c.OwnerCounts = make(map[string]int, len(n.OwnerCounts))
	for k, v := range n.OwnerCounts {
		c.OwnerCounts[k] = v
	}
	// The pod lists are shared: RemovePod builds a new slice rather than
	// changing one in place, and clipping makes the clone's AddPod
	// reallocate rather than write into n's backing array.
	c.PodsWithAffinity = slices.Clip(n.PodsWithAffinity)
	c.PodsWithRequiredAntiAffinity = slices.Clip(n.PodsWithRequiredAntiAffinity)
	// ImageSizes is replaced, never modified, by SetNode: share it.
	return &c
}

// CycleState is per-attempt scratch space plugins share between their
// extension points (PreFilter computes, Filter reads). Safe for
// concurrent reads once written.
type CycleState struct {
	mu sync.RWMutex
	m  map[string]any
	// SkipFilter and SkipScore are plugins whose PreFilter/PreScore said Skip.
	SkipFilter map[string]bool
	SkipScore  map[string]bool
	// Nominated are, by node name, the pods nominated to the node (room
	// made for them by preemption) whose priority is at least this pod's,
	// this pod excepted: the filters count them as if placed there, so that
	// the room is not taken by a pod that matters less. Set before the
	// filters run; nil when there are none.
	Nominated map[string][]*PodInfo
}

// NewCycleState returns an empty state.
func NewCycleState() *CycleState {
	return &CycleState{m: map[string]any{}, SkipFilter: map[string]bool{}, SkipScore: map[string]bool{}}
}

// Write stores v under key.
func (c *CycleState) Write(key string, v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = v
}

// Read returns what is stored under key.
func (c *CycleState) Read(key string) (any, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.m[key]
	return v, ok
}
