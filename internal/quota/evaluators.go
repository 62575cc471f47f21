// Package quota holds what the API service's ResourceQuota admission and
// the resource quota controller share: the evaluators that measure what an
// object uses (pods, services and plain object counts, as Kubernetes'
// pkg/quota/v1/evaluator/core measures them, on k8s.io/apiserver's
// quota.Evaluator interface) and the conversion of kplane's stored objects
// to the k8s.io/api types those evaluators read.
package quota

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	quotav1 "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Ignored are the resources quota never counts, as Kubernetes' default
// list: virtual resources that are not stored, and events.
var ignored = map[schema.GroupResource]bool{
	{Resource: "bindings"}: true, {Resource: "componentstatuses"}: true, {Resource: "events"}: true,
	{Group: "events.k8s.io", Resource: "events"}:                           true,
	{Group: "authentication.k8s.io", Resource: "tokenreviews"}:             true,
	{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}:       true,
	{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}:      true,
	{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}:  true,
	{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"}: true,
	{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"}:   true,
}

// Ignored reports whether quota leaves gr alone.
func Ignored(gr schema.GroupResource) bool { return ignored[gr] }

// legacyAliases are the plain counts that also answer to their pre-count/
// names in a quota's hard list.
var legacyAliases = map[string]corev1.ResourceName{
	"configmaps":             corev1.ResourceConfigMaps,
	"resourcequotas":         corev1.ResourceQuotas,
	"replicationcontrollers": corev1.ResourceReplicationControllers,
	"secrets":                corev1.ResourceSecrets,
	"persistentvolumeclaims": corev1.ResourcePersistentVolumeClaims,
}

// ListFunc lists a namespace's objects of one resource as k8s.io/api
// objects (typed for pods and services, Unstructured otherwise). The
// controller passes one; admission, which never lists, passes nil.
type ListFunc func(gr schema.GroupResource, namespace string) ([]runtime.Object, error)

// Evaluator returns the evaluator of gr: pods and services measure more
// than a count; every other resource is counted as count/<resource>.<group>
// (and its legacy alias).
func Evaluator(gr schema.GroupResource, list ListFunc, now func() time.Time) quotav1.Evaluator {
	var byNS generic.ListFuncByNamespace
	if list != nil {
		byNS = func(ns string) ([]runtime.Object, error) { return list(gr, ns) }
	}
	switch {
	case gr.Group == "" && gr.Resource == "pods":
		return &podEvaluator{list: byNS, now: now}
	case gr.Group == "" && gr.Resource == "services":
		return &serviceEvaluator{list: byNS}
	}
	alias := corev1.ResourceName("")
	if gr.Group == "" {
		alias = legacyAliases[gr.Resource]
	}
	return generic.NewObjectCountEvaluator(gr, byNS, alias)
}

var podCountName = generic.ObjectCountQuotaResourceNameFor(schema.GroupResource{Resource: "pods"})

// podResources are the quota resources a pod is measured in.
var podResources = []corev1.ResourceName{
	podCountName, corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceRequestsEphemeralStorage,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage, corev1.ResourcePods,
}

// constrained are the resources a quota makes every container state.
var constrained = sets.NewString(string(corev1.ResourceCPU), string(corev1.ResourceMemory),
	string(corev1.ResourceRequestsCPU), string(corev1.ResourceRequestsMemory),
	string(corev1.ResourceLimitsCPU), string(corev1.ResourceLimitsMemory))

// podEvaluator measures pods: the count, and the requests and limits of
// pods that are not finished.
type podEvaluator struct {
	list generic.ListFuncByNamespace
	now  func() time.Time
}

var _ quotav1.Evaluator = (*podEvaluator)(nil)

func asPod(obj runtime.Object) (*corev1.Pod, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("quota: expected a *v1.Pod, got %T", obj)
	}
	return p, nil
}

// Constraints refuses a pod with a container that leaves unset a request
// or limit a matching quota tracks.
func (e *podEvaluator) Constraints(required []corev1.ResourceName, obj runtime.Object) error {
	pod, err := asPod(obj)
	if err != nil {
		return err
	}
	want := quotav1.ToSet(required).Intersection(constrained)
	missing := map[string]sets.String{}
	check := func(c *corev1.Container) {
		have := quotav1.ToSet(quotav1.ResourceNames(computeUsage(c.Resources.Requests, c.Resources.Limits)))
		for _, r := range want.Difference(have).List() {
			if missing[r] == nil {
				missing[r] = sets.NewString()
			}
			missing[r].Insert(c.Name)
		}
	}
	for i := range pod.Spec.Containers {
		check(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		check(&pod.Spec.InitContainers[i])
	}
	if len(missing) == 0 {
		return nil
	}
	names := sets.StringKeySet(missing).List()
	parts := make([]string, 0, len(names))
	for _, r := range names {
		parts = append(parts, fmt.Sprintf("%s for: %s", r, strings.Join(missing[r].List(), ",")))
	}
	return fmt.Errorf("must specify %s", strings.Join(parts, "; "))
}

func (e *podEvaluator) GroupResource() schema.GroupResource {
	return schema.GroupResource{Resource: "pods"}
}

// Handles: a pod's creation, and an update that makes it terminating or
// not (activeDeadlineSeconds).
func (e *podEvaluator) Handles(a admission.Attributes) bool {
	if a.GetSubresource() != "" {
		return false
	}
	if a.GetOperation() == admission.Update {
		p, err1 := asPod(a.GetObject())
		o, err2 := asPod(a.GetOldObject())
		return err1 == nil && err2 == nil && terminating(p) != terminating(o)
	}
	return a.GetOperation() == admission.Create
}

func (e *podEvaluator) Matches(q *corev1.ResourceQuota, obj runtime.Object) (bool, error) {
	return generic.Matches(q, obj, e.MatchingResources, podMatchesScope)
}

func (e *podEvaluator) MatchingResources(in []corev1.ResourceName) []corev1.ResourceName {
	out := quotav1.Intersection(in, podResources)
	for _, r := range in {
		if quotav1.ContainsPrefix([]string{corev1.ResourceHugePagesPrefix, corev1.ResourceRequestsHugePagesPrefix}, r) {
			out = append(out, r)
		}
		if strings.Contains(string(r), "/") && !strings.Contains(string(r), corev1.ResourceDefaultNamespacePrefix) &&
			strings.HasPrefix(string(r), corev1.DefaultResourceRequestsPrefix) {
			out = append(out, r)
		}
	}
	return out
}

func (e *podEvaluator) MatchingScopes(obj runtime.Object, sels []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	out := []corev1.ScopedResourceSelectorRequirement{}
	for _, s := range sels {
		ok, err := podMatchesScope(s, obj)
		if err != nil {
			return nil, fmt.Errorf("quota: matching scope %v: %w", s, err)
		}
		if ok {
			out = append(out, s)
		}
	}
	return out, nil
}

func (e *podEvaluator) UncoveredQuotaScopes(limited, matched []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	out := []corev1.ScopedResourceSelectorRequirement{}
	for _, l := range limited {
		covered := false
		for _, m := range matched {
			if m.ScopeName == l.ScopeName {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, l)
		}
	}
	return out, nil
}

// Usage is a pod's count, and unless it has finished (or is past its
// deletion grace period) its requests and limits.
func (e *podEvaluator) Usage(obj runtime.Object) (corev1.ResourceList, error) {
	pod, err := asPod(obj)
	if err != nil {
		return nil, err
	}
	out := corev1.ResourceList{podCountName: *resource.NewQuantity(1, resource.DecimalSI)}
	if !counts(pod, e.now) {
		return out, nil
	}
	// As kube-apiserver v1.33's feature gates: InPlacePodVerticalScaling
	// on (what a resized container was given counts), PodLevelResources off.
	opts := resourcehelper.PodResourcesOptions{UseStatusResources: true, SkipPodLevelResources: true}
	return quotav1.Add(out, computeUsage(resourcehelper.PodRequests(pod, opts), resourcehelper.PodLimits(pod, opts))), nil
}

func (e *podEvaluator) UsageStats(o quotav1.UsageStatsOptions) (quotav1.UsageStats, error) {
	return generic.CalculateUsageStats(o, e.list, podMatchesScope, e.Usage)
}

// counts reports whether a pod's compute resources are charged: not once
// it has succeeded or failed, nor once its deletion grace period is over.
func counts(pod *corev1.Pod, now func() time.Time) bool {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return false
	}
	if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil && now != nil {
		grace := time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		if now().After(pod.DeletionTimestamp.Add(grace)) {
			return false
		}
	}
	return true
}

// computeUsage names requests and limits as quota does: cpu is also
// requests.cpu, and so on.
func computeUsage(req, lim corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(1, resource.DecimalSI)}
	for _, r := range []struct {
		name            corev1.ResourceName
		plain, req, lim corev1.ResourceName
	}{
		{corev1.ResourceCPU, corev1.ResourceCPU, corev1.ResourceRequestsCPU, corev1.ResourceLimitsCPU},
		{corev1.ResourceMemory, corev1.ResourceMemory, corev1.ResourceRequestsMemory, corev1.ResourceLimitsMemory},
		{corev1.ResourceEphemeralStorage, corev1.ResourceEphemeralStorage, corev1.ResourceRequestsEphemeralStorage, corev1.ResourceLimitsEphemeralStorage},
	} {
		if q, ok := req[r.name]; ok {
			out[r.plain] = q
			out[r.req] = q
		}
		if q, ok := lim[r.name]; ok {
			out[r.lim] = q
		}
	}
	for name, q := range req {
		if strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			out[name] = q
			out[corev1.ResourceName(corev1.DefaultResourceRequestsPrefix+string(name))] = q
		}
		if extended(name) {
			out[corev1.ResourceName(corev1.DefaultResourceRequestsPrefix+string(name))] = q
		}
	}
	return out
}

// extended reports an extended resource (example.com/gpu): outside
// kubernetes.io and not itself a requests. name.
func extended(name corev1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) &&
		!strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix)
}

func terminating(pod *corev1.Pod) bool {
	return pod.Spec.ActiveDeadlineSeconds != nil && *pod.Spec.ActiveDeadlineSeconds >= 0
}

// bestEffort: no container (nor init container) requests or limits cpu or
// memory.
func bestEffort(pod *corev1.Pod) bool {
	all := append(append([]corev1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...)
	for _, c := range all {
		for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
			for name, q := range l {
				if (name == corev1.ResourceCPU || name == corev1.ResourceMemory) && !q.IsZero() {
					return false
				}
			}
		}
	}
	if r := pod.Spec.Resources; r != nil {
		for _, l := range []corev1.ResourceList{r.Requests, r.Limits} {
			for name, q := range l {
				if (name == corev1.ResourceCPU || name == corev1.ResourceMemory) && !q.IsZero() {
					return false
				}
			}
		}
	}
	return true
}

// podMatchesScope reports whether a pod is inside one scope of a quota.
func podMatchesScope(s corev1.ScopedResourceSelectorRequirement, obj runtime.Object) (bool, error) {
	pod, err := asPod(obj)
	if err != nil {
		return false, err
	}
	switch s.ScopeName {
	case corev1.ResourceQuotaScopeTerminating:
		return terminating(pod), nil
	case corev1.ResourceQuotaScopeNotTerminating:
		return !terminating(pod), nil
	case corev1.ResourceQuotaScopeBestEffort:
		return bestEffort(pod), nil
	case corev1.ResourceQuotaScopeNotBestEffort:
		return !bestEffort(pod), nil
	case corev1.ResourceQuotaScopePriorityClass:
		if s.Operator == corev1.ScopeSelectorOpExists {
			return pod.Spec.PriorityClassName != "", nil
		}
		sel, err := scopeSelector(s)
		if err != nil {
			return false, err
		}
		var set labels.Set
		if pod.Spec.PriorityClassName != "" {
			set = labels.Set{string(corev1.ResourceQuotaScopePriorityClass): pod.Spec.PriorityClassName}
		}
		return sel.Matches(set), nil
	case corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return crossNamespaceAffinity(pod), nil
	}
	return false, nil
}

// scopeSelector turns one scope selector requirement into a label
// selector over the scope's name.
func scopeSelector(s corev1.ScopedResourceSelectorRequirement) (labels.Selector, error) {
	var op selection.Operator
	switch s.Operator {
	case corev1.ScopeSelectorOpIn:
		op = selection.In
	case corev1.ScopeSelectorOpNotIn:
		op = selection.NotIn
	case corev1.ScopeSelectorOpExists:
		op = selection.Exists
	case corev1.ScopeSelectorOpDoesNotExist:
		op = selection.DoesNotExist
	default:
		return nil, fmt.Errorf("%q is not a valid scope selector operator", s.Operator)
	}
	r, err := labels.NewRequirement(string(s.ScopeName), op, s.Values)
	if err != nil {
		return nil, fmt.Errorf("quota: scope selector: %w", err)
	}
	return labels.NewSelector().Add(*r), nil
}

func crossNamespaceAffinity(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	if a == nil {
		return false
	}
	cross := func(t corev1.PodAffinityTerm) bool { return len(t.Namespaces) != 0 || t.NamespaceSelector != nil }
	var terms []corev1.PodAffinityTerm
	if a.PodAffinity != nil {
		terms = append(terms, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	if a.PodAntiAffinity != nil {
		terms = append(terms, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	for _, t := range terms {
		if cross(t) {
			return true
		}
	}
	return false
}

var serviceCountName = generic.ObjectCountQuotaResourceNameFor(schema.GroupResource{Resource: "services"})

var serviceResources = []corev1.ResourceName{serviceCountName, corev1.ResourceServices,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers}

// serviceEvaluator measures Services: the count, their node ports and
// whether they are load balancers.
type serviceEvaluator struct {
	list generic.ListFuncByNamespace
}

var _ quotav1.Evaluator = (*serviceEvaluator)(nil)

func (e *serviceEvaluator) Constraints([]corev1.ResourceName, runtime.Object) error { return nil }
func (e *serviceEvaluator) GroupResource() schema.GroupResource {
	return schema.GroupResource{Resource: "services"}
}

func (e *serviceEvaluator) Handles(a admission.Attributes) bool {
	return a.GetSubresource() == "" && (a.GetOperation() == admission.Create || a.GetOperation() == admission.Update)
}

func (e *serviceEvaluator) Matches(q *corev1.ResourceQuota, obj runtime.Object) (bool, error) {
	return generic.Matches(q, obj, e.MatchingResources, generic.MatchesNoScopeFunc)
}

func (e *serviceEvaluator) MatchingResources(in []corev1.ResourceName) []corev1.ResourceName {
	return quotav1.Intersection(in, serviceResources)
}

func (e *serviceEvaluator) MatchingScopes(runtime.Object, []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	return []corev1.ScopedResourceSelectorRequirement{}, nil
}

func (e *serviceEvaluator) UncoveredQuotaScopes(_, _ []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	return []corev1.ScopedResourceSelectorRequirement{}, nil
}

func (e *serviceEvaluator) Usage(obj runtime.Object) (corev1.ResourceList, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, fmt.Errorf("quota: expected a *v1.Service, got %T", obj)
	}
	one := *resource.NewQuantity(1, resource.DecimalSI)
	out := corev1.ResourceList{
		serviceCountName: one, corev1.ResourceServices: one,
		corev1.ResourceServicesLoadBalancers: {Format: resource.DecimalSI},
		corev1.ResourceServicesNodePorts:     {Format: resource.DecimalSI},
	}
	ports := int64(len(svc.Spec.Ports))
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		out[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(ports, resource.DecimalSI)
	case corev1.ServiceTypeLoadBalancer:
		if a := svc.Spec.AllocateLoadBalancerNodePorts; a != nil && !*a {
			n := int64(0)
			for _, p := range svc.Spec.Ports {
				if p.NodePort != 0 {
					n++
				}
			}
			ports = n
		}
		out[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(ports, resource.DecimalSI)
		out[corev1.ResourceServicesLoadBalancers] = one
	}
	return out, nil
}

func (e *serviceEvaluator) UsageStats(o quotav1.UsageStatsOptions) (quotav1.UsageStats, error) {
	return generic.CalculateUsageStats(o, e.list, generic.MatchesNoScopeFunc, e.Usage)
}
