package gateway

import (
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"
)

// wantsTable reports whether the client asked for a meta.k8s.io Table.
func wantsTable(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if strings.Contains(part, "as=Table") && strings.Contains(part, "g=meta.k8s.io") {
			return true
		}
	}
	return false
}

// column is one Table column and how to compute its cell.
type column struct {
	Name, Type, Format string
	Priority           int
	Cell               func(o map[string]any) any
}

// buildTable renders objects as a Table with the columns kubectl users know
// for res (NAME and AGE for resources without their own). includeObject is
// None, Object or Metadata (the default).
func buildTable(res *resource, objs []map[string]any, rv, includeObject string, withColumns bool) map[string]any {
	cols := columnsFor(res.Resource)
	rows := make([]any, 0, len(objs))
	for _, o := range objs {
		cells := make([]any, len(cols))
		for i, c := range cols {
			cells[i] = c.Cell(o)
		}
		row := map[string]any{"cells": cells}
		switch includeObject {
		case "None":
		case "Object":
			row["object"] = o
		default:
			md, _ := o["metadata"].(map[string]any)
			row["object"] = map[string]any{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md}
		}
		rows = append(rows, row)
	}
	defs := make([]any, len(cols))
	for i, c := range cols {
		defs[i] = map[string]any{"name": c.Name, "type": c.Type, "format": c.Format, "description": "", "priority": c.Priority}
	}
	md := map[string]any{}
	if rv != "" {
		md["resourceVersion"] = rv
	}
	t := map[string]any{"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": md, "rows": rows}
	if withColumns {
		t["columnDefinitions"] = defs
	}
	return t
}

func nameCol() column {
	return column{Name: "Name", Type: "string", Format: "name", Cell: func(o map[string]any) any { return str(o, "metadata", "name") }}
}

func ageCol() column {
	return column{Name: "Age", Type: "string", Cell: func(o map[string]any) any { return age(str(o, "metadata", "creationTimestamp")) }}
}

func strCol(name string, prio int, path ...string) column {
	return column{Name: name, Type: "string", Priority: prio, Cell: func(o map[string]any) any { return orNone(str(o, path...)) }}
}

func intCol(name string, prio int, path ...string) column {
	return column{Name: name, Type: "integer", Priority: prio, Cell: func(o map[string]any) any { return num(o, path...) }}
}

func columnsFor(resource string) []column {
	switch resource {
	case "pods":
		return []column{nameCol(),
			{Name: "Ready", Type: "string", Cell: podReady},
			{Name: "Status", Type: "string", Cell: podStatus},
			{Name: "Restarts", Type: "string", Cell: podRestarts},
			ageCol(),
			strCol("IP", 1, "status", "podIP"),
			strCol("Node", 1, "spec", "nodeName"),
			strCol("Nominated Node", 1, "status", "nominatedNodeName"),
			{Name: "Readiness Gates", Type: "string", Priority: 1, Cell: readinessGates},
		}
	case "deployments":
		return []column{nameCol(),
			{Name: "Ready", Type: "string", Cell: func(o map[string]any) any {
				return fmt.Sprintf("%d/%d", num(o, "status", "readyReplicas"), num(o, "spec", "replicas"))
			}},
			intCol("Up-to-date", 0, "status", "updatedReplicas"),
			intCol("Available", 0, "status", "availableReplicas"),
			ageCol(),
			{Name: "Containers", Type: "string", Priority: 1, Cell: containers("name")},
			{Name: "Images", Type: "string", Priority: 1, Cell: containers("image")},
			{Name: "Selector", Type: "string", Priority: 1, Cell: selector},
		}
	case "replicasets":
		return []column{nameCol(),
			intCol("Desired", 0, "spec", "replicas"),
			intCol("Current", 0, "status", "replicas"),
			intCol("Ready", 0, "status", "readyReplicas"),
			ageCol(),
			{Name: "Containers", Type: "string", Priority: 1, Cell: containers("name")},
			{Name: "Images", Type: "string", Priority: 1, Cell: containers("image")},
			{Name: "Selector", Type: "string", Priority: 1, Cell: selector},
		}
	case "nodes":
		return []column{nameCol(),
			{Name: "Status", Type: "string", Cell: nodeStatus},
			{Name: "Roles", Type: "string", Cell: nodeRoles},
			ageCol(),
			strCol("Version", 0, "status", "nodeInfo", "kubeletVersion"),
			{Name: "Internal-IP", Type: "string", Priority: 1, Cell: nodeAddress("InternalIP")},
			{Name: "External-IP", Type: "string", Priority: 1, Cell: nodeAddress("ExternalIP")},
			strCol("OS-Image", 1, "status", "nodeInfo", "osImage"),
			strCol("Kernel-Version", 1, "status", "nodeInfo", "kernelVersion"),
			strCol("Container-Runtime", 1, "status", "nodeInfo", "containerRuntimeVersion"),
		}
	case "namespaces":
		return []column{nameCol(), strCol("Status", 0, "status", "phase"), ageCol()}
	case "events":
		return []column{
			{Name: "Last Seen", Type: "string", Cell: func(o map[string]any) any {
				ts := str(o, "lastTimestamp")
				if ts == "" {
					ts = str(o, "eventTime")
				}
				if ts == "" {
					ts = str(o, "metadata", "creationTimestamp")
				}
				return age(ts)
			}},
			strCol("Type", 0, "type"),
			strCol("Reason", 0, "reason"),
			{Name: "Object", Type: "string", Cell: func(o map[string]any) any {
				return strings.ToLower(str(o, "involvedObject", "kind")) + "/" + str(o, "involvedObject", "name")
			}},
			strCol("Source", 1, "source", "component"),
			strCol("Message", 0, "message"),
			intCol("Count", 1, "count"),
			{Name: "Name", Type: "string", Format: "name", Priority: 1, Cell: func(o map[string]any) any { return str(o, "metadata", "name") }},
		}
	case "services":
		return []column{nameCol(),
			strCol("Type", 0, "spec", "type"),
			{Name: "Cluster-IP", Type: "string", Cell: func(o map[string]any) any { return orNone(str(o, "spec", "clusterIP")) }},
			{Name: "External-IP", Type: "string", Cell: serviceExternalIP},
			{Name: "Port(s)", Type: "string", Cell: servicePorts},
			ageCol(),
			{Name: "Selector", Type: "string", Priority: 1, Cell: func(o map[string]any) any {
				return orNone(labelString(obj(o, "spec", "selector")))
			}},
		}
	case "endpoints":
		return []column{nameCol(), {Name: "Endpoints", Type: "string", Cell: endpointsString}, ageCol()}
	}
	return []column{nameCol(), ageCol()}
}

// serviceExternalIP is kubectl's EXTERNAL-IP: an ExternalName Service's
// name, a LoadBalancer's ingress points and external IPs (<pending> while
// it has none), others' external IPs.
func serviceExternalIP(o map[string]any) any {
	ext := joinAny(list(o, "spec", "externalIPs"))
	switch str(o, "spec", "type") {
	case "ExternalName":
		return str(o, "spec", "externalName")
	case "LoadBalancer":
		var lb []string
		for _, in := range list(o, "status", "loadBalancer", "ingress") {
			m, _ := in.(map[string]any)
			if ip := str(m, "ip"); ip != "" {
				lb = append(lb, ip)
			} else if h := str(m, "hostname"); h != "" {
				lb = append(lb, h)
			}
		}
		if ext != "" {
			lb = append(lb, ext)
		}
		if len(lb) == 0 {
			return "<pending>"
		}
		return strings.Join(lb, ",")
	}
	return orNone(ext)
}

// endpointsString is kubectl's ENDPOINTS: ip:port of every address and
// port, the first three and how many more.
func endpointsString(o map[string]any) any {
	const most = 3
	var out []string
	count := 0
	for _, ss := range list(o, "subsets") {
		sm, _ := ss.(map[string]any)
		ports := list(sm, "ports")
		for _, a := range list(sm, "addresses") {
			am, _ := a.(map[string]any)
			if len(ports) == 0 {
				count++
				if len(out) < most {
					out = append(out, str(am, "ip"))
				}
				continue
			}
			for _, p := range ports {
				pm, _ := p.(map[string]any)
				count++
				if len(out) < most {
					out = append(out, net.JoinHostPort(str(am, "ip"), fmt.Sprint(num(pm, "port"))))
				}
			}
		}
	}
	if count == 0 {
		return "<none>"
	}
	s := strings.Join(out, ",")
	if count > most {
		s += fmt.Sprintf(" + %d more...", count-most)
	}
	return s
}

// JSON path helpers over decoded objects.

func get(o map[string]any, path ...string) any {
	var cur any = o
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func str(o map[string]any, path ...string) string {
	switch v := get(o, path...).(type) {
	case string:
		return v
	case float64:
		return fmt.Sprint(int64(v))
	}
	return ""
}

func num(o map[string]any, path ...string) int64 {
	if v, ok := get(o, path...).(float64); ok {
		return int64(v)
	}
	return 0
}

func list(o map[string]any, path ...string) []any {
	l, _ := get(o, path...).([]any)
	return l
}

func obj(o map[string]any, path ...string) map[string]any {
	m, _ := get(o, path...).(map[string]any)
	return m
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func joinAny(l []any) string {
	s := make([]string, 0, len(l))
	for _, v := range l {
		s = append(s, fmt.Sprint(v))
	}
	return strings.Join(s, ",")
}

func labelString(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return strings.Join(parts, ",")
}

// age renders a creation time as kubectl does: 29s, 5m, 3h, 2d.
func age(ts string) string {
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return "<unknown>"
	}
	return humanDuration(time.Since(t))
}

func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch s := int64(d.Seconds()); {
	case s < 120:
		return fmt.Sprintf("%ds", s)
	case s < 10*60:
		if s%60 == 0 {
			return fmt.Sprintf("%dm", s/60)
		}
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 3*3600:
		return fmt.Sprintf("%dm", s/60)
	case s < 48*3600:
		return fmt.Sprintf("%dh", s/3600)
	default:
		return fmt.Sprintf("%dd", s/86400)
	}
}

func podReady(o map[string]any) any {
	total := len(list(o, "spec", "containers"))
	ready := 0
	for _, cs := range list(o, "status", "containerStatuses") {
		if m, ok := cs.(map[string]any); ok && m["ready"] == true {
			ready++
		}
	}
	return fmt.Sprintf("%d/%d", ready, total)
}

func podStatus(o map[string]any) any {
	if str(o, "metadata", "deletionTimestamp") != "" {
		return "Terminating"
	}
	reason := str(o, "status", "phase")
	if r := str(o, "status", "reason"); r != "" {
		reason = r
	}
	for _, cs := range list(o, "status", "containerStatuses") {
		m, _ := cs.(map[string]any)
		if r := str(m, "state", "waiting", "reason"); r != "" {
			reason = r
		} else if r := str(m, "state", "terminated", "reason"); r != "" && reason != "Running" {
			reason = r
		}
	}
	if reason == "" {
		reason = "Pending"
	}
	return reason
}

func podRestarts(o map[string]any) any {
	var n int64
	for _, cs := range list(o, "status", "containerStatuses") {
		if m, ok := cs.(map[string]any); ok {
			n += num(m, "restartCount")
		}
	}
	return fmt.Sprint(n)
}

func readinessGates(o map[string]any) any {
	gates := list(o, "spec", "readinessGates")
	if len(gates) == 0 {
		return "<none>"
	}
	return fmt.Sprintf("0/%d", len(gates))
}

func containers(field string) func(o map[string]any) any {
	return func(o map[string]any) any {
		var out []string
		for _, c := range list(o, "spec", "template", "spec", "containers") {
			if m, ok := c.(map[string]any); ok {
				out = append(out, str(m, field))
			}
		}
		return orNone(strings.Join(out, ","))
	}
}

func selector(o map[string]any) any {
	return orNone(labelString(obj(o, "spec", "selector", "matchLabels")))
}

func nodeStatus(o map[string]any) any {
	status := "Unknown"
	for _, c := range list(o, "status", "conditions") {
		if m, ok := c.(map[string]any); ok && str(m, "type") == "Ready" {
			if str(m, "status") == "True" {
				status = "Ready"
			} else {
				status = "NotReady"
			}
		}
	}
	if get(o, "spec", "unschedulable") == true {
		status += ",SchedulingDisabled"
	}
	return status
}

func nodeRoles(o map[string]any) any {
	var roles []string
	for k := range obj(o, "metadata", "labels") {
		if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
			roles = append(roles, r)
		}
	}
	sort.Strings(roles)
	return orNone(strings.Join(roles, ","))
}

func nodeAddress(kind string) func(o map[string]any) any {
	return func(o map[string]any) any {
		for _, a := range list(o, "status", "addresses") {
			if m, ok := a.(map[string]any); ok && str(m, "type") == kind {
				return str(m, "address")
			}
		}
		return "<none>"
	}
}

func servicePorts(o map[string]any) any {
	var out []string
	for _, p := range list(o, "spec", "ports") {
		m, _ := p.(map[string]any)
		proto := str(m, "protocol")
		if proto == "" {
			proto = "TCP"
		}
		s := fmt.Sprint(num(m, "port"))
		if np := num(m, "nodePort"); np != 0 {
			s += fmt.Sprintf(":%d", np)
		}
		out = append(out, s+"/"+proto)
	}
	return orNone(strings.Join(out, ","))
}
