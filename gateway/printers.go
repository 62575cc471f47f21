// This file holds the cells of the server-side Table rows kube-apiserver
// prints for each kind the gateway serves (its printers in
// k8s.io/kubernetes/pkg/printers/internalversion), computed on the
// object decoded into its k8s.io/api Go type. Every column is printed, the
// wide ones (priority 1) included, as kube-apiserver does; kubectl hides
// the wide ones unless -o wide.
package gateway

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes/scheme"
)

// rowCondition is a Table row's condition (a finished pod's Completed).
type rowCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// printedRow is one object's cells and row conditions.
type printedRow struct {
	cells      []any
	conditions []rowCondition
}

// printObject decodes a Kubernetes JSON object of the kind gvk into its
// k8s.io/api type and prints its row as kube-apiserver does at time now.
// Kinds without a printer of their own get kube-apiserver's default row:
// the name and the creation time.
func printObject(gvk schema.GroupVersionKind, o map[string]any, now time.Time) (printedRow, error) {
	typed, err := scheme.Scheme.New(gvk)
	if err != nil {
		return defaultRow(o), nil
	}
	b, err := json.Marshal(o)
	if err != nil {
		return printedRow{}, fmt.Errorf("gateway: table of %s: %w", gvk.Kind, err)
	}
	if err := json.Unmarshal(b, typed); err != nil {
		// kplane may write a MicroTime (an event's eventTime, a lease's
		// renewTime) with other than Kubernetes' six fractional digits,
		// which its Go type refuses: print with every timestamp in that
		// form (Time fields take it too). Whatever else the Go type
		// refuses leaves its field empty in the row: a Table is for
		// reading, and one odd field must not fail the whole list.
		b, merr := json.Marshal(microTimes(o))
		if merr != nil {
			return printedRow{}, fmt.Errorf("gateway: table of %s: %w", gvk.Kind, merr)
		}
		if typed, err = scheme.Scheme.New(gvk); err != nil {
			return printedRow{}, fmt.Errorf("gateway: table of %s: %w", gvk.Kind, err)
		}
		_ = json.Unmarshal(b, typed)
	}
	since := func(t metav1.Time) string { return sinceTime(t.Time, now) }
	switch obj := typed.(type) {
	case *corev1.Pod:
		return printPod(obj, now), nil
	case *corev1.Node:
		return row(obj.Name, nodeStatus(obj), orNone(strings.Join(nodeRoles(obj), ",")), since(obj.CreationTimestamp),
			obj.Status.NodeInfo.KubeletVersion, nodeAddress(obj, corev1.NodeInternalIP), nodeAddress(obj, corev1.NodeExternalIP),
			orUnknown(obj.Status.NodeInfo.OSImage), orUnknown(obj.Status.NodeInfo.KernelVersion), orUnknown(obj.Status.NodeInfo.ContainerRuntimeVersion)), nil
	case *corev1.Namespace:
		return row(obj.Name, string(obj.Status.Phase), since(obj.CreationTimestamp)), nil
	case *corev1.Event:
		return printEvent(obj, now), nil
	case *corev1.Service:
		return row(obj.Name, string(obj.Spec.Type), serviceClusterIP(obj), serviceExternalIP(obj), orNone(servicePorts(obj.Spec.Ports)),
			since(obj.CreationTimestamp), orNone(labels.FormatLabels(obj.Spec.Selector))), nil
	case *corev1.Endpoints:
		return row(obj.Name, endpointsString(obj), since(obj.CreationTimestamp)), nil
	case *corev1.ConfigMap:
		return row(obj.Name, int64(len(obj.Data)+len(obj.BinaryData)), since(obj.CreationTimestamp)), nil
	case *corev1.Secret:
		return row(obj.Name, string(obj.Type), int64(len(obj.Data)), since(obj.CreationTimestamp)), nil
	case *corev1.ServiceAccount:
		return row(obj.Name, int64(len(obj.Secrets)), since(obj.CreationTimestamp)), nil
	case *policyv1.PodDisruptionBudget:
		minAvailable, maxUnavailable := "N/A", "N/A"
		if obj.Spec.MinAvailable != nil {
			minAvailable = obj.Spec.MinAvailable.String()
		}
		if obj.Spec.MaxUnavailable != nil {
			maxUnavailable = obj.Spec.MaxUnavailable.String()
		}
		return row(obj.Name, minAvailable, maxUnavailable, int64(obj.Status.DisruptionsAllowed), since(obj.CreationTimestamp)), nil
	case *appsv1.Deployment:
		names, images := containerCells(obj.Spec.Template.Spec.Containers)
		return row(obj.Name, fmt.Sprintf("%d/%d", obj.Status.ReadyReplicas, replicas(obj.Spec.Replicas)),
			int64(obj.Status.UpdatedReplicas), int64(obj.Status.AvailableReplicas), since(obj.CreationTimestamp),
			names, images, selectorString(obj.Spec.Selector)), nil
	case *appsv1.ReplicaSet:
		names, images := containerCells(obj.Spec.Template.Spec.Containers)
		return row(obj.Name, int64(replicas(obj.Spec.Replicas)), int64(obj.Status.Replicas), int64(obj.Status.ReadyReplicas),
			since(obj.CreationTimestamp), names, images, selectorString(obj.Spec.Selector)), nil
	case *corev1.ReplicationController:
		var names, images string
		if obj.Spec.Template != nil {
			names, images = containerCells(obj.Spec.Template.Spec.Containers)
		}
		return row(obj.Name, int64(replicas(obj.Spec.Replicas)), int64(obj.Status.Replicas), int64(obj.Status.ReadyReplicas),
			since(obj.CreationTimestamp), names, images, labels.FormatLabels(obj.Spec.Selector)), nil
	case *appsv1.DaemonSet:
		names, images := containerCells(obj.Spec.Template.Spec.Containers)
		st := obj.Status
		return row(obj.Name, int64(st.DesiredNumberScheduled), int64(st.CurrentNumberScheduled), int64(st.NumberReady),
			int64(st.UpdatedNumberScheduled), int64(st.NumberAvailable), labels.FormatLabels(obj.Spec.Template.Spec.NodeSelector),
			since(obj.CreationTimestamp), names, images, metav1.FormatLabelSelector(obj.Spec.Selector)), nil
	case *appsv1.StatefulSet:
		return printStatefulSet(obj, since(obj.CreationTimestamp)), nil
	case *corev1.PersistentVolumeClaim:
		return printPersistentVolumeClaim(obj, since(obj.CreationTimestamp)), nil
	case *corev1.PersistentVolume:
		return printPersistentVolume(obj, since(obj.CreationTimestamp)), nil
	case *storagev1.StorageClass:
		return printStorageClass(obj, since(obj.CreationTimestamp)), nil
	case *appsv1.ControllerRevision:
		controller := "<none>"
		if ref := metav1.GetControllerOf(obj); ref != nil {
			gv, err := schema.ParseGroupVersion(ref.APIVersion)
			if err != nil {
				return printedRow{}, fmt.Errorf("gateway: table of %s: %w", gvk.Kind, err)
			}
			controller = ref.Name
			if gk := gv.WithKind(ref.Kind).GroupKind(); !gk.Empty() {
				controller = strings.ToLower(gk.String()) + "/" + ref.Name
			}
		}
		return row(obj.Name, controller, obj.Revision, since(obj.CreationTimestamp)), nil
	case *batchv1.Job:
		return printJob(obj, now), nil
	case *batchv1.CronJob:
		return printCronJob(obj, now), nil
	case *coordinationv1.Lease:
		holder := ""
		if obj.Spec.HolderIdentity != nil {
			holder = *obj.Spec.HolderIdentity
		}
		return row(obj.Name, holder, since(obj.CreationTimestamp)), nil
	case *rbacv1.RoleBinding:
		return bindingRow(obj.Name, obj.RoleRef, obj.Subjects, since(obj.CreationTimestamp)), nil
	case *rbacv1.ClusterRoleBinding:
		return bindingRow(obj.Name, obj.RoleRef, obj.Subjects, since(obj.CreationTimestamp)), nil
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		return row(obj.Name, int64(len(obj.Webhooks)), since(obj.CreationTimestamp)), nil
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		return row(obj.Name, int64(len(obj.Webhooks)), since(obj.CreationTimestamp)), nil
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		paramKind := "<unset>"
		if k := obj.Spec.ParamKind; k != nil {
			paramKind = k.APIVersion + "/" + k.Kind
		}
		return row(obj.Name, int64(len(obj.Spec.Validations)), paramKind, since(obj.CreationTimestamp)), nil
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		return row(obj.Name, obj.Spec.PolicyName, paramRefCell(obj.Spec.ParamRef), since(obj.CreationTimestamp)), nil
	case *autoscalingv1.Scale:
		return row(obj.Name, int64(obj.Spec.Replicas), int64(obj.Status.Replicas), since(obj.CreationTimestamp)), nil
	case *corev1.ResourceQuota:
		return printResourceQuota(obj, now), nil
	case *schedulingv1.PriorityClass:
		return printPriorityClass(obj, now), nil
	}
	if r, ok := printMoreKinds(typed, now); ok {
		return r, nil
	}
	if r, ok := printFlowControl(typed, now); ok {
		return r, nil
	}
	return defaultRow(o), nil
}

// paramRefCell is a binding's PARAMREF cell as kube-apiserver prints it: the
// param's namespace/name ("*" when the namespace is not given, as the scope is
// not known there), else its selector in the selector's Go string form.
func paramRefCell(ref *admissionregistrationv1.ParamRef) string {
	switch {
	case ref == nil:
		return "<unset>"
	case ref.Name != "" && ref.Namespace != "":
		return ref.Namespace + "/" + ref.Name
	case ref.Name != "":
		return "*/" + ref.Name
	case ref.Selector != nil:
		return ref.Selector.String()
	}
	return "<unset>"
}

// microTimes returns a copy of v with every RFC 3339 timestamp string
// rewritten with six fractional digits.
func microTimes(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = microTimes(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = microTimes(e)
		}
		return out
	case string:
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.Format("2006-01-02T15:04:05.000000Z07:00")
		}
	}
	return v
}

// defaultRow is kube-apiserver's row for kinds without a printer (roles,
// cluster roles): the name and the creation time in RFC 3339, UTC.
func defaultRow(o map[string]any) printedRow {
	created := ""
	if t, err := time.Parse(time.RFC3339, str(o, "metadata", "creationTimestamp")); err == nil {
		created = t.UTC().Format(time.RFC3339)
	}
	return row(str(o, "metadata", "name"), created)
}

func row(cells ...any) printedRow { return printedRow{cells: cells} }

// sinceTime is the age kubectl shows (2m3s, 5h, 12d), or <unknown> for the
// zero time.
func sinceTime(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

func replicas(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func containerCells(cs []corev1.Container) (names, images string) {
	n := make([]string, len(cs))
	im := make([]string, len(cs))
	for i, c := range cs {
		n[i], im[i] = c.Name, c.Image
	}
	return strings.Join(n, ","), strings.Join(im, ",")
}

func selectorString(ls *metav1.LabelSelector) string {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return "<invalid>"
	}
	return sel.String()
}

func bindingRow(name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, age string) printedRow {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		}
	}
	return row(name, ref.Kind+"/"+ref.Name, age, strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", "))
}

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

// rowObject is what a Table row carries as its object for includeObject
// (None, Object or Metadata, the default).
func rowObject(o map[string]any, includeObject string) (any, bool) {
	switch includeObject {
	case "None":
		return nil, false
	case "Object":
		return o, true
	}
	md, _ := o["metadata"].(map[string]any)
	return map[string]any{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md}, true
}
