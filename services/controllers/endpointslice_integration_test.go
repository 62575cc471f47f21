// This file holds the EndpointSlice controller's tests against a real
// in-process API service: slices follow pods becoming ready, not ready and
// terminating, the Service's selector and named ports.

package controllers_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
	"github.com/kplane/kplane/services/controllers/endpointslice"
)

// sliceSummary prints the slices of a Service in a stable form: per slice
// its ports, then each endpoint as address:ready/serving/terminating
// node zone hostname target.
func sliceSummary(ss []*discoveryv1.EndpointSlice) string {
	var out []string
	for _, s := range ss {
		var ports []string
		for _, p := range s.GetPorts() {
			ports = append(ports, fmt.Sprintf("%s=%d/%s", p.GetName(), p.GetPort(), p.GetProtocol()))
		}
		sort.Strings(ports)
		var eps []string
		for _, e := range s.GetEndpoints() {
			c := e.GetConditions()
			eps = append(eps, fmt.Sprintf("%s:%t/%t/%t node=%s zone=%s host=%s ref=%s/%s",
				strings.Join(e.GetAddresses(), ","), c.GetReady(), c.GetServing(), c.GetTerminating(),
				e.GetNodeName(), e.GetZone(), e.GetHostname(), e.GetTargetRef().GetKind(), e.GetTargetRef().GetName()))
		}
		sort.Strings(eps)
		out = append(out, fmt.Sprintf("%s [%s] {%s}", s.GetAddressType(), strings.Join(ports, " "), strings.Join(eps, "; ")))
	}
	sort.Strings(out)
	return strings.Join(out, " | ")
}

func TestEndpointSlicesFollowPods(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.Controllers = []string{controllers.EndpointSlice}
	})
	const ns = "slices"
	c.namespace(t, ns)
	nodes := client.Must[*corev1.Node](c.conn)
	for name, zone := range map[string]string{"node-a": "zone-1", "node-b": ""} {
		n := &corev1.Node{Metadata: &metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if zone != "" {
			n.Metadata.Labels["topology.kubernetes.io/zone"] = zone
		}
		if _, err := nodes.Create(c.ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	svcs := client.Must[*corev1.Service](c.conn)
	esc := client.Must[*discoveryv1.EndpointSlice](c.conn)
	svc, err := svcs.Create(c.ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"tier": "front"}},
		Spec: &corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports: []*corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: &metav1.IntOrString{Value: &metav1.IntOrString_StrVal{StrVal: "http"}}},
				{Name: "metrics", Port: 9090},
			},
		}})
	if err != nil {
		t.Fatal(err)
	}
	list := func() ([]*discoveryv1.EndpointSlice, error) {
		ss, _, err := esc.List(c.ctx, ns, client.ListOptions{LabelSelector: endpointslice.LabelServiceName + "=web"})
		return ss, err
	}
	waitFor := func(what, want string) []*discoveryv1.EndpointSlice {
		t.Helper()
		var last []*discoveryv1.EndpointSlice
		testutil.EventuallyWithin(t, waitLimit, what, func() (bool, string) {
			ss, err := list()
			if err != nil {
				return false, err.Error()
			}
			last = ss
			got := sliceSummary(ss)
			return got == want, got
		})
		return last
	}

	// No pod yet: one placeholder slice, without ports or endpoints, named
	// after the Service, labelled and owned as Kubernetes' are.
	ss := waitFor("the placeholder slice", "IPv4 [] {}")
	m := ss[0].GetMetadata()
	if !strings.HasPrefix(m.GetName(), "web-") || len(m.GetName()) != len("web-")+5 {
		t.Errorf("slice name %q, want web-<5 random characters>", m.GetName())
	}
	wantLabels := map[string]string{"tier": "front", "kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}
	if got := m.GetLabels(); fmt.Sprint(got) != fmt.Sprint(wantLabels) {
		t.Errorf("labels %v, want %v", got, wantLabels)
	}
	if refs := m.GetOwnerReferences(); len(refs) != 1 || refs[0].GetKind() != "Service" || refs[0].GetApiVersion() != "v1" ||
		refs[0].GetUid() != svc.GetMetadata().GetUid() || !refs[0].GetController() || !refs[0].GetBlockOwnerDeletion() {
		t.Errorf("owner references %v, want the Service as controller", refs)
	}

	// setStatus writes a pod's status (retrying on the fake kubelet's
	// concurrent write).
	setStatus := func(name, ip string, ready bool) {
		t.Helper()
		st := "False"
		if ready {
			st = "True"
		}
		for attempt := 0; ; attempt++ {
			p, err := c.pods.Get(c.ctx, ns, name)
			if err != nil {
				t.Fatal(err)
			}
			p.Status = &corev1.PodStatus{Phase: "Running", PodIp: ip, PodIps: []*corev1.PodIP{{Ip: ip}},
				Conditions: []*corev1.PodCondition{{Type: "Ready", Status: st, LastTransitionTime: timestamppb.Now()}}}
			_, err = c.pods.UpdateStatus(c.ctx, p)
			if err == nil {
				return
			}
			if !apierrors.IsConflict(err) || attempt > 10 {
				t.Fatal(err)
			}
		}
	}
	mk := func(name, node, ip string, port int32, ready bool, hostname string) {
		t.Helper()
		_, err := c.pods.Create(c.ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}},
			Spec: &corev1.PodSpec{NodeName: node, Hostname: hostname, Subdomain: "web",
				Containers: []*corev1.Container{{Name: "c", Image: "nginx", Ports: []*corev1.ContainerPort{{Name: "http", ContainerPort: port}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		setStatus(name, ip, ready)
	}
	mk("a", "node-a", "10.1.0.1", 8080, true, "")
	mk("b", "node-b", "10.1.0.2", 8080, false, "")
	// c names its http port 8081: its endpoint goes to a slice of its own.
	mk("c", "node-a", "10.1.0.3", 8081, true, "c-host")
	waitFor("slices per resolved port set, with conditions, node, zone and hostname",
		"IPv4 [http=8080/TCP metrics=9090/TCP] {10.1.0.1:true/true/false node=node-a zone=zone-1 host= ref=Pod/a; "+
			"10.1.0.2:false/false/false node=node-b zone= host= ref=Pod/b} | "+
			"IPv4 [http=8081/TCP metrics=9090/TCP] {10.1.0.3:true/true/false node=node-a zone=zone-1 host=c-host ref=Pod/c}")

	// b becomes ready; a becomes not ready.
	setStatus("b", "10.1.0.2", true)
	setStatus("a", "10.1.0.1", false)
	waitFor("readiness followed",
		"IPv4 [http=8080/TCP metrics=9090/TCP] {10.1.0.1:false/false/false node=node-a zone=zone-1 host= ref=Pod/a; "+
			"10.1.0.2:true/true/false node=node-b zone= host= ref=Pod/b} | "+
			"IPv4 [http=8081/TCP metrics=9090/TCP] {10.1.0.3:true/true/false node=node-a zone=zone-1 host=c-host ref=Pod/c}")

	// b is deleted: bound to a node, it terminates gracefully and stays
	// listed as serving but not ready, terminating.
	if err := c.pods.Delete(c.ctx, ns, "b", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("terminating pod listed as terminating",
		"IPv4 [http=8080/TCP metrics=9090/TCP] {10.1.0.1:false/false/false node=node-a zone=zone-1 host= ref=Pod/a; "+
			"10.1.0.2:false/true/true node=node-b zone= host= ref=Pod/b} | "+
			"IPv4 [http=8081/TCP metrics=9090/TCP] {10.1.0.3:true/true/false node=node-a zone=zone-1 host=c-host ref=Pod/c}")
	if err := c.pods.Delete(c.ctx, ns, "b", client.DeleteOptions{GracePeriodSeconds: proto.Int64(0)}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// c's slice loses its only endpoint and is deleted.
	if err := c.pods.Delete(c.ctx, ns, "c", client.DeleteOptions{GracePeriodSeconds: proto.Int64(0)}); err != nil {
		t.Fatal(err)
	}
	waitFor("deleted pods gone from the slices",
		"IPv4 [http=8080/TCP metrics=9090/TCP] {10.1.0.1:false/false/false node=node-a zone=zone-1 host= ref=Pod/a}")

	// The named target port now points at another number: the endpoint
	// moves to a slice with the new port set.
	svc, err = svcs.Get(c.ctx, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports[1].TargetPort = &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 9091}}
	if svc, err = svcs.Update(c.ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitFor("the new target port",
		"IPv4 [http=8080/TCP metrics=9091/TCP] {10.1.0.1:false/false/false node=node-a zone=zone-1 host= ref=Pod/a}")

	// A selector that matches nothing leaves the placeholder.
	svc.Spec.Selector = map[string]string{"app": "other"}
	if _, err := svcs.Update(c.ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitFor("the placeholder after the selector change", "IPv4 [] {}")

	// A slice of the controller's deleted by hand is put back.
	ss, err = list()
	if err != nil || len(ss) != 1 {
		t.Fatalf("slices %v, %v", ss, err)
	}
	if err := esc.Delete(c.ctx, ns, ss[0].GetMetadata().GetName(), client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "the placeholder recreated", func() (bool, string) {
		got, err := list()
		if err != nil {
			return false, err.Error()
		}
		return len(got) == 1 && got[0].GetMetadata().GetName() != ss[0].GetMetadata().GetName(), sliceSummary(got)
	})

	// The Service goes: so do its slices.
	if err := svcs.Delete(c.ctx, ns, "web", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("slices deleted with the service", "")
	// A Service without a selector gets none.
	if _, err := svcs.Create(c.ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "manual"},
		Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 80}}}}); err != nil {
		t.Fatal(err)
	}
	all, _, err := esc.List(c.ctx, ns, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(all, func(s *discoveryv1.EndpointSlice) bool {
		return s.GetMetadata().GetLabels()[endpointslice.LabelServiceName] == "manual"
	}); i >= 0 {
		t.Errorf("a selector-less Service got slice %v", all[i])
	}
}

func TestEndpointSliceMirroring(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.Controllers = []string{controllers.EndpointSliceMirroring}
	})
	const ns = "mirror"
	c.namespace(t, ns)
	svcs := client.Must[*corev1.Service](c.conn)
	eps := client.Must[*corev1.Endpoints](c.conn)
	esc := client.Must[*discoveryv1.EndpointSlice](c.conn)
	if _, err := svcs.Create(c.ctx, &corev1.Service{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "ext"},
		Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Name: "db", Port: 5432}}}}); err != nil {
		t.Fatal(err)
	}
	ep, err := eps.Create(c.ctx, &corev1.Endpoints{Metadata: &metav1.ObjectMeta{Namespace: ns, Name: "ext", Labels: map[string]string{"team": "data"},
		Annotations: map[string]string{"note": "external", "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
		Subsets: []*corev1.EndpointSubset{{
			Addresses:         []*corev1.EndpointAddress{{Ip: "192.0.2.10", Hostname: "db-0"}},
			NotReadyAddresses: []*corev1.EndpointAddress{{Ip: "192.0.2.11"}},
			Ports:             []*corev1.EndpointPort{{Name: "db", Port: 5432}},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	list := func() []*discoveryv1.EndpointSlice {
		ss, _, err := esc.List(c.ctx, ns, client.ListOptions{LabelSelector: "kubernetes.io/service-name=ext"})
		if err != nil {
			t.Fatal(err)
		}
		return ss
	}
	waitFor := func(what, want string) []*discoveryv1.EndpointSlice {
		t.Helper()
		var last []*discoveryv1.EndpointSlice
		testutil.EventuallyWithin(t, waitLimit, what, func() (bool, string) {
			last = list()
			got := sliceSummary(last)
			return got == want, got
		})
		return last
	}
	ss := waitFor("the mirrored slice", "IPv4 [db=5432/TCP] {192.0.2.10:true/false/false node= zone= host=db-0 ref=/; 192.0.2.11:false/false/false node= zone= host= ref=/}")
	m := ss[0].GetMetadata()
	if m.GetLabels()["endpointslice.kubernetes.io/managed-by"] != "endpointslicemirroring-controller.k8s.io" || m.GetLabels()["team"] != "data" ||
		m.GetAnnotations()["note"] != "external" || m.GetAnnotations()["kubectl.kubernetes.io/last-applied-configuration"] != "" {
		t.Errorf("mirrored slice metadata: labels %v annotations %v", m.GetLabels(), m.GetAnnotations())
	}
	if refs := m.GetOwnerReferences(); len(refs) != 1 || refs[0].GetKind() != "Endpoints" || refs[0].GetUid() != ep.GetMetadata().GetUid() {
		t.Errorf("owner references %v, want the Endpoints", refs)
	}

	// An update is mirrored: a new port and an IPv6 address.
	ep, err = eps.Get(c.ctx, ns, "ext")
	if err != nil {
		t.Fatal(err)
	}
	ep.Subsets = []*corev1.EndpointSubset{{
		Addresses: []*corev1.EndpointAddress{{Ip: "192.0.2.10"}, {Ip: "2001:db8::1"}},
		Ports:     []*corev1.EndpointPort{{Name: "db", Port: 5433}},
	}}
	if _, err := eps.Update(c.ctx, ep); err != nil {
		t.Fatal(err)
	}
	waitFor("the updated mirror", "IPv4 [db=5433/TCP] {192.0.2.10:true/false/false node= zone= host= ref=/} | IPv6 [db=5433/TCP] {2001:db8::1:true/false/false node= zone= host= ref=/}")

	// skip-mirror removes the mirror.
	ep, err = eps.Get(c.ctx, ns, "ext")
	if err != nil {
		t.Fatal(err)
	}
	ep.Metadata.Labels["endpointslice.kubernetes.io/skip-mirror"] = "true"
	if _, err := eps.Update(c.ctx, ep); err != nil {
		t.Fatal(err)
	}
	waitFor("no mirror once skip-mirror is set", "")
}
