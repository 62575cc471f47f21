// This file holds the test of the Endpoints subsets a Service's pods make:
// ready and not-ready addresses sorted by IP, one subset per resolved named
// port, pods without an IP left out.

package endpoints

import (
	"fmt"
	"testing"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func pod(name, ip string, ready bool, port int32, lbl string) *corev1.Pod {
	st := "False"
	if ready {
		st = "True"
	}
	return &corev1.Pod{Metadata: &metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": lbl}},
		Spec:   &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Ports: []*corev1.ContainerPort{{Name: "http", ContainerPort: port}}}}},
		Status: &corev1.PodStatus{Phase: "Running", PodIp: ip, Conditions: []*corev1.PodCondition{{Type: "Ready", Status: st}}}}
}

func TestSubsets(t *testing.T) {
	named := &corev1.Service{Spec: &corev1.ServiceSpec{Selector: map[string]string{"app": "a"},
		Ports: []*corev1.ServicePort{{Name: "web", Port: 80, TargetPort: &metav1.IntOrString{Value: &metav1.IntOrString_StrVal{StrVal: "http"}}}}}}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		pods []*corev1.Pod
		want string
	}{
		{name: "ready and not ready, sorted by IP", svc: named,
			pods: []*corev1.Pod{pod("a", "10.0.0.2", true, 8080, "a"), pod("b", "10.0.0.1", true, 8080, "a"), pod("c", "10.0.0.3", false, 8080, "a"), pod("x", "10.0.0.9", true, 8080, "other")},
			want: "[{[10.0.0.1 10.0.0.2] [10.0.0.3] [web/8080/TCP]}]"},
		{name: "different named ports make two subsets", svc: named,
			pods: []*corev1.Pod{pod("a", "10.0.0.1", true, 8080, "a"), pod("b", "10.0.0.2", true, 9090, "a")},
			want: "[{[10.0.0.1] [] [web/8080/TCP]} {[10.0.0.2] [] [web/9090/TCP]}]"},
		{name: "pods without an IP are left out", svc: named, pods: []*corev1.Pod{pod("a", "", true, 8080, "a")}, want: "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var parts []string
			for _, s := range Subsets(tc.svc, tc.pods) {
				var r, nr, ports []string
				for _, a := range s.GetAddresses() {
					r = append(r, a.GetIp())
				}
				for _, a := range s.GetNotReadyAddresses() {
					nr = append(nr, a.GetIp())
				}
				for _, p := range s.GetPorts() {
					ports = append(ports, fmt.Sprintf("%s/%d/%s", p.GetName(), p.GetPort(), p.GetProtocol()))
				}
				parts = append(parts, fmt.Sprintf("{%v %v %v}", r, nr, ports))
			}
			got := fmt.Sprintf("%v", parts)
			if parts == nil {
				got = "[]"
			}
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
