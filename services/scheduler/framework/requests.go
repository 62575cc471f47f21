// This file holds how a pod's resource requests are computed: as
// kube-scheduler does, through k8s.io/component-helpers' PodRequests (init
// and sidecar containers, overhead, resized containers' status), on a
// k8s.io/api copy of only the fields that function reads.
package framework

import (
	"strings"

	kubecorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// IsScalarResourceName reports whether name is accounted in
// Resource.Scalar: an extended resource (a domain-prefixed name outside
// kubernetes.io, such as example.com/gpu), hugepages-*, another
// kubernetes.io/ resource, or attachable-volumes-*. cpu, memory,
// ephemeral-storage and pods have fields of their own.
func IsScalarResourceName(name string) bool {
	return IsExtendedResourceName(name) || strings.HasPrefix(name, "hugepages-") ||
		strings.Contains(name, "kubernetes.io/") || strings.HasPrefix(name, "attachable-volumes-")
}

// IsExtendedResourceName reports whether name is an extended resource: not
// native (it has a domain, and the domain is not kubernetes.io) and usable
// as a quota name with the "requests." prefix.
func IsExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, "kubernetes.io/") || strings.HasPrefix(name, "requests.") {
		return false
	}
	return len(validation.IsQualifiedName("requests."+name)) == 0
}

// podRequests returns what p requests, and the same with the non-zero
// defaults (of which only cpu and memory are set).
func podRequests(p *corev1.Pod) (req, nonZero Resource) {
	if !plainContainers(p) {
		return libraryPodRequests(p)
	}
	// Only app containers, nothing resized, no overhead: PodRequests' rules
	// come down to a sum over the containers, done here without the copy
	// into k8s.io/api types that costs ten times as much (this runs on every
	// pod event). TestPlainPodRequests checks the two agree.
	for _, c := range p.GetSpec().GetContainers() {
		var r Resource
		cpuSet, memSet := false, false
		for k, v := range c.GetResources().GetRequests() {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				continue
			}
			r.set(k, q)
			cpuSet = cpuSet || k == "cpu"
			memSet = memSet || k == "memory"
		}
		req.Add(r)
		nz := Resource{MilliCPU: r.MilliCPU, Memory: r.Memory}
		if !cpuSet {
			nz.MilliCPU = DefaultMilliCPURequest
		}
		if !memSet {
			nz.Memory = DefaultMemoryRequest
		}
		nonZero.Add(nz)
	}
	return req, nonZero
}

// plainContainers reports whether p has only app containers, no overhead
// and no container status reporting resources.
func plainContainers(p *corev1.Pod) bool {
	if len(p.GetSpec().GetInitContainers()) > 0 || len(p.GetSpec().GetOverhead()) > 0 {
		return false
	}
	for _, cs := range p.GetStatus().GetContainerStatuses() {
		if cs.GetResources() != nil {
			return false
		}
	}
	return true
}

// libraryPodRequests is podRequests through PodRequests. The options are
// kube-scheduler v1.33's: resized containers count by what their status
// reports (InPlacePodVerticalScaling is on by default), pod-level
// resources are not read (PodLevelResources is off by default).
func libraryPodRequests(p *corev1.Pod) (req, nonZero Resource) {
	kp := requestFields(p)
	opts := resourcehelper.PodResourcesOptions{UseStatusResources: true, SkipPodLevelResources: true}
	req = fromResourceList(resourcehelper.PodRequests(kp, opts))
	// For scoring, every container that requests no cpu or no memory
	// counts Kubernetes' defaults for it.
	opts.NonMissingContainerRequests = kubecorev1.ResourceList{
		kubecorev1.ResourceCPU:    *resource.NewMilliQuantity(DefaultMilliCPURequest, resource.DecimalSI),
		kubecorev1.ResourceMemory: *resource.NewQuantity(DefaultMemoryRequest, resource.BinarySI),
	}
	nz := resourcehelper.PodRequests(kp, opts)
	cpu, mem := nz[kubecorev1.ResourceCPU], nz[kubecorev1.ResourceMemory]
	nonZero = Resource{MilliCPU: cpu.MilliValue(), Memory: mem.Value()}
	return req, nonZero
}

// requestFields copies the fields PodRequests reads: containers' names,
// requests and restart policies, the overhead, and the container statuses
// and resize condition that resized containers are counted by.
func requestFields(p *corev1.Pod) *kubecorev1.Pod {
	spec := p.GetSpec()
	kp := &kubecorev1.Pod{}
	kp.Spec.Containers = make([]kubecorev1.Container, len(spec.GetContainers()))
	for i, c := range spec.GetContainers() {
		kp.Spec.Containers[i] = kubecorev1.Container{Name: c.GetName(), Resources: kubecorev1.ResourceRequirements{Requests: kubeList(c.GetResources().GetRequests())}}
	}
	if n := len(spec.GetInitContainers()); n > 0 {
		kp.Spec.InitContainers = make([]kubecorev1.Container, n)
		for i, c := range spec.GetInitContainers() {
			kc := kubecorev1.Container{Name: c.GetName(), Resources: kubecorev1.ResourceRequirements{Requests: kubeList(c.GetResources().GetRequests())}}
			if c.RestartPolicy != nil {
				rp := kubecorev1.ContainerRestartPolicy(c.GetRestartPolicy())
				kc.RestartPolicy = &rp
			}
			kp.Spec.InitContainers[i] = kc
		}
	}
	kp.Spec.Overhead = kubeList(spec.GetOverhead())
	st := p.GetStatus()
	kp.Status.ContainerStatuses = kubeStatuses(st.GetContainerStatuses())
	kp.Status.InitContainerStatuses = kubeStatuses(st.GetInitContainerStatuses())
	for _, c := range st.GetConditions() {
		if c.GetType() == string(kubecorev1.PodResizePending) {
			kp.Status.Conditions = append(kp.Status.Conditions, kubecorev1.PodCondition{Type: kubecorev1.PodResizePending, Reason: c.GetReason()})
		}
	}
	return kp
}

// kubeStatuses copies the statuses that report resources (the others do
// not change what is counted).
func kubeStatuses(in []*corev1.ContainerStatus) []kubecorev1.ContainerStatus {
	var out []kubecorev1.ContainerStatus
	for _, cs := range in {
		if cs.GetResources() == nil {
			continue
		}
		out = append(out, kubecorev1.ContainerStatus{
			Name:               cs.GetName(),
			AllocatedResources: kubeList(cs.GetAllocatedResources()),
			Resources:          &kubecorev1.ResourceRequirements{Requests: kubeList(cs.GetResources().GetRequests())},
		})
	}
	return out
}

// kubeList parses a resource map; unparsable quantities are left out (the
// API service validates them).
func kubeList(m map[string]string) kubecorev1.ResourceList {
	if len(m) == 0 {
		return nil
	}
	out := make(kubecorev1.ResourceList, len(m))
	for k, v := range m {
		if q, err := resource.ParseQuantity(v); err == nil {
			out[kubecorev1.ResourceName(k)] = q
		}
	}
	return out
}

// fromResourceList turns a parsed list into a Resource.
func fromResourceList(l kubecorev1.ResourceList) Resource {
	var r Resource
	for k, q := range l {
		r.set(string(k), q)
	}
	return r
}
