package nodeagent

import (
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// containerEnv is a container's environment: plain values, and fieldRef
// values from the pod (metadata.name, metadata.namespace, metadata.uid,
// spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP,
// metadata.labels['k'], metadata.annotations['k']). Variables from config
// maps, secrets and resource fields are not supported yet and are left out.
func containerEnv(pod *corev1.Pod, c *corev1.Container, podIP, hostIP string) []*runtimeapi.KeyValue {
	var out []*runtimeapi.KeyValue
	m := pod.GetMetadata()
	for _, e := range c.GetEnv() {
		v := e.GetValue()
		if src := e.GetValueFrom(); src != nil {
			ref := src.GetFieldRef()
			if ref == nil {
				continue
			}
			switch p := ref.GetFieldPath(); {
			case p == "metadata.name":
				v = m.GetName()
			case p == "metadata.namespace":
				v = m.GetNamespace()
			case p == "metadata.uid":
				v = m.GetUid()
			case p == "spec.nodeName":
				v = pod.GetSpec().GetNodeName()
			case p == "spec.serviceAccountName":
				v = pod.GetSpec().GetServiceAccountName()
			case p == "status.podIP":
				v = podIP
			case p == "status.hostIP":
				v = hostIP
			case len(p) > len("metadata.labels['']") && p[:len("metadata.labels['")] == "metadata.labels['":
				v = m.GetLabels()[p[len("metadata.labels['"):len(p)-2]]
			case len(p) > len("metadata.annotations['']") && p[:len("metadata.annotations['")] == "metadata.annotations['":
				v = m.GetAnnotations()[p[len("metadata.annotations['"):len(p)-2]]
			default:
				continue
			}
		}
		out = append(out, &runtimeapi.KeyValue{Key: e.GetName(), Value: v})
	}
	return out
}

// linuxResources turns requests and limits into the cgroup settings the
// kubelet gives a runtime: cpu shares from the cpu request (or limit),
// a CFS quota from the cpu limit, and the memory limit. Unparsable
// quantities are ignored (validation rejects them before).
func linuxResources(r *corev1.ResourceRequirements) *runtimeapi.LinuxContainerResources {
	const period = 100000
	out := &runtimeapi.LinuxContainerResources{CpuShares: 2}
	milli := func(m map[string]string, k string) (int64, bool) {
		q, err := resource.ParseQuantity(m[k])
		if m[k] == "" || err != nil {
			return 0, false
		}
		return q.MilliValue(), true
	}
	cpuReq, okReq := milli(r.GetRequests(), "cpu")
	cpuLim, okLim := milli(r.GetLimits(), "cpu")
	if !okReq && okLim {
		cpuReq, okReq = cpuLim, true
	}
	if okReq {
		out.CpuShares = max(2, cpuReq*1024/1000)
	}
	if okLim {
		out.CpuPeriod = period
		out.CpuQuota = max(1000, cpuLim*period/1000)
	}
	if s := r.GetLimits()["memory"]; s != "" {
		if q, err := resource.ParseQuantity(s); err == nil {
			out.MemoryLimitInBytes = q.Value()
		}
	}
	return out
}
