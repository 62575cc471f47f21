// This file holds the defaults Kubernetes fills in when a client leaves a
// field out, and the status fields it computes on create, such as a pod's
// QoS class.

package apiserver

import (
	"strings"

	"google.golang.org/protobuf/proto"

	admissionregistrationv1 "github.com/kplane/kplane/proto/kplane/admissionregistration/v1"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	schedulingv1 "github.com/kplane/kplane/proto/kplane/scheduling/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
)

// setDefaults fills the fields Kubernetes defaults when a client leaves them
// unset (its SetDefaults_* functions and the create strategies). It is the
// first, built-in, mutating admission step.
func setDefaults(obj proto.Message) {
	switch o := obj.(type) {
	case *corev1.Pod:
		if o.Spec == nil {
			o.Spec = &corev1.PodSpec{}
		}
		defaultPodSpec(o.Spec)
		// As Kubernetes' SetDefaults_Pod (a pod's, not a template's): a
		// container with a limit and no request for a resource requests
		// its limit.
		for _, c := range append(append([]*corev1.Container{}, o.Spec.Containers...), o.Spec.InitContainers...) {
			lim := c.GetResources().GetLimits()
			if lim == nil {
				continue
			}
			if c.Resources.Requests == nil {
				c.Resources.Requests = map[string]string{}
			}
			for k, v := range lim {
				if _, ok := c.Resources.Requests[k]; !ok {
					c.Resources.Requests[k] = v
				}
			}
		}
	case *apiextensionsv1.CustomResourceDefinition:
		defaultCRD(o)
	case *appsv1.Deployment:
		if o.Spec == nil {
			o.Spec = &appsv1.DeploymentSpec{}
		}
		s := o.Spec
		if s.Replicas == nil {
			s.Replicas = proto.Int32(1)
		}
		if s.Strategy == nil {
			s.Strategy = &appsv1.DeploymentStrategy{}
		}
		if s.Strategy.Type == "" {
			s.Strategy.Type = "RollingUpdate"
		}
		if s.Strategy.Type == "RollingUpdate" {
			if s.Strategy.RollingUpdate == nil {
				s.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{}
			}
			ru := s.Strategy.RollingUpdate
			if ru.MaxUnavailable == nil {
				ru.MaxUnavailable = intOrStr("25%")
			}
			if ru.MaxSurge == nil {
				ru.MaxSurge = intOrStr("25%")
			}
		}
		if s.RevisionHistoryLimit == nil {
			s.RevisionHistoryLimit = proto.Int32(10)
		}
		if s.ProgressDeadlineSeconds == nil {
			s.ProgressDeadlineSeconds = proto.Int32(600)
		}
		defaultTemplate(&s.Template)
	case *appsv1.ReplicaSet:
		if o.Spec == nil {
			o.Spec = &appsv1.ReplicaSetSpec{}
		}
		if o.Spec.Replicas == nil {
			o.Spec.Replicas = proto.Int32(1)
		}
		defaultTemplate(&o.Spec.Template)
	case *appsv1.DaemonSet:
		defaultDaemonSet(o)
	case *appsv1.StatefulSet:
		defaultStatefulSet(o)
	case *corev1.PersistentVolumeClaim:
		defaultPersistentVolumeClaim(o)
	case *corev1.PersistentVolume:
		defaultPersistentVolume(o)
	case *storagev1.StorageClass:
		defaultStorageClass(o)
	case *corev1.ReplicationController:
		defaultReplicationController(o)
	case *corev1.Service:
		if o.Spec == nil {
			o.Spec = &corev1.ServiceSpec{}
		}
		s := o.Spec
		if s.Type == "" {
			s.Type = "ClusterIP"
		}
		if s.SessionAffinity == "" {
			s.SessionAffinity = "None"
		}
		if s.InternalTrafficPolicy == nil && s.Type != "ExternalName" {
			s.InternalTrafficPolicy = proto.String("Cluster")
		}
		if (s.Type == "NodePort" || s.Type == "LoadBalancer") && s.ExternalTrafficPolicy == "" {
			s.ExternalTrafficPolicy = "Cluster"
		}
		if s.Type == "LoadBalancer" && s.AllocateLoadBalancerNodePorts == nil {
			s.AllocateLoadBalancerNodePorts = proto.Bool(true)
		}
		for _, p := range s.Ports {
			if p.Protocol == "" {
				p.Protocol = "TCP"
			}
			// As Kubernetes: an unset, zero or empty target port is the port.
			if tp := p.TargetPort; tp == nil || tp.Value == nil || (tp.GetStrVal() == "" && tp.GetIntVal() == 0) {
				p.TargetPort = &metav1.IntOrString{Value: &metav1.IntOrString_IntVal{IntVal: p.Port}}
			}
		}
	case *corev1.Endpoints:
		for _, ss := range o.Subsets {
			for _, p := range ss.Ports {
				if p.Protocol == "" {
					p.Protocol = "TCP"
				}
			}
		}
	case *corev1.Secret:
		if o.Type == "" {
			o.Type = "Opaque"
		}
		// stringData is write-only: merged into data, as Kubernetes does.
		if len(o.StringData) > 0 {
			if o.Data == nil {
				o.Data = map[string][]byte{}
			}
			for k, v := range o.StringData {
				o.Data[k] = []byte(v)
			}
			o.StringData = nil
		}
	case *discoveryv1.EndpointSlice:
		defaultEndpointSlice(o)
	default:
		defaultMoreKinds(obj)
	case *batchv1.Job:
		defaultJob(o)
	case *batchv1.CronJob:
		defaultCronJob(o)
	case *schedulingv1.PriorityClass:
		defaultPriorityClass(o)
	case *corev1.LimitRange:
		defaultLimitRange(o)
	case *corev1.ResourceQuota:
		defaultResourceQuota(o)
	case *corev1.ServiceAccount:
		// As Kubernetes' strategy on create and update: a secrets entry
		// keeps only its name.
		for i, ref := range o.Secrets {
			o.Secrets[i] = &corev1.ObjectReference{Name: ref.GetName()}
		}
	case *corev1.Namespace:
		// As Kubernetes' defaulting and namespace strategy: every named
		// namespace carries its name as the label
		// kubernetes.io/metadata.name (what namespaceSelectors select on).
		if name := o.GetMetadata().GetName(); name != "" {
			if o.Metadata.Labels == nil {
				o.Metadata.Labels = map[string]string{}
			}
			o.Metadata.Labels["kubernetes.io/metadata.name"] = name
		}
		if o.Status == nil {
			o.Status = &corev1.NamespaceStatus{}
		}
		if o.Status.Phase == "" {
			o.Status.Phase = "Active"
		}
	case *rbacv1.RoleBinding:
		defaultBinding(o.GetRoleRef(), o.GetSubjects())
	case *rbacv1.ClusterRoleBinding:
		defaultBinding(o.GetRoleRef(), o.GetSubjects())
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for _, w := range o.Webhooks {
			defaultWebhook(&w.FailurePolicy, &w.MatchPolicy, &w.TimeoutSeconds, &w.NamespaceSelector, &w.ObjectSelector, w.Rules)
			if w.ReinvocationPolicy == nil {
				w.ReinvocationPolicy = proto.String("Never")
			}
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for _, w := range o.Webhooks {
			defaultWebhook(&w.FailurePolicy, &w.MatchPolicy, &w.TimeoutSeconds, &w.NamespaceSelector, &w.ObjectSelector, w.Rules)
		}
	case *admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		defaultPolicyObject(o)
	}
}

// defaultBinding fills a RoleBinding's or ClusterRoleBinding's apiGroups as
// Kubernetes' RBAC defaults do: the roleRef's and every User's and Group's
// are the RBAC group (a ServiceAccount's stays the core group).
func defaultBinding(ref *rbacv1.RoleRef, subjects []*rbacv1.Subject) {
	if ref != nil && ref.ApiGroup == "" {
		ref.ApiGroup = rbacGroup
	}
	for _, s := range subjects {
		if s.ApiGroup == "" && (s.Kind == "User" || s.Kind == "Group") {
			s.ApiGroup = rbacGroup
		}
	}
}

func intOrStr(s string) *metav1.IntOrString {
	return &metav1.IntOrString{Value: &metav1.IntOrString_StrVal{StrVal: s}}
}

func defaultTemplate(t **corev1.PodTemplateSpec) {
	if *t == nil {
		*t = &corev1.PodTemplateSpec{}
	}
	if (*t).Spec == nil {
		(*t).Spec = &corev1.PodSpec{}
	}
	defaultPodSpec((*t).Spec)
}

func defaultPodSpec(s *corev1.PodSpec) {
	if s.RestartPolicy == "" {
		s.RestartPolicy = "Always"
	}
	if s.DnsPolicy == "" {
		s.DnsPolicy = "ClusterFirst"
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = proto.Int64(30)
	}
	if s.SchedulerName == "" {
		s.SchedulerName = "default-scheduler"
	}
	if s.EnableServiceLinks == nil {
		s.EnableServiceLinks = proto.Bool(true)
	}
	if s.SecurityContext == nil {
		// As Kubernetes' SetDefaults_PodSpec: clients read it without a
		// nil check (kubectl debug does).
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	for _, c := range s.InitContainers {
		defaultContainer(c)
	}
	for _, c := range s.Containers {
		defaultContainer(c)
	}
	for _, ec := range s.EphemeralContainers {
		defaultEphemeralContainer(ec)
	}
	for _, t := range s.Tolerations {
		if t.Operator == "" {
			t.Operator = "Equal"
		}
	}
}

func defaultContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = "/dev/termination-log"
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = "File"
	}
	for _, p := range c.Ports {
		if p.Protocol == "" {
			p.Protocol = "TCP"
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
}

// defaultEphemeralContainer applies a container's defaults to the fields
// an ephemeral container shares with one, as Kubernetes' defaulting does.
func defaultEphemeralContainer(ec *corev1.EphemeralContainer) {
	c := ec.GetEphemeralContainerCommon()
	if c == nil {
		return
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = "/dev/termination-log"
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = "File"
	}
}

// defaultPullPolicy is Always for an image tagged :latest or not tagged at
// all (and not pinned by digest), IfNotPresent otherwise.
func defaultPullPolicy(image string) string {
	if strings.Contains(image, "@") {
		return "IfNotPresent"
	}
	name := image
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	tag := ""
	if i := strings.LastIndex(name, ":"); i >= 0 {
		tag = name[i+1:]
	}
	if tag == "" || tag == "latest" {
		return "Always"
	}
	return "IfNotPresent"
}

func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	if h := p.GetHttpGet(); h != nil {
		if h.Path == "" {
			h.Path = "/"
		}
		if h.Scheme == "" {
			h.Scheme = "HTTP"
		}
	}
}

func defaultWebhook(failurePolicy, matchPolicy **string, timeout **int32, nsSel, objSel **metav1.LabelSelector, rules []*admissionregistrationv1.RuleWithOperations) {
	if *failurePolicy == nil {
		*failurePolicy = proto.String("Fail")
	}
	if *matchPolicy == nil {
		*matchPolicy = proto.String("Equivalent")
	}
	if *timeout == nil {
		*timeout = proto.Int32(10)
	}
	if *nsSel == nil {
		*nsSel = &metav1.LabelSelector{}
	}
	if *objSel == nil {
		*objSel = &metav1.LabelSelector{}
	}
	for _, r := range rules {
		if r.Rule == nil {
			r.Rule = &admissionregistrationv1.Rule{}
		}
		if r.Rule.Scope == nil {
			r.Rule.Scope = proto.String("*")
		}
	}
}

// podQOSClass computes status.qosClass as Kubernetes does: BestEffort with
// no requests or limits at all; Guaranteed when every container has cpu and
// memory limits and its requests (if set) equal them; Burstable otherwise.
func podQOSClass(s *corev1.PodSpec) string {
	any, guaranteed := false, true
	for _, c := range append(append([]*corev1.Container{}, s.GetInitContainers()...), s.GetContainers()...) {
		req, lim := c.GetResources().GetRequests(), c.GetResources().GetLimits()
		for _, r := range []string{"cpu", "memory"} {
			if req[r] != "" || lim[r] != "" {
				any = true
			}
			if lim[r] == "" || (req[r] != "" && !quantityEqual(req[r], lim[r])) {
				guaranteed = false
			}
		}
	}
	switch {
	case !any:
		return "BestEffort"
	case guaranteed:
		return "Guaranteed"
	}
	return "Burstable"
}
