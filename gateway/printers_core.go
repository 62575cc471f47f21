// This file holds the Table rows of the core kinds whose columns take
// the most work, as kubectl prints them: pods (ready counts, restarts,
// status reasons, init progress), nodes, Services, Endpoints and Events.

package gateway

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
)

// printPod prints a pod's READY, STATUS and RESTARTS as kubectl users know
// them: init containers' progress (Init:1/3, Init:CrashLoopBackOff,
// Init:Error, Init:ExitCode:2, Init:Signal:9), the last container's
// waiting or terminated reason, NotReady for a pod whose containers
// completed but one still runs without the pod being Ready, Terminating,
// and the time since the last restart ("3 (5m ago)"). Restartable init
// containers (sidecars) count as containers once started.
func printPod(pod *corev1.Pod, now time.Time) printedRow {
	var restarts, sidecarRestarts int
	var lastRestart, lastSidecarRestart time.Time
	total, ready := len(pod.Spec.Containers), 0
	reason := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			reason = corev1.PodReasonSchedulingGated
		}
	}
	var conds []rowCondition
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		conds = []rowCondition{{Type: "Completed", Status: "True", Reason: "Succeeded", Message: "The pod has completed successfully."}}
	case corev1.PodFailed:
		conds = []rowCondition{{Type: "Completed", Status: "True", Reason: "Failed", Message: "The pod failed."}}
	}
	sidecar := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecar[c.Name] = true
			total++
		}
	}
	later := func(cur time.Time, st corev1.ContainerState) time.Time {
		if st.Terminated != nil && st.Terminated.FinishedAt.After(cur) {
			return st.Terminated.FinishedAt.Time
		}
		return cur
	}
	initializing := false
	for i, cs := range pod.Status.InitContainerStatuses {
		restarts += int(cs.RestartCount)
		lastRestart = later(lastRestart, cs.LastTerminationState)
		if sidecar[cs.Name] {
			sidecarRestarts += int(cs.RestartCount)
			lastSidecarRestart = later(lastSidecarRestart, cs.LastTerminationState)
		}
		t, w := cs.State.Terminated, cs.State.Waiting
		switch {
		case t != nil && t.ExitCode == 0:
			continue
		case sidecar[cs.Name] && cs.Started != nil && *cs.Started:
			if cs.Ready {
				ready++
			}
			continue
		case t != nil:
			switch {
			case t.Reason != "":
				reason = "Init:" + t.Reason
			case t.Signal != 0:
				reason = fmt.Sprintf("Init:Signal:%d", t.Signal)
			default:
				reason = fmt.Sprintf("Init:ExitCode:%d", t.ExitCode)
			}
		case w != nil && w.Reason != "" && w.Reason != "PodInitializing":
			reason = "Init:" + w.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		initializing = true
		break
	}
	if !initializing || podInitialized(pod) {
		restarts, lastRestart = sidecarRestarts, lastSidecarRestart
		running := false
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			cs := pod.Status.ContainerStatuses[i]
			restarts += int(cs.RestartCount)
			lastRestart = later(lastRestart, cs.LastTerminationState)
			t, w := cs.State.Terminated, cs.State.Waiting
			switch {
			case w != nil && w.Reason != "":
				reason = w.Reason
			case t != nil && t.Reason != "":
				reason = t.Reason
			case t != nil && t.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", t.Signal)
			case t != nil:
				reason = fmt.Sprintf("ExitCode:%d", t.ExitCode)
			case cs.Ready && cs.State.Running != nil:
				running = true
				ready++
			}
		}
		if reason == "Completed" && running {
			reason = "NotReady"
			if podCondition(pod, corev1.PodReady) {
				reason = "Running"
			}
		}
	}
	if pod.DeletionTimestamp != nil {
		switch {
		case pod.Status.Reason == "NodeLost":
			reason = "Unknown"
		case pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed:
			reason = "Terminating"
		}
	}
	restartCell := strconv.Itoa(restarts)
	if restarts != 0 && !lastRestart.IsZero() {
		restartCell = fmt.Sprintf("%d (%s ago)", restarts, sinceTime(lastRestart, now))
	}
	ip := ""
	if len(pod.Status.PodIPs) > 0 {
		ip = pod.Status.PodIPs[0].IP
	} else {
		ip = pod.Status.PodIP // kplane may write podIP alone
	}
	gates := "<none>"
	if n := len(pod.Spec.ReadinessGates); n > 0 {
		ok := 0
		for _, g := range pod.Spec.ReadinessGates {
			if i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == g.ConditionType }); i >= 0 &&
				pod.Status.Conditions[i].Status == corev1.ConditionTrue {
				ok++
			}
		}
		gates = fmt.Sprintf("%d/%d", ok, n)
	}
	return printedRow{conditions: conds, cells: []any{pod.Name, fmt.Sprintf("%d/%d", ready, total), reason, restartCell,
		sinceTime(pod.CreationTimestamp.Time, now), orNone(ip), orNone(pod.Spec.NodeName), orNone(pod.Status.NominatedNodeName), gates}}
}

// podInitialized reports whether the pod's Initialized condition is True
// (the first Initialized condition decides).
func podInitialized(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodInitialized {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// nodeStatus is Ready, NotReady or Unknown (no Ready condition), with
// SchedulingDisabled for a cordoned node.
func nodeStatus(n *corev1.Node) string {
	status := []string{"Unknown"}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			status = []string{"Ready"}
		} else {
			status = []string{"NotReady"}
		}
	}
	if n.Spec.Unschedulable {
		status = append(status, "SchedulingDisabled")
	}
	return strings.Join(status, ",")
}

// nodeRoles are the node-role.kubernetes.io/<role> labels' roles and the
// kubernetes.io/role label's value, sorted, without duplicates.
func nodeRoles(n *corev1.Node) []string {
	var roles []string
	for k, v := range n.Labels {
		if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
			roles = append(roles, r)
		} else if k == "kubernetes.io/role" && v != "" {
			roles = append(roles, v)
		}
	}
	slices.Sort(roles)
	return slices.Compact(roles)
}

func nodeAddress(n *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return "<none>"
}

// serviceClusterIP is the first cluster IP (spec.clusterIP when kplane
// wrote no clusterIPs), or <none>.
func serviceClusterIP(s *corev1.Service) string {
	if len(s.Spec.ClusterIPs) > 0 {
		return s.Spec.ClusterIPs[0]
	}
	return orNone(s.Spec.ClusterIP)
}

// serviceExternalIP is what EXTERNAL-IP shows per service type: the
// external IPs, a load balancer's ingress points (sorted, deduplicated)
// then external IPs or <pending>, an ExternalName's name.
func serviceExternalIP(s *corev1.Service) string {
	switch s.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		if len(s.Spec.ExternalIPs) > 0 {
			return strings.Join(s.Spec.ExternalIPs, ",")
		}
		return "<none>"
	case corev1.ServiceTypeLoadBalancer:
		var lb []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			switch {
			case in.IP != "":
				lb = append(lb, in.IP)
			case in.Hostname != "":
				lb = append(lb, in.Hostname)
			}
		}
		slices.Sort(lb)
		lb = slices.Compact(lb)
		if all := append(lb, s.Spec.ExternalIPs...); len(all) > 0 {
			return strings.Join(all, ",")
		}
		return "<pending>"
	case corev1.ServiceTypeExternalName:
		return s.Spec.ExternalName
	}
	return "<unknown>"
}

func servicePorts(ports []corev1.ServicePort) string {
	out := make([]string, len(ports))
	for i, p := range ports {
		if p.NodePort > 0 {
			out[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
		} else {
			out[i] = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		}
	}
	return strings.Join(out, ",")
}

// endpointsString lists up to three address:port pairs (addresses alone
// for a subset without ports) and "+ N more..." for the rest.
func endpointsString(ep *corev1.Endpoints) string {
	if len(ep.Subsets) == 0 {
		return "<none>"
	}
	const limit = 3
	var list []string
	count := 0
	add := func(s string) {
		count++
		if len(list) < limit {
			list = append(list, s)
		}
	}
	for _, ss := range ep.Subsets {
		if len(ss.Ports) == 0 {
			for _, a := range ss.Addresses {
				add(a.IP)
			}
			continue
		}
		for _, p := range ss.Ports {
			for _, a := range ss.Addresses {
				add(net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
			}
		}
	}
	s := strings.Join(list, ",")
	if count > limit {
		s += fmt.Sprintf(" + %d more...", count-limit)
	}
	return s
}

// printEvent prints LAST SEEN (a series' last observation, else the last
// or first timestamp, else the event time), the object as kind/name, the
// source (component or reporting controller, with host or reporting
// instance) and COUNT (1 for a singleton event of the new API).
func printEvent(e *corev1.Event, now time.Time) printedRow {
	first := sinceTime(e.FirstTimestamp.Time, now)
	if e.FirstTimestamp.IsZero() {
		first = sinceTime(e.EventTime.Time, now)
	}
	last := sinceTime(e.LastTimestamp.Time, now)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last = sinceTime(e.Series.LastObservedTime.Time, now)
		count = e.Series.Count
	} else if count == 0 {
		count = 1
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	component, host := e.Source.Component, e.Source.Host
	if component == "" {
		component = e.ReportingController
	}
	if host == "" {
		host = e.ReportingInstance
	}
	source := component
	if host != "" {
		source += ", " + host
	}
	return row(last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source, strings.TrimSpace(e.Message), first, int64(count), e.Name)
}

// printEventsV1 prints an events.k8s.io/v1 Event as kube-apiserver does:
// converted to the one Event type both groups share, then as printEvent.
func printEventsV1(e *eventsv1.Event, now time.Time) printedRow {
	c := &corev1.Event{
		ObjectMeta: e.ObjectMeta, InvolvedObject: e.Regarding, Related: e.Related,
		Reason: e.Reason, Message: e.Note, Type: e.Type, Action: e.Action,
		Source: e.DeprecatedSource, FirstTimestamp: e.DeprecatedFirstTimestamp, LastTimestamp: e.DeprecatedLastTimestamp,
		Count: e.DeprecatedCount, EventTime: e.EventTime,
		ReportingController: e.ReportingController, ReportingInstance: e.ReportingInstance,
	}
	if e.Series != nil {
		c.Series = &corev1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	return printEvent(c, now)
}
