// This file holds the Table rows of discovery.k8s.io EndpointSlices and of
// the kinds served at the storage level (PodTemplate, networking.k8s.io,
// node.k8s.io and storage.k8s.io kinds), with the cells kube-apiserver's
// printers compute.
package gateway

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
)

// printMoreKinds prints typed's row when it is one of this file's kinds;
// ok is false for any other.
func printMoreKinds(typed runtime.Object, now time.Time) (_ printedRow, ok bool) {
	since := func(t metav1.Time) string { return sinceTime(t.Time, now) }
	switch obj := typed.(type) {
	case *discoveryv1.EndpointSlice:
		return row(obj.Name, string(obj.AddressType), slicePorts(obj.Ports), sliceEndpoints(obj.Endpoints),
			since(obj.CreationTimestamp)), true
	case *corev1.PodTemplate:
		names, images := containerCells(obj.Template.Spec.Containers)
		return row(obj.Name, names, images, labels.FormatLabels(obj.Template.Labels)), true
	case *networkingv1.Ingress:
		class := "<none>"
		if obj.Spec.IngressClassName != nil {
			class = *obj.Spec.IngressClassName
		}
		ports := "80"
		if len(obj.Spec.TLS) > 0 {
			ports = "80, 443"
		}
		addrs := sets.New[string]()
		for _, in := range obj.Status.LoadBalancer.Ingress {
			switch {
			case in.IP != "":
				addrs.Insert(in.IP)
			case in.Hostname != "":
				addrs.Insert(in.Hostname)
			}
		}
		return row(obj.Name, class, ingressHosts(obj.Spec.Rules), strings.Join(sets.List(addrs), ","), ports, since(obj.CreationTimestamp)), true
	case *networkingv1.IngressClass:
		params := "<none>"
		if p := obj.Spec.Parameters; p != nil {
			params = p.Kind
			if p.APIGroup != nil {
				params += "." + *p.APIGroup
			}
			params += "/" + p.Name
		}
		return row(obj.Name, obj.Spec.Controller, params, since(obj.CreationTimestamp)), true
	case *networkingv1.NetworkPolicy:
		return row(obj.Name, metav1.FormatLabelSelector(&obj.Spec.PodSelector), since(obj.CreationTimestamp)), true
	case *nodev1.RuntimeClass:
		return row(obj.Name, obj.Handler, since(obj.CreationTimestamp)), true
	case *storagev1.CSIDriver:
		sp := obj.Spec
		tokens := "<unset>"
		if sp.TokenRequests != nil {
			var a []string
			for _, t := range sp.TokenRequests {
				a = append(a, t.Audience)
			}
			tokens = strings.Join(a, ",")
		}
		modes := make([]string, 0, len(sp.VolumeLifecycleModes))
		for _, m := range sp.VolumeLifecycleModes {
			modes = append(modes, string(m))
		}
		m := strings.Join(modes, ",")
		if m == "" {
			m = "<none>"
		}
		return row(obj.Name, boolOr(sp.AttachRequired, true), boolOr(sp.PodInfoOnMount, false), boolOr(sp.StorageCapacity, false),
			tokens, boolOr(sp.RequiresRepublish, false), m, since(obj.CreationTimestamp)), true
	case *storagev1.CSINode:
		return row(obj.Name, int64(len(obj.Spec.Drivers)), since(obj.CreationTimestamp)), true
	case *storagev1.VolumeAttachment:
		pv := ""
		if obj.Spec.Source.PersistentVolumeName != nil {
			pv = *obj.Spec.Source.PersistentVolumeName
		}
		return row(obj.Name, obj.Spec.Attacher, pv, obj.Spec.NodeName, obj.Status.Attached, since(obj.CreationTimestamp)), true
	}
	return printedRow{}, false
}

func boolOr(b *bool, d bool) bool {
	if b == nil {
		return d
	}
	return *b
}

// ingressHosts is an Ingress's HOSTS cell: the first three rule hosts,
// then "+ N more..." (counting every rule); * when none names a host.
func ingressHosts(rules []networkingv1.IngressRule) string {
	var list []string
	more := false
	for _, r := range rules {
		if len(list) == 3 {
			more = true
		}
		if !more && r.Host != "" {
			list = append(list, r.Host)
		}
	}
	if len(list) == 0 {
		return "*"
	}
	s := strings.Join(list, ",")
	if more {
		return fmt.Sprintf("%s + %d more...", s, len(rules)-3)
	}
	return s
}

// slicePorts is an EndpointSlice's PORTS cell: up to three port numbers
// (the name of a port without one, * for neither), then "+ N more...";
// <unset> when there are none.
func slicePorts(ports []discoveryv1.EndpointPort) string {
	list := make([]string, 0, 3)
	for _, p := range ports {
		if len(list) == 3 {
			break
		}
		switch {
		case p.Port != nil:
			list = append(list, strconv.Itoa(int(*p.Port)))
		case p.Name != nil:
			list = append(list, *p.Name)
		default:
			list = append(list, "*")
		}
	}
	return listWithMore(list, len(ports), 3)
}

// sliceEndpoints is an EndpointSlice's ENDPOINTS cell: the first three
// addresses of all its endpoints, as slicePorts.
func sliceEndpoints(eps []discoveryv1.Endpoint) string {
	list := make([]string, 0, 3)
	count := 0
	for _, ep := range eps {
		for _, a := range ep.Addresses {
			if len(list) < 3 {
				list = append(list, a)
			}
			count++
		}
	}
	return listWithMore(list, count, 3)
}

// listWithMore joins list, adding "+ N more..." when count exceeds max,
// and is <unset> when empty.
func listWithMore(list []string, count, max int) string {
	s := strings.Join(list, ",")
	if count > max {
		return fmt.Sprintf("%s + %d more...", s, count-max)
	}
	if s == "" {
		return "<unset>"
	}
	return s
}
