// This file holds where a DaemonSet's pods belong: the tolerations every
// daemon pod gets, the node a daemon pod is for (its matchFields
// metadata.name affinity), and whether a node should run (or may keep) a
// daemon pod, judged by the nodeSelector, the required node affinity and
// the node's taints as Kubernetes' DaemonSet controller judges them.
package daemonset

import (
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/placement"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// Taint keys of the node conditions (Kubernetes' well-known taints).
const (
	taintNotReady           = "node.kubernetes.io/not-ready"
	taintUnreachable        = "node.kubernetes.io/unreachable"
	taintDiskPressure       = "node.kubernetes.io/disk-pressure"
	taintMemoryPressure     = "node.kubernetes.io/memory-pressure"
	taintPIDPressure        = "node.kubernetes.io/pid-pressure"
	taintUnschedulable      = "node.kubernetes.io/unschedulable"
	taintNetworkUnavailable = "node.kubernetes.io/network-unavailable"
)

// addDaemonTolerations adds the tolerations Kubernetes gives every daemon
// pod (replacing an equal one the template has): not-ready and unreachable
// NoExecute without a time limit, so a daemon pod is never evicted from a
// failing node; disk, memory and PID pressure and unschedulable (cordon)
// NoSchedule; network-unavailable NoSchedule for host-network pods.
func addDaemonTolerations(spec *corev1.PodSpec) {
	add := func(key, effect string) {
		t := &corev1.Toleration{Key: key, Operator: "Exists", Effect: effect}
		for i, have := range spec.Tolerations {
			if have.GetKey() == key && have.GetOperator() == "Exists" && have.GetValue() == "" && have.GetEffect() == effect {
				spec.Tolerations[i] = t
				return
			}
		}
		spec.Tolerations = append(spec.Tolerations, t)
	}
	add(taintNotReady, "NoExecute")
	add(taintUnreachable, "NoExecute")
	add(taintDiskPressure, "NoSchedule")
	add(taintMemoryPressure, "NoSchedule")
	add(taintPIDPressure, "NoSchedule")
	add(taintUnschedulable, "NoSchedule")
	if spec.GetHostNetwork() {
		add(taintNetworkUnavailable, "NoSchedule")
	}
}

// pinToNode replaces the pod's required node affinity terms with one that
// selects only node (matchFields metadata.name In [node]), as Kubernetes
// places daemon pods through the scheduler since 1.12; preferred terms and
// the other affinities are kept.
func pinToNode(spec *corev1.PodSpec, node string) {
	term := &corev1.NodeSelectorTerm{MatchFields: []*corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: "In", Values: []string{node}}}}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []*corev1.NodeSelectorTerm{term}}
}

// targetNode is the node a daemon pod is for: its nodeName once bound,
// else the metadata.name its required affinity names ("" if none).
func targetNode(p *corev1.Pod) string {
	if n := p.GetSpec().GetNodeName(); n != "" {
		return n
	}
	for _, t := range p.GetSpec().GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution().GetNodeSelectorTerms() {
		for _, r := range t.GetMatchFields() {
			if r.GetKey() == "metadata.name" && r.GetOperator() == "In" && len(r.GetValues()) == 1 {
				return r.GetValues()[0]
			}
		}
	}
	return ""
}

// nodeTaints are the node's taints together with those Kubernetes' node
// lifecycle controller would have put on it for its state (kplane's puts
// only unreachable:NoExecute there; the scheduler reads the rest from the
// node's conditions and spec.unschedulable): not-ready or unreachable
// NoSchedule while Ready is False or Unknown, the pressure conditions,
// network-unavailable, and unschedulable for a cordoned node.
func nodeTaints(n *corev1.Node) []*corev1.Taint {
	taints := append([]*corev1.Taint(nil), n.GetSpec().GetTaints()...)
	has := func(key, effect string) bool {
		for _, t := range taints {
			if t.GetKey() == key && t.GetEffect() == effect {
				return true
			}
		}
		return false
	}
	add := func(key string) {
		if !has(key, "NoSchedule") {
			taints = append(taints, &corev1.Taint{Key: key, Effect: "NoSchedule"})
		}
	}
	for _, c := range n.GetStatus().GetConditions() {
		switch {
		case c.GetType() == "Ready" && c.GetStatus() == "False":
			add(taintNotReady)
		case c.GetType() == "Ready" && c.GetStatus() == "Unknown":
			add(taintUnreachable)
		case c.GetType() == "MemoryPressure" && c.GetStatus() == "True":
			add(taintMemoryPressure)
		case c.GetType() == "DiskPressure" && c.GetStatus() == "True":
			add(taintDiskPressure)
		case c.GetType() == "PIDPressure" && c.GetStatus() == "True":
			add(taintPIDPressure)
		case c.GetType() == "NetworkUnavailable" && c.GetStatus() == "True":
			add(taintNetworkUnavailable)
		}
	}
	if n.GetSpec().GetUnschedulable() {
		add(taintUnschedulable)
	}
	return taints
}

// shouldRun reports whether node should run a pod of ds (shouldRun) and
// whether a daemon pod already there may stay (shouldContinue): the
// template's nodeName (if set), nodeSelector and required node affinity
// must match; an untolerated NoSchedule or NoExecute taint stops new pods,
// and only an untolerated NoExecute one removes running pods.
func shouldRun(node *corev1.Node, ds *appsv1.DaemonSet) (run, shouldContinue bool) {
	tmpl := ds.GetSpec().GetTemplate().GetSpec()
	if n := tmpl.GetNodeName(); n != "" && n != node.GetMetadata().GetName() {
		return false, false
	}
	pod := &corev1.Pod{Spec: proto.Clone(tmpl).(*corev1.PodSpec)}
	if pod.Spec == nil {
		pod.Spec = &corev1.PodSpec{}
	}
	addDaemonTolerations(pod.Spec)
	if !placement.Matches(pod, node) {
		return false, false
	}
	run, shouldContinue = true, true
	for _, t := range nodeTaints(node) {
		if e := t.GetEffect(); (e == "NoSchedule" || e == "NoExecute") && !placement.TaintTolerated(pod.Spec.Tolerations, t) {
			run = false
			if e == "NoExecute" {
				shouldContinue = false
			}
		}
	}
	return run, shouldContinue
}
