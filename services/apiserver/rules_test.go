// This file holds the tests of defaults, image pull policy, QoS class and
// validation, with refusals in Kubernetes' words, status updates included.

package apiserver

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	coordinationv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
)

func resourcesByName() map[string]*resourceInfo {
	out := map[string]*resourceInfo{}
	for _, r := range builtinResources() {
		out[r.Resource] = r
	}
	return out
}

func TestDefaults(t *testing.T) {
	tests := []struct {
		name  string
		in    proto.Message
		check func(t *testing.T, obj proto.Message)
	}{
		{name: "pod spec", in: testPod("default", "p"), check: func(t *testing.T, obj proto.Message) {
			s := obj.(*corev1.Pod).GetSpec()
			for _, c := range []struct{ field, got, want string }{
				{"restartPolicy", s.GetRestartPolicy(), "Always"},
				{"dnsPolicy", s.GetDnsPolicy(), "ClusterFirst"},
				{"schedulerName", s.GetSchedulerName(), "default-scheduler"},
				{"imagePullPolicy", s.GetContainers()[0].GetImagePullPolicy(), "IfNotPresent"},
				{"terminationMessagePath", s.GetContainers()[0].GetTerminationMessagePath(), "/dev/termination-log"},
				{"terminationMessagePolicy", s.GetContainers()[0].GetTerminationMessagePolicy(), "File"},
			} {
				if c.got != c.want {
					t.Errorf("%s: got %q, want %q", c.field, c.got, c.want)
				}
			}
			if s.GetTerminationGracePeriodSeconds() != 30 || s.TerminationGracePeriodSeconds == nil {
				t.Errorf("terminationGracePeriodSeconds: got %v, want 30", s.TerminationGracePeriodSeconds)
			}
			// priority is not a default: the Priority admission plugin
			// sets it on pods (and a template keeps none), as in Kubernetes.
			if !s.GetEnableServiceLinks() || s.Priority != nil {
				t.Errorf("enableServiceLinks not defaulted or priority set: %v", s)
			}
		}},
		{name: "binding apiGroups", in: &rbacv1.RoleBinding{RoleRef: &rbacv1.RoleRef{Kind: "Role", Name: "r"}, Subjects: []*rbacv1.Subject{
			{Kind: "User", Name: "u"}, {Kind: "Group", Name: "g"}, {Kind: "ServiceAccount", Name: "sa", Namespace: "ns"}, {Kind: "User", ApiGroup: "example.com", Name: "kept"}}},
			check: func(t *testing.T, obj proto.Message) {
				b := obj.(*rbacv1.RoleBinding)
				got := []string{b.GetRoleRef().GetApiGroup()}
				for _, s := range b.GetSubjects() {
					got = append(got, s.GetApiGroup())
				}
				if want := []string{"rbac.authorization.k8s.io", "rbac.authorization.k8s.io", "rbac.authorization.k8s.io", "", "example.com"}; !slices.Equal(got, want) {
					t.Errorf("apiGroups: got %q, want %q", got, want)
				}
			}},
		{name: "cluster binding roleRef apiGroup", in: &rbacv1.ClusterRoleBinding{RoleRef: &rbacv1.RoleRef{Kind: "ClusterRole", Name: "r"}},
			check: func(t *testing.T, obj proto.Message) {
				if g := obj.(*rbacv1.ClusterRoleBinding).GetRoleRef().GetApiGroup(); g != "rbac.authorization.k8s.io" {
					t.Errorf("roleRef.apiGroup: got %q", g)
				}
			}},
		{name: "user values are kept", in: &corev1.Pod{Spec: &corev1.PodSpec{RestartPolicy: "Never", TerminationGracePeriodSeconds: proto.Int64(0), Containers: []*corev1.Container{{Image: "x", ImagePullPolicy: "Never"}}}},
			check: func(t *testing.T, obj proto.Message) {
				s := obj.(*corev1.Pod).GetSpec()
				if s.GetRestartPolicy() != "Never" || s.GetTerminationGracePeriodSeconds() != 0 || s.GetContainers()[0].GetImagePullPolicy() != "Never" {
					t.Errorf("defaults overwrote user values: %v", s)
				}
			}},
		{name: "ports, probes, tolerations", in: &corev1.Pod{Spec: &corev1.PodSpec{
			Tolerations: []*corev1.Toleration{{Key: "k", Value: "v"}},
			Containers: []*corev1.Container{{Image: "x", Ports: []*corev1.ContainerPort{{ContainerPort: 80}},
				LivenessProbe: &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{HttpGet: &corev1.HTTPGetAction{Port: &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 80}}}}}}}}},
			check: func(t *testing.T, obj proto.Message) {
				s := obj.(*corev1.Pod).GetSpec()
				c := s.GetContainers()[0]
				if c.GetPorts()[0].GetProtocol() != "TCP" {
					t.Errorf("port protocol: got %q", c.GetPorts()[0].GetProtocol())
				}
				p := c.GetLivenessProbe()
				if p.GetTimeoutSeconds() != 1 || p.GetPeriodSeconds() != 10 || p.GetSuccessThreshold() != 1 || p.GetFailureThreshold() != 3 || p.GetHttpGet().GetPath() != "/" || p.GetHttpGet().GetScheme() != "HTTP" {
					t.Errorf("probe defaults: got %v", p)
				}
				if s.GetTolerations()[0].GetOperator() != "Equal" {
					t.Errorf("toleration operator: got %q", s.GetTolerations()[0].GetOperator())
				}
			}},
		{name: "deployment", in: &appsv1.Deployment{}, check: func(t *testing.T, obj proto.Message) {
			s := obj.(*appsv1.Deployment).GetSpec()
			ru := s.GetStrategy().GetRollingUpdate()
			if s.GetReplicas() != 1 || s.GetStrategy().GetType() != "RollingUpdate" || ru.GetMaxSurge().GetStrVal() != "25%" || ru.GetMaxUnavailable().GetStrVal() != "25%" ||
				s.GetRevisionHistoryLimit() != 10 || s.GetProgressDeadlineSeconds() != 600 || s.GetTemplate().GetSpec().GetRestartPolicy() != "Always" {
				t.Errorf("deployment defaults: got %v", s)
			}
		}},
		{name: "deployment replicas 0 kept", in: &appsv1.Deployment{Spec: &appsv1.DeploymentSpec{Replicas: proto.Int32(0)}}, check: func(t *testing.T, obj proto.Message) {
			if s := obj.(*appsv1.Deployment).GetSpec(); s.Replicas == nil || *s.Replicas != 0 {
				t.Errorf("replicas: got %v, want 0", s.Replicas)
			}
		}},
		{name: "recreate strategy has no rollingUpdate", in: &appsv1.Deployment{Spec: &appsv1.DeploymentSpec{Strategy: &appsv1.DeploymentStrategy{Type: "Recreate"}}}, check: func(t *testing.T, obj proto.Message) {
			if ru := obj.(*appsv1.Deployment).GetSpec().GetStrategy().GetRollingUpdate(); ru != nil {
				t.Errorf("rollingUpdate: got %v, want none", ru)
			}
		}},
		{name: "replicaset", in: &appsv1.ReplicaSet{}, check: func(t *testing.T, obj proto.Message) {
			if s := obj.(*appsv1.ReplicaSet).GetSpec(); s.GetReplicas() != 1 {
				t.Errorf("replicas: got %d, want 1", s.GetReplicas())
			}
		}},
		{name: "service", in: &corev1.Service{Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 80}}}}, check: func(t *testing.T, obj proto.Message) {
			s := obj.(*corev1.Service).GetSpec()
			if s.GetType() != "ClusterIP" || s.GetSessionAffinity() != "None" || s.GetPorts()[0].GetProtocol() != "TCP" || s.GetPorts()[0].GetTargetPort().GetIntVal() != 80 {
				t.Errorf("service defaults: got %v", s)
			}
		}},
		{name: "secret", in: &corev1.Secret{StringData: map[string]string{"a": "b"}}, check: func(t *testing.T, obj proto.Message) {
			s := obj.(*corev1.Secret)
			if s.GetType() != "Opaque" || string(s.GetData()["a"]) != "b" || len(s.GetStringData()) != 0 {
				t.Errorf("secret defaults: got %v", s)
			}
		}},
		{name: "namespace", in: &corev1.Namespace{}, check: func(t *testing.T, obj proto.Message) {
			if p := obj.(*corev1.Namespace).GetStatus().GetPhase(); p != "Active" {
				t.Errorf("phase: got %q, want Active", p)
			}
		}},
		{name: "validating webhook", in: &admissionregistrationv1.ValidatingWebhookConfiguration{Webhooks: []*admissionregistrationv1.ValidatingWebhook{{Name: "a.b.c", Rules: []*admissionregistrationv1.RuleWithOperations{{}}}}},
			check: func(t *testing.T, obj proto.Message) {
				w := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration).GetWebhooks()[0]
				if w.GetFailurePolicy() != "Fail" || w.GetTimeoutSeconds() != 10 || w.GetMatchPolicy() != "Equivalent" || w.GetNamespaceSelector() == nil || w.GetRules()[0].GetScope() != "*" {
					t.Errorf("webhook defaults: got %v", w)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := proto.Clone(tt.in)
			setDefaults(obj)
			tt.check(t, obj)
		})
	}
}

func TestImagePullPolicyDefault(t *testing.T) {
	tests := []struct{ name, image, want string }{
		{name: "untagged", image: "nginx", want: "Always"},
		{name: "latest", image: "nginx:latest", want: "Always"},
		{name: "tagged", image: "nginx:1.27", want: "IfNotPresent"},
		{name: "registry port, untagged", image: "registry:5000/app", want: "Always"},
		{name: "registry port, tagged", image: "registry:5000/app:v1", want: "IfNotPresent"},
		{name: "digest", image: "nginx@sha256:abc", want: "IfNotPresent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := defaultPullPolicy(tt.image); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestQOSClass(t *testing.T) {
	res := func(req, lim map[string]string) *corev1.PodSpec {
		return &corev1.PodSpec{Containers: []*corev1.Container{{Resources: &corev1.ResourceRequirements{Requests: req, Limits: lim}}}}
	}
	tests := []struct {
		name string
		spec *corev1.PodSpec
		want string
	}{
		{name: "nothing", spec: res(nil, nil), want: "BestEffort"},
		{name: "limits only", spec: res(nil, map[string]string{"cpu": "1", "memory": "1Gi"}), want: "Guaranteed"},
		{name: "equal", spec: res(map[string]string{"cpu": "1000m", "memory": "1Gi"}, map[string]string{"cpu": "1", "memory": "1Gi"}), want: "Guaranteed"},
		{name: "requests below limits", spec: res(map[string]string{"cpu": "100m"}, map[string]string{"cpu": "1", "memory": "1Gi"}), want: "Burstable"},
		{name: "requests only", spec: res(map[string]string{"memory": "64Mi"}, nil), want: "Burstable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := podQOSClass(tt.spec); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// validPod is a defaulted pod that passes validation.
func validPod() *corev1.Pod {
	p := testPod("default", "p")
	setDefaults(p)
	return p
}

func validDeployment() *appsv1.Deployment {
	d := testDeployment("web")
	setDefaults(d)
	return d
}

func TestValidation(t *testing.T) {
	res := resourcesByName()
	tests := []struct {
		name     string
		resource string
		obj      proto.Message
		old      proto.Message
		// wantFields are the field paths of the expected causes; empty
		// means valid.
		wantFields []string
	}{
		{name: "valid pod", resource: "pods", obj: validPod()},
		{name: "pod name not DNS-1123", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) { p.Metadata.Name = "Web_1" }), wantFields: []string{"metadata.name"}},
		{name: "missing name", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) { p.Metadata.Name = "" }), wantFields: []string{"metadata.name"}},
		{name: "missing namespace", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) { p.Metadata.Namespace = "" }), wantFields: []string{"metadata.namespace"}},
		{name: "bad label key and value", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) { p.Metadata.Labels = map[string]string{"-bad": "ok", "good": "bad value"} }), wantFields: []string{"metadata.labels", "metadata.labels"}},
		{name: "no containers", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) { p.Spec.Containers = nil }), wantFields: []string{"spec.containers"}},
		{name: "missing image", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }), wantFields: []string{"spec.containers[0].image"}},
		{name: "duplicate container names", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, proto.Clone(p.Spec.Containers[0]).(*corev1.Container))
		}), wantFields: []string{"spec.containers[1].name"}},
		{name: "bad quantity", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = &corev1.ResourceRequirements{Limits: map[string]string{"memory": "64MB!"}}
		}), wantFields: []string{"spec.containers[0].resources.limits[memory]"}},
		{name: "request above limit", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "2"}, Limits: map[string]string{"cpu": "1500m"}}
		}), wantFields: []string{"spec.containers[0].resources.requests[cpu]"}},
		{name: "bad port and protocol", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []*corev1.ContainerPort{{ContainerPort: 70000, Protocol: "HTTP"}}
		}), wantFields: []string{"spec.containers[0].ports[0].containerPort", "spec.containers[0].ports[0].protocol"}},
		{name: "restart policy", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" }), wantFields: []string{"spec.restartPolicy"}},
		{name: "probe without handler", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1}
		}), wantFields: []string{"spec.containers[0].readinessProbe"}},
		{name: "liveness success threshold", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, SuccessThreshold: 2}
		}), wantFields: []string{"spec.containers[0].livenessProbe.successThreshold"}},
		{name: "env var name and source", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []*corev1.EnvVar{{Name: "1BAD"}, {Name: "OK", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: &corev1.LocalObjectReference{Name: "s"}}}}}
		}), wantFields: []string{"spec.containers[0].env[0].name", "spec.containers[0].env[1].valueFrom.secretKeyRef.key"}},
		{name: "toleration", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) {
			p.Spec.Tolerations = []*corev1.Toleration{{Key: "k", Operator: "Exists", Value: "v", Effect: "Sometimes"}}
		}), wantFields: []string{"spec.tolerations[0].operator", "spec.tolerations[0].effect"}},
		{name: "node affinity", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: []*corev1.NodeSelectorTerm{{MatchExpressions: []*corev1.NodeSelectorRequirement{{Key: "zone", Operator: "In"}}}}},
				PreferredDuringSchedulingIgnoredDuringExecution: []*corev1.PreferredSchedulingTerm{{Weight: 0, Preference: &corev1.NodeSelectorTerm{}}},
			}}
		}), wantFields: []string{"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values", "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"}},
		{name: "pod update may change the image", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) { p.Spec.Containers[0].Image = "nginx:2" }), old: validPod()},
		{name: "pod update may not change the rest of the spec", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) { p.Spec.RestartPolicy = "Never" }), old: validPod(), wantFields: []string{"spec"}},
		{name: "pod update may not set nodeName", resource: "pods", obj: mod(validPod(), func(p *corev1.Pod) { p.Spec.NodeName = "n1" }), old: validPod(), wantFields: []string{"spec"}},
		{name: "valid deployment", resource: "deployments", obj: validDeployment()},
		{name: "deployment selector does not match template", resource: "deployments", obj: modD(validDeployment(), func(d *appsv1.Deployment) {
			d.Spec.Template.Metadata.Labels = map[string]string{"app": "other"}
		}), wantFields: []string{"spec.template.metadata.labels"}},
		{name: "deployment without selector", resource: "deployments", obj: modD(validDeployment(), func(d *appsv1.Deployment) { d.Spec.Selector = nil }), wantFields: []string{"spec.selector"}},
		{name: "deployment negative replicas", resource: "deployments", obj: modD(validDeployment(), func(d *appsv1.Deployment) { d.Spec.Replicas = proto.Int32(-1) }), wantFields: []string{"spec.replicas"}},
		{name: "deployment surge and unavailable both zero", resource: "deployments", obj: modD(validDeployment(), func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: intOrStr("0%"), MaxUnavailable: &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: 0}}}
		}), wantFields: []string{"spec.strategy.rollingUpdate.maxUnavailable"}},
		{name: "deployment bad percentage", resource: "deployments", obj: modD(validDeployment(), func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate.MaxSurge = intOrStr("lots")
		}), wantFields: []string{"spec.strategy.rollingUpdate.maxSurge"}},
		{name: "deployment template restartPolicy", resource: "deployments", obj: modD(validDeployment(), func(d *appsv1.Deployment) { d.Spec.Template.Spec.RestartPolicy = "Never" }), wantFields: []string{"spec.template.spec.restartPolicy"}},
		{name: "deployment selector immutable", resource: "deployments", obj: modD(validDeployment(), func(d *appsv1.Deployment) {
			d.Spec.Selector.MatchLabels["extra"] = "x"
			d.Spec.Template.Metadata.Labels["extra"] = "x"
		}), old: validDeployment(), wantFields: []string{"spec.selector"}},
		{name: "service port range and names", resource: "services", obj: &corev1.Service{Metadata: om("default", "svc"), Spec: &corev1.ServiceSpec{Type: "ClusterIP", Ports: []*corev1.ServicePort{{Port: 0, Protocol: "TCP"}, {Name: "b", Port: 80, Protocol: "TCP"}}}},
			wantFields: []string{"spec.ports[0].name", "spec.ports[0].port"}},
		{name: "service name must be DNS-1035", resource: "services", obj: &corev1.Service{Metadata: om("default", "1svc"), Spec: &corev1.ServiceSpec{Type: "ClusterIP", Ports: []*corev1.ServicePort{{Port: 80, Protocol: "TCP"}}}}, wantFields: []string{"metadata.name"}},
		{name: "configmap key", resource: "configmaps", obj: &corev1.ConfigMap{Metadata: om("default", "c"), Data: map[string]string{"bad key": "v"}}, wantFields: []string{"data[bad key]"}},
		{name: "immutable configmap", resource: "configmaps", obj: &corev1.ConfigMap{Metadata: om("default", "c"), Data: map[string]string{"a": "2"}, Immutable: proto.Bool(true)},
			old: &corev1.ConfigMap{Metadata: om("default", "c"), Data: map[string]string{"a": "1"}, Immutable: proto.Bool(true)}, wantFields: []string{"data"}},
		{name: "namespace name", resource: "namespaces", obj: &corev1.Namespace{Metadata: om("", "a.b")}, wantFields: []string{"metadata.name"}},
		{name: "cluster-scoped with namespace", resource: "nodes", obj: &corev1.Node{Metadata: om("default", "n")}, wantFields: []string{"metadata.namespace"}},
		{name: "node taint effect", resource: "nodes", obj: &corev1.Node{Metadata: om("", "n"), Spec: &corev1.NodeSpec{Taints: []*corev1.Taint{{Key: "k", Effect: "Maybe"}}}}, wantFields: []string{"spec.taints[0].effect"}},
		{name: "lease duration", resource: "leases", obj: &coordinationv1.Lease{Metadata: om("kube-node-lease", "n"), Spec: &coordinationv1.LeaseSpec{LeaseDurationSeconds: proto.Int32(0)}}, wantFields: []string{"spec.leaseDurationSeconds"}},
		{name: "event involved object in another namespace", resource: "events", obj: &corev1.Event{Metadata: om("default", "e"), InvolvedObject: &corev1.ObjectReference{Namespace: "other"}, Type: "Normal"}, wantFields: []string{"involvedObject.namespace"}},
		// Through core/v1 an Event's type is not checked (Kubernetes checks
		// it through events.k8s.io/v1 only: eventsview_test.go).
		{name: "core event of any type", resource: "events", obj: &corev1.Event{Metadata: om("default", "e"), InvolvedObject: &corev1.ObjectReference{Namespace: "default"}, Type: "Bad"}},
		{name: "role rule without verbs", resource: "roles", obj: &rbacv1.Role{Metadata: om("default", "r"), Rules: []*rbacv1.PolicyRule{{ApiGroups: []string{""}, Resources: []string{"pods"}}}}, wantFields: []string{"rules[0].verbs"}},
		{name: "binding roleRef", resource: "clusterrolebindings", obj: &rbacv1.ClusterRoleBinding{Metadata: om("", "b"), RoleRef: &rbacv1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "x"}}, wantFields: []string{"roleRef.kind"}},
		{name: "webhook", resource: "validatingwebhookconfigurations", obj: &admissionregistrationv1.ValidatingWebhookConfiguration{Metadata: om("", "w"), Webhooks: []*admissionregistrationv1.ValidatingWebhook{{
			Name: "nodots", ClientConfig: &admissionregistrationv1.WebhookClientConfig{Url: proto.String("http://x")},
			AdmissionReviewVersions: []string{"v2"}, TimeoutSeconds: proto.Int32(60),
		}}}, wantFields: []string{"webhooks[0].name", "webhooks[0].clientConfig.url", "webhooks[0].sideEffects", "webhooks[0].timeoutSeconds", "webhooks[0].admissionReviewVersions"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateObject(res[tt.resource], tt.obj, tt.old)
			if len(tt.wantFields) == 0 {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				return
			}
			se := apierrors.FromError(err)
			if se == nil || se.Reason != apierrors.ReasonInvalid {
				t.Fatalf("got %v, want Invalid", err)
			}
			var got []string
			for _, c := range se.Causes {
				got = append(got, c.Field)
				if c.Message == "" || c.Type == "" {
					t.Errorf("cause without type or message: %+v", c)
				}
			}
			sort.Strings(got)
			want := append([]string(nil), tt.wantFields...)
			sort.Strings(want)
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("cause fields: got %v, want %v (%s)", got, want, se.Message)
			}
		})
	}
}

func mod(p *corev1.Pod, f func(*corev1.Pod)) *corev1.Pod {
	p = proto.Clone(p).(*corev1.Pod)
	f(p)
	return p
}

func modD(d *appsv1.Deployment, f func(*appsv1.Deployment)) *appsv1.Deployment {
	d = proto.Clone(d).(*appsv1.Deployment)
	f(d)
	return d
}

func TestInvalidMessageIsKubernetes(t *testing.T) {
	p := mod(validPod(), func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" })
	err := validateObject(resourcesByName()["pods"], p, nil)
	if want := `Pod "p" is invalid: spec.containers[0].image: Required value`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

// TestStatusUpdateValidation: a pod status write validates the metadata
// and its update, not the spec it cannot change (as Kubernetes'
// ValidatePodStatusUpdate); a spec that did change (admission) is validated
// in full.
func TestStatusUpdateValidation(t *testing.T) {
	pods := resourcesByName()["pods"]
	old := validPod()
	old.Metadata.Uid = "u1"
	old.Metadata.ResourceVersion = "5"
	running := func(p *corev1.Pod) { p.Status = &corev1.PodStatus{Phase: "Running"} }
	if err := validateStatusUpdate(pods, mod(old, running), old); err != nil {
		t.Errorf("status change: %v", err)
	}
	// Stored before a rule it breaks: its status can still be written.
	stale := mod(old, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" })
	if err := validateStatusUpdate(pods, mod(stale, running), stale); err != nil {
		t.Errorf("status change of a pod whose stored spec is invalid: %v", err)
	}
	for name, tc := range map[string]struct {
		obj   *corev1.Pod
		field string
	}{
		"bad label":    {mod(old, func(p *corev1.Pod) { running(p); p.Metadata.Labels = map[string]string{"-bad": "x"} }), "metadata.labels"},
		"uid changed":  {mod(old, func(p *corev1.Pod) { running(p); p.Metadata.Uid = "u2" }), "metadata.uid"},
		"spec changed": {mod(old, func(p *corev1.Pod) { running(p); p.Spec.Containers[0].Image = "" }), "spec.containers[0].image"},
	} {
		err := validateStatusUpdate(pods, tc.obj, old)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: got %v, want Invalid on %s", name, err, tc.field)
		}
	}
}

// TestStatusValidation: Kubernetes' status rules, in its words: counts of
// a ReplicaSet not negative nor above status.replicas, a Namespace's phase
// Terminating only while it is being deleted.
func TestStatusValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		obj  proto.Message
		want string
	}{
		"replica set": {&appsv1.ReplicaSet{Metadata: &metav1.ObjectMeta{Name: "rs"},
			Status: &appsv1.ReplicaSetStatus{Replicas: 2, FullyLabeledReplicas: 3, ReadyReplicas: 1, AvailableReplicas: 2, ObservedGeneration: -1}},
			`[status.observedGeneration: Invalid value: -1: must be greater than or equal to 0, status.fullyLabeledReplicas: Invalid value: 3: cannot be greater than status.replicas, status.availableReplicas: Invalid value: 2: cannot be greater than readyReplicas]`},
		"active namespace": {&corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "ns"}, Status: &corev1.NamespaceStatus{Phase: "Terminating"}},
			"status.Phase: Invalid value: \"Terminating\": may only be 'Active' if `deletionTimestamp` is empty"},
		"deleted namespace": {&corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "ns", DeletionTimestamp: timestamppb.Now()}, Status: &corev1.NamespaceStatus{Phase: "Active"}},
			"status.Phase: Invalid value: \"Active\": may only be 'Terminating' if `deletionTimestamp` is not empty"},
	} {
		if got := fmt.Sprint(validateStatus(tc.obj).ToAggregate()); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, tc.want)
		}
	}
	ok := &appsv1.Deployment{Metadata: &metav1.ObjectMeta{Name: "d"}, Status: &appsv1.DeploymentStatus{Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2}}
	if errs := validateStatus(ok); len(errs) > 0 {
		t.Errorf("a consistent deployment status: %v", errs)
	}
}
