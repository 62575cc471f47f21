// This file holds the validation of pods as Kubernetes checks them: the pod
// spec (volumes, affinity, containers, probes, ports) and which fields an
// update may change.

package apiserver

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

func validatePodSpec(s *corev1.PodSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s == nil {
		return field.ErrorList{field.Required(p, "")}
	}
	if len(s.GetContainers()) == 0 {
		errs = append(errs, field.Required(p.Child("containers"), ""))
	}
	names := sets.New[string]()
	errs = append(errs, validateContainers(s.GetInitContainers(), p.Child("initContainers"), names, true)...)
	errs = append(errs, validateContainers(s.GetContainers(), p.Child("containers"), names, false)...)
	errs = append(errs, validateEphemeralContainers(s, p.Child("ephemeralContainers"))...)
	errs = append(errs, validateEnum(s.GetRestartPolicy(), p.Child("restartPolicy"), true, "Always", "OnFailure", "Never")...)
	errs = append(errs, validateEnum(s.GetDnsPolicy(), p.Child("dnsPolicy"), true, "ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")...)
	if g := s.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		errs = append(errs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *g, "must be greater than or equal to 0"))
	}
	if d := s.ActiveDeadlineSeconds; d != nil && *d <= 0 {
		errs = append(errs, field.Invalid(p.Child("activeDeadlineSeconds"), *d, "must be between 1 and 2147483647, inclusive"))
	}
	errs = append(errs, validateLabels(s.GetNodeSelector(), p.Child("nodeSelector"))...)
	if n := s.GetNodeName(); n != "" {
		for _, msg := range validation.IsDNS1123Subdomain(n) {
			errs = append(errs, field.Invalid(p.Child("nodeName"), n, msg))
		}
	}
	if n := s.GetServiceAccountName(); n != "" {
		for _, msg := range validation.IsDNS1123Subdomain(n) {
			errs = append(errs, field.Invalid(p.Child("serviceAccountName"), n, msg))
		}
	}
	for i, t := range s.GetTolerations() {
		errs = append(errs, validateToleration(t, p.Child("tolerations").Index(i))...)
	}
	if na := s.GetAffinity().GetNodeAffinity(); na != nil {
		ap := p.Child("affinity", "nodeAffinity")
		if req := na.GetRequiredDuringSchedulingIgnoredDuringExecution(); req != nil {
			rp := ap.Child("requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
			if len(req.GetNodeSelectorTerms()) == 0 {
				errs = append(errs, field.Required(rp, "must have at least one node selector term"))
			}
			for i, t := range req.GetNodeSelectorTerms() {
				errs = append(errs, validateNodeSelectorTerm(t, rp.Index(i))...)
			}
		}
		for i, pt := range na.GetPreferredDuringSchedulingIgnoredDuringExecution() {
			pp := ap.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
			if pt.GetWeight() < 1 || pt.GetWeight() > 100 {
				errs = append(errs, field.Invalid(pp.Child("weight"), pt.GetWeight(), "must be in the range 1-100"))
			}
			errs = append(errs, validateNodeSelectorTerm(pt.GetPreference(), pp.Child("preference"))...)
		}
	}
	vols := sets.New[string]()
	for i, v := range s.GetVolumes() {
		vp := p.Child("volumes").Index(i)
		for _, msg := range validation.IsDNS1123Label(v.GetName()) {
			errs = append(errs, field.Invalid(vp.Child("name"), v.GetName(), msg))
		}
		if vols.Has(v.GetName()) {
			errs = append(errs, field.Duplicate(vp.Child("name"), v.GetName()))
		}
		vols.Insert(v.GetName())
	}
	return errs
}

func validateNodeSelectorTerm(t *corev1.NodeSelectorTerm, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range t.GetMatchExpressions() {
		rp := p.Child("matchExpressions").Index(i)
		errs = append(errs, validateLabelKey(r.GetKey(), rp.Child("key"))...)
		switch r.GetOperator() {
		case "In", "NotIn":
			if len(r.GetValues()) == 0 {
				errs = append(errs, field.Required(rp.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'"))
			}
		case "Exists", "DoesNotExist":
			if len(r.GetValues()) > 0 {
				errs = append(errs, field.Forbidden(rp.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
			}
		case "Gt", "Lt":
			if len(r.GetValues()) != 1 {
				errs = append(errs, field.Required(rp.Child("values"), "must be specified single value when `operator` is 'Lt' or 'Gt'"))
			}
		default:
			errs = append(errs, field.Invalid(rp.Child("operator"), r.GetOperator(), "not a valid selector operator"))
		}
	}
	return errs
}

func validateContainers(cs []*corev1.Container, p *field.Path, names sets.Set[string], init bool) field.ErrorList {
	var errs field.ErrorList
	for i, c := range cs {
		cp := p.Index(i)
		if c.GetName() == "" {
			errs = append(errs, field.Required(cp.Child("name"), ""))
		} else {
			for _, msg := range validation.IsDNS1123Label(c.GetName()) {
				errs = append(errs, field.Invalid(cp.Child("name"), c.GetName(), msg))
			}
			if names.Has(c.GetName()) {
				errs = append(errs, field.Duplicate(cp.Child("name"), c.GetName()))
			}
			names.Insert(c.GetName())
		}
		if strings.TrimSpace(c.GetImage()) == "" {
			errs = append(errs, field.Required(cp.Child("image"), ""))
		}
		errs = append(errs, validateEnum(c.GetImagePullPolicy(), cp.Child("imagePullPolicy"), true, "Always", "IfNotPresent", "Never")...)
		portNames := sets.New[string]()
		for j, port := range c.GetPorts() {
			pp := cp.Child("ports").Index(j)
			if port.GetName() != "" {
				for _, msg := range validation.IsValidPortName(port.GetName()) {
					errs = append(errs, field.Invalid(pp.Child("name"), port.GetName(), msg))
				}
				if portNames.Has(port.GetName()) {
					errs = append(errs, field.Duplicate(pp.Child("name"), port.GetName()))
				}
				portNames.Insert(port.GetName())
			}
			for _, msg := range validation.IsValidPortNum(int(port.GetContainerPort())) {
				errs = append(errs, field.Invalid(pp.Child("containerPort"), port.GetContainerPort(), msg))
			}
			if port.GetHostPort() != 0 {
				for _, msg := range validation.IsValidPortNum(int(port.GetHostPort())) {
					errs = append(errs, field.Invalid(pp.Child("hostPort"), port.GetHostPort(), msg))
				}
			}
			errs = append(errs, validateEnum(port.GetProtocol(), pp.Child("protocol"), true, "TCP", "UDP", "SCTP")...)
		}
		for j, e := range c.GetEnv() {
			ep := cp.Child("env").Index(j)
			if e.GetName() == "" {
				errs = append(errs, field.Required(ep.Child("name"), ""))
			} else {
				for _, msg := range validation.IsEnvVarName(e.GetName()) {
					errs = append(errs, field.Invalid(ep.Child("name"), e.GetName(), msg))
				}
			}
			if vf := e.GetValueFrom(); vf != nil {
				n := 0
				for _, set := range []bool{vf.FieldRef != nil, vf.ConfigMapKeyRef != nil, vf.SecretKeyRef != nil, vf.ResourceFieldRef != nil} {
					if set {
						n++
					}
				}
				if e.GetValue() != "" {
					errs = append(errs, field.Invalid(ep.Child("valueFrom"), "", "may not be specified when `value` is not empty"))
				}
				if n != 1 {
					errs = append(errs, field.Invalid(ep.Child("valueFrom"), "", "may not have more than one field specified at a time"))
				}
				if vf.FieldRef != nil && vf.FieldRef.GetFieldPath() == "" {
					errs = append(errs, field.Required(ep.Child("valueFrom", "fieldRef", "fieldPath"), ""))
				}
				if r := vf.ConfigMapKeyRef; r != nil && r.GetKey() == "" {
					errs = append(errs, field.Required(ep.Child("valueFrom", "configMapKeyRef", "key"), ""))
				}
				if r := vf.SecretKeyRef; r != nil && r.GetKey() == "" {
					errs = append(errs, field.Required(ep.Child("valueFrom", "secretKeyRef", "key"), ""))
				}
			}
		}
		rp := cp.Child("resources")
		req, lim := c.GetResources().GetRequests(), c.GetResources().GetLimits()
		for k, v := range req {
			errs = append(errs, validateQuantity(v, rp.Child("requests").Key(k))...)
		}
		for k, v := range lim {
			errs = append(errs, validateQuantity(v, rp.Child("limits").Key(k))...)
		}
		for k, v := range req {
			l, ok := lim[k]
			if !ok {
				continue
			}
			qr, err1 := resource.ParseQuantity(v)
			ql, err2 := resource.ParseQuantity(l)
			if err1 == nil && err2 == nil && qr.Cmp(ql) > 0 {
				errs = append(errs, field.Invalid(rp.Child("requests").Key(k), v, fmt.Sprintf("must be less than or equal to %s limit of %s", k, l)))
			}
		}
		probes := []struct {
			name string
			p    *corev1.Probe
		}{{"livenessProbe", c.GetLivenessProbe()}, {"readinessProbe", c.GetReadinessProbe()}, {"startupProbe", c.GetStartupProbe()}}
		for _, pr := range probes {
			if pr.p == nil {
				continue
			}
			if init {
				errs = append(errs, field.Forbidden(cp.Child(pr.name), "may not be set for init containers"))
				continue
			}
			errs = append(errs, validateProbe(pr.p, cp.Child(pr.name), pr.name == "livenessProbe" || pr.name == "startupProbe")...)
		}
	}
	return errs
}

func validateProbe(pr *corev1.Probe, p *field.Path, successMustBeOne bool) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if pr.GetExec() != nil {
		n++
		if len(pr.GetExec().GetCommand()) == 0 {
			errs = append(errs, field.Required(p.Child("exec", "command"), ""))
		}
	}
	if h := pr.GetHttpGet(); h != nil {
		n++
		errs = append(errs, validatePortRef(h.GetPort(), p.Child("httpGet", "port"))...)
		errs = append(errs, validateEnum(h.GetScheme(), p.Child("httpGet", "scheme"), true, "HTTP", "HTTPS")...)
	}
	if t := pr.GetTcpSocket(); t != nil {
		n++
		errs = append(errs, validatePortRef(t.GetPort(), p.Child("tcpSocket", "port"))...)
	}
	if g := pr.GetGrpc(); g != nil {
		n++
		for _, msg := range validation.IsValidPortNum(int(g.GetPort())) {
			errs = append(errs, field.Invalid(p.Child("grpc", "port"), g.GetPort(), msg))
		}
	}
	switch {
	case n == 0:
		errs = append(errs, field.Required(p, "must specify a handler type"))
	case n > 1:
		errs = append(errs, field.Forbidden(p, "may not specify more than 1 handler type"))
	}
	for _, f := range []struct {
		name string
		v    int32
		min  int32
	}{{"initialDelaySeconds", pr.InitialDelaySeconds, 0}, {"timeoutSeconds", pr.TimeoutSeconds, 0}, {"periodSeconds", pr.PeriodSeconds, 0}, {"successThreshold", pr.SuccessThreshold, 0}, {"failureThreshold", pr.FailureThreshold, 0}} {
		if f.v < f.min {
			errs = append(errs, field.Invalid(p.Child(f.name), f.v, "must be greater than or equal to 0"))
		}
	}
	if successMustBeOne && pr.SuccessThreshold != 1 {
		errs = append(errs, field.Invalid(p.Child("successThreshold"), pr.SuccessThreshold, "must be 1"))
	}
	return errs
}

func validatePortRef(port *metav1.IntOrString, p *field.Path) field.ErrorList {
	switch v := port.GetValue().(type) {
	case *metav1.IntOrString_IntVal:
		var errs field.ErrorList
		for _, msg := range validation.IsValidPortNum(int(v.IntVal)) {
			errs = append(errs, field.Invalid(p, v.IntVal, msg))
		}
		return errs
	case *metav1.IntOrString_StrVal:
		var errs field.ErrorList
		for _, msg := range validation.IsValidPortName(v.StrVal) {
			errs = append(errs, field.Invalid(p, v.StrVal, msg))
		}
		return errs
	}
	return field.ErrorList{field.Required(p, "")}
}

// validatePodUpdate enforces that a pod's spec is immutable except for
// container images, activeDeadlineSeconds and added tolerations, as in
// Kubernetes. spec.nodeName changes only through pods/binding.
func validatePodUpdate(pod, old *corev1.Pod) field.ErrorList {
	a := proto.Clone(pod.GetSpec()).(*corev1.PodSpec)
	b := proto.Clone(old.GetSpec()).(*corev1.PodSpec)
	if a == nil || b == nil {
		return nil
	}
	for i, c := range a.Containers {
		if i < len(b.Containers) {
			c.Image = b.Containers[i].Image
		}
	}
	for i, c := range a.InitContainers {
		if i < len(b.InitContainers) {
			c.Image = b.InitContainers[i].Image
		}
	}
	a.ActiveDeadlineSeconds = b.ActiveDeadlineSeconds
	if len(a.Tolerations) >= len(b.Tolerations) {
		prefixEqual := true
		for i := range b.Tolerations {
			if !proto.Equal(a.Tolerations[i], b.Tolerations[i]) {
				prefixEqual = false
			}
		}
		if prefixEqual {
			a.Tolerations = b.Tolerations
		}
	}
	if proto.Equal(a, b) {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec"), "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations)")}
}
