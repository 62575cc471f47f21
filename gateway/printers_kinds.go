// This file holds the Table rows of the kinds served without a controller
// of their own in the gateway's main printer (discovery.k8s.io
// EndpointSlices and the storage-level kinds), with the cells
// kube-apiserver's printers compute.
package gateway

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// printMoreKinds prints typed's row when it is one of this file's kinds;
// ok is false for any other.
func printMoreKinds(typed runtime.Object, now time.Time) (_ printedRow, ok bool) {
	switch obj := typed.(type) {
	case *discoveryv1.EndpointSlice:
		return row(obj.Name, string(obj.AddressType), slicePorts(obj.Ports), sliceEndpoints(obj.Endpoints),
			sinceTime(obj.CreationTimestamp.Time, now)), true
	}
	return printedRow{}, false
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
