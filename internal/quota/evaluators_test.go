// This file holds the table tests of the pod and Service evaluators: what a
// pod or Service uses, which quota scopes a pod is in, and the resources a
// quota makes every container state.
package quota

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	quotav1 "k8s.io/apiserver/pkg/quota/v1"
)

func pod(req, lim corev1.ResourceList, mod func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}}}
	if mod != nil {
		mod(p)
	}
	return p
}

func list(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func TestPodUsage(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := Evaluator(schema.GroupResource{Resource: "pods"}, nil, func() time.Time { return now })
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want corev1.ResourceList
	}{
		{name: "requests and limits", pod: pod(list("cpu", "250m", "memory", "64Mi"), list("cpu", "1"), nil),
			want: list("count/pods", "1", "pods", "1", "cpu", "250m", "requests.cpu", "250m", "memory", "64Mi", "requests.memory", "64Mi", "limits.cpu", "1")},
		{name: "best effort", pod: pod(nil, nil, nil), want: list("count/pods", "1", "pods", "1")},
		{name: "succeeded: the object only", pod: pod(list("cpu", "1"), nil, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
			want: list("count/pods", "1")},
		{name: "past its deletion grace period: the object only", pod: pod(list("cpu", "1"), nil, func(p *corev1.Pod) {
			ts := metav1.NewTime(now.Add(-time.Minute))
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, new(int64)
		}), want: list("count/pods", "1")},
		{name: "extended resource", pod: pod(list("example.com/gpu", "2"), list("example.com/gpu", "2"), nil),
			want: list("count/pods", "1", "pods", "1", "requests.example.com/gpu", "2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.Usage(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if !quotav1.Equals(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodScopes(t *testing.T) {
	deadline := int64(60)
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		scope corev1.ScopedResourceSelectorRequirement
		want  bool
	}{
		{name: "terminating", pod: pod(nil, nil, func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = &deadline }),
			scope: corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeTerminating, Operator: corev1.ScopeSelectorOpExists}, want: true},
		{name: "not terminating", pod: pod(nil, nil, nil),
			scope: corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeNotTerminating, Operator: corev1.ScopeSelectorOpExists}, want: true},
		{name: "best effort", pod: pod(nil, nil, nil),
			scope: corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeBestEffort, Operator: corev1.ScopeSelectorOpExists}, want: true},
		{name: "not best effort", pod: pod(list("memory", "1Mi"), nil, nil),
			scope: corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeNotBestEffort, Operator: corev1.ScopeSelectorOpExists}, want: true},
		{name: "priority class in", pod: pod(nil, nil, func(p *corev1.Pod) { p.Spec.PriorityClassName = "high" }),
			scope: corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high", "mid"}}, want: true},
		{name: "priority class not in", pod: pod(nil, nil, func(p *corev1.Pod) { p.Spec.PriorityClassName = "low" }),
			scope: corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"}}, want: false},
		{name: "priority class exists, none named", pod: pod(nil, nil, nil),
			scope: corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpExists}, want: false},
		{name: "priority class does not exist", pod: pod(nil, nil, nil),
			scope: corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpDoesNotExist}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := podMatchesScope(tc.scope, tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodConstraints(t *testing.T) {
	e := Evaluator(schema.GroupResource{Resource: "pods"}, nil, time.Now)
	p := pod(list("cpu", "1"), nil, func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	})
	err := e.Constraints([]corev1.ResourceName{"requests.cpu", "limits.memory", "pods"}, p)
	if want := "must specify limits.memory for: app,init; requests.cpu for: init"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

func TestServiceUsage(t *testing.T) {
	e := Evaluator(schema.GroupResource{Resource: "services"}, nil, time.Now)
	no := false
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want corev1.ResourceList
	}{
		{name: "cluster IP", svc: &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Port: 80}}}},
			want: list("count/services", "1", "services", "1", "services.nodeports", "0", "services.loadbalancers", "0")},
		{name: "node port", svc: &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}, {Port: 443}}}},
			want: list("count/services", "1", "services", "1", "services.nodeports", "2", "services.loadbalancers", "0")},
		{name: "load balancer without node ports", svc: &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: &no, Ports: []corev1.ServicePort{{Port: 80}, {Port: 443, NodePort: 30443}}}},
			want: list("count/services", "1", "services", "1", "services.nodeports", "1", "services.loadbalancers", "1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.Usage(tc.svc)
			if err != nil {
				t.Fatal(err)
			}
			if !quotav1.Equals(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestObjectCount(t *testing.T) {
	e := Evaluator(schema.GroupResource{Resource: "configmaps"}, nil, time.Now)
	got, err := e.Usage(&corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	if want := list("count/configmaps", "1", "configmaps", "1"); !quotav1.Equals(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
