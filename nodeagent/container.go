// This file turns a container spec into the Linux settings the runtime is
// given: its cgroup resources and its security context.

package nodeagent

import (
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

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

// linuxSecurityContext is what the runtime applies of a container's
// security context, the container's fields overriding the pod's: the user
// and groups it runs as, a read-only root filesystem, and no new
// privileges when privilege escalation is disallowed. The rest
// (capabilities, privileged, seccomp, SELinux, AppArmor, runAsNonRoot's
// check against the image) is not passed on yet: docs/design.md lists it.
func linuxSecurityContext(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) *runtimeapi.LinuxContainerSecurityContext {
	sc := &runtimeapi.LinuxContainerSecurityContext{}
	if pod != nil {
		if pod.RunAsUser != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: pod.GetRunAsUser()}
		}
		if pod.RunAsGroup != nil {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: pod.GetRunAsGroup()}
		}
		sc.SupplementalGroups = append(sc.SupplementalGroups, pod.GetSupplementalGroups()...)
		if pod.FsGroup != nil {
			sc.SupplementalGroups = append(sc.SupplementalGroups, pod.GetFsGroup())
		}
	}
	if c != nil {
		if c.RunAsUser != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: c.GetRunAsUser()}
		}
		if c.RunAsGroup != nil {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: c.GetRunAsGroup()}
		}
		sc.ReadonlyRootfs = c.GetReadOnlyRootFilesystem()
		sc.NoNewPrivs = c.AllowPrivilegeEscalation != nil && !c.GetAllowPrivilegeEscalation()
	}
	return sc
}
