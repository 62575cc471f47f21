// This file holds the LimitRanger admission plugin, as Kubernetes': a new
// pod's containers get the default requests and limits of the namespace's
// LimitRanges (noted in the kubernetes.io/limit-ranger annotation), then
// pods and PersistentVolumeClaims are held to their min, max and
// limit/request ratio.

package apiserver

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/kplane/kplane/internal/quota"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/request"
)

const limitRangerAnnotation = "kubernetes.io/limit-ranger"

// limitRangeLiveTTL is how long a live lookup of a namespace's
// LimitRanges is used, as Kubernetes' LimitRanger keeps its own (30 s).
const limitRangeLiveTTL = 30 * time.Second

// liveLimitRanges are the namespaces' LimitRanges read from the store when
// the watch cache had none, with when each read stops being used.
type liveLimitRanges struct {
	mu   sync.Mutex
	byNS map[string]liveLimitRangeEntry
}

type liveLimitRangeEntry struct {
	items []*corev1.LimitRange
	until time.Time
}

// limitRanges are the namespace's LimitRanges, from the watch cache, in
// name order. They are shared: callers must not change them. When the
// cache has none, they are read from the store (and that read used for
// limitRangeLiveTTL), as Kubernetes' LimitRanger falls back from its
// informer to a live list: a LimitRange created through another replica,
// or a moment before, may not have reached the cache.
func (s *Server) limitRanges(ctx context.Context, ns string) ([]*corev1.LimitRange, error) {
	ch := s.cachers["limitranges"]
	if err := ch.waitReady(ctx); err != nil {
		return nil, err
	}
	items, _ := ch.snapshot(func(m proto.Message) bool { return meta(m).GetNamespace() == ns })
	if len(items) == 0 {
		return s.liveLimitRanges(ctx, ns)
	}
	out := make([]*corev1.LimitRange, len(items))
	for i, it := range items {
		out[i] = it.(*corev1.LimitRange)
	}
	return out, nil
}

// liveLimitRanges reads the namespace's LimitRanges from the store, or
// answers a read of less than limitRangeLiveTTL ago.
func (s *Server) liveLimitRanges(ctx context.Context, ns string) ([]*corev1.LimitRange, error) {
	l := &s.limitRangesLive
	now := time.Now()
	l.mu.Lock()
	e, ok := l.byNS[ns]
	l.mu.Unlock()
	if ok && now.Before(e.until) {
		return e.items, nil
	}
	page, err := s.store.list(ctx, s.resources["limitranges"], ns, 0, "", 0, nil)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.LimitRange, 0, len(page.items))
	for _, it := range page.items {
		out = append(out, it.(*corev1.LimitRange))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetMetadata().GetName() < out[j].GetMetadata().GetName() })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byNS == nil {
		l.byNS = map[string]liveLimitRangeEntry{}
	}
	if len(l.byNS) > 10000 {
		clear(l.byNS) // bounded, as Kubernetes' LRU of 4096
	}
	l.byNS[ns] = liveLimitRangeEntry{items: out, until: now.Add(limitRangeLiveTTL)}
	return out, nil
}

// limitRangerApplies says whether the plugin looks at a request: pods on
// create, PersistentVolumeClaims on create and update (validation only).
func limitRangerApplies(a *request.Admission) bool {
	if a.Subresource != "" || a.APIGroup != "" || a.Object == nil {
		return false
	}
	if a.OldObject != nil && meta(a.OldObject).GetDeletionTimestamp() != nil {
		return false
	}
	switch a.Resource {
	case "pods":
		return a.Operation == request.Create
	case "persistentvolumeclaims":
		return a.Operation == request.Create || a.Operation == request.Update
	}
	return false
}

// admitLimitRanges sets the Container defaults of every LimitRange in the
// pod's namespace on the containers that leave them unset.
func (s *Server) admitLimitRanges(ctx context.Context, a *request.Admission) error {
	if !limitRangerApplies(a) {
		return nil
	}
	pod, ok := a.Object.(*corev1.Pod)
	if !ok {
		return nil
	}
	lrs, err := s.limitRanges(ctx, a.Namespace)
	if err != nil {
		return err
	}
	for _, lr := range lrs {
		req, lim := map[string]string{}, map[string]string{}
		for _, l := range lr.GetSpec().GetLimits() {
			if l.GetType() != "Container" {
				continue
			}
			for k, v := range l.GetDefaultRequest() {
				req[k] = canonicalQuantity(v)
			}
			for k, v := range l.GetDefault() {
				lim[k] = canonicalQuantity(v)
			}
		}
		var notes []string
		if pod.Spec == nil {
			pod.Spec = &corev1.PodSpec{}
		}
		for _, c := range pod.Spec.Containers {
			notes = mergeDefaults(c, req, lim, "container", notes)
		}
		for _, c := range pod.Spec.InitContainers {
			notes = mergeDefaults(c, req, lim, "init container", notes)
		}
		if len(notes) > 0 {
			m := meta(pod)
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[limitRangerAnnotation] = "LimitRanger plugin set: " + strings.Join(notes, "; ")
		}
	}
	return nil
}

func canonicalQuantity(v string) string {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return v
	}
	return q.String()
}

// mergeDefaults fills c's unset requests and limits from req and lim and
// appends what it set to notes, in the annotation's words.
func mergeDefaults(c *corev1.Container, req, lim map[string]string, what string, notes []string) []string {
	if c.Resources == nil {
		c.Resources = &corev1.ResourceRequirements{}
	}
	r := c.Resources
	var setReq, setLim []string
	for k, v := range lim {
		if _, ok := r.Limits[k]; !ok {
			if r.Limits == nil {
				r.Limits = map[string]string{}
			}
			r.Limits[k] = v
			setLim = append(setLim, k)
		}
	}
	for k, v := range req {
		if _, ok := r.Requests[k]; !ok {
			if r.Requests == nil {
				r.Requests = map[string]string{}
			}
			r.Requests[k] = v
			setReq = append(setReq, k)
		}
	}
	if len(setReq) > 0 {
		sort.Strings(setReq)
		notes = append(notes, strings.Join(setReq, ", ")+fmt.Sprintf(" request for %s %s", what, c.GetName()))
	}
	if len(setLim) > 0 {
		sort.Strings(setLim)
		notes = append(notes, strings.Join(setLim, ", ")+fmt.Sprintf(" limit for %s %s", what, c.GetName()))
	}
	return notes
}

// validateLimitRanges holds a pod or PersistentVolumeClaim to every
// LimitRange of its namespace, refusing with all that it breaks.
func (s *Server) validateLimitRanges(ctx context.Context, a *request.Admission) error {
	if !limitRangerApplies(a) {
		return nil
	}
	lrs, err := s.limitRanges(ctx, a.Namespace)
	if err != nil || len(lrs) == 0 {
		return err
	}
	obj, err := quota.ToK8s(a.Object)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	for _, lr := range lrs {
		var errs []error
		switch o := obj.(type) {
		case *k8scorev1.Pod:
			errs = podLimitErrors(lr, o)
		default:
			errs = claimLimitErrors(lr, a.Object)
		}
		if len(errs) > 0 {
			return apierrors.NewForbidden("", a.Resource, admissionName(a), utilerrors.NewAggregate(errs).Error())
		}
	}
	return nil
}

// limitItem is one of a LimitRange's items with its quantities parsed
// (the LimitRange was validated when written).
type limitItem struct {
	typ             string
	min, max, ratio k8scorev1.ResourceList
}

func parseItems(lr *corev1.LimitRange) []limitItem {
	parse := func(m map[string]string) k8scorev1.ResourceList {
		out := k8scorev1.ResourceList{}
		for k, v := range m {
			if q, err := resource.ParseQuantity(v); err == nil {
				out[k8scorev1.ResourceName(k)] = q
			}
		}
		return out
	}
	var out []limitItem
	for _, l := range lr.GetSpec().GetLimits() {
		out = append(out, limitItem{typ: l.GetType(), min: parse(l.GetMin()), max: parse(l.GetMax()), ratio: parse(l.GetMaxLimitRequestRatio())})
	}
	return out
}

func sortedNames(l k8scorev1.ResourceList) []k8scorev1.ResourceName {
	out := make([]k8scorev1.ResourceName, 0, len(l))
	for k := range l {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// checkItem holds one requests/limits pair to an item's min, max and ratio.
func checkItem(it limitItem, req, lim k8scorev1.ResourceList, errs []error) []error {
	for _, k := range sortedNames(it.min) {
		if err := minConstraint(it.typ, string(k), it.min[k], req, lim); err != nil {
			errs = append(errs, err)
		}
	}
	for _, k := range sortedNames(it.max) {
		if err := maxConstraint(it.typ, string(k), it.max[k], req, lim); err != nil {
			errs = append(errs, err)
		}
	}
	for _, k := range sortedNames(it.ratio) {
		if err := ratioConstraint(it.typ, string(k), it.ratio[k], req, lim); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func podLimitErrors(lr *corev1.LimitRange, pod *k8scorev1.Pod) []error {
	var errs []error
	for _, it := range parseItems(lr) {
		switch it.typ {
		case "Container":
			for _, c := range pod.Spec.Containers {
				errs = checkItem(it, c.Resources.Requests, c.Resources.Limits, errs)
			}
			for _, c := range pod.Spec.InitContainers {
				errs = checkItem(it, c.Resources.Requests, c.Resources.Limits, errs)
			}
		case "Pod":
			opts := resourcehelper.PodResourcesOptions{ExcludeOverhead: true, SkipPodLevelResources: true}
			errs = checkItem(it, resourcehelper.PodRequests(pod, opts), resourcehelper.PodLimits(pod, opts), errs)
		}
	}
	return errs
}

func claimLimitErrors(lr *corev1.LimitRange, obj proto.Message) []error {
	k8s, err := quota.ToK8s(obj)
	if err != nil {
		return []error{err}
	}
	u, ok := k8s.(interface{ UnstructuredContent() map[string]any })
	if !ok {
		return nil
	}
	req := k8scorev1.ResourceList{}
	spec, _ := u.UnstructuredContent()["spec"].(map[string]any)
	res, _ := spec["resources"].(map[string]any)
	reqs, _ := res["requests"].(map[string]any)
	for k, v := range reqs {
		if sv, ok := v.(string); ok {
			if q, err := resource.ParseQuantity(sv); err == nil {
				req[k8scorev1.ResourceName(k)] = q
			}
		}
	}
	var errs []error
	for _, it := range parseItems(lr) {
		if it.typ != "PersistentVolumeClaim" {
			continue
		}
		for _, k := range sortedNames(it.min) {
			if err := minConstraint(it.typ, string(k), it.min[k], req, k8scorev1.ResourceList{}); err != nil {
				errs = append(errs, err)
			}
		}
		for _, k := range sortedNames(it.max) {
			if err := maxRequestConstraint(it.typ, string(k), it.max[k], req); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// values returns the three quantities compared in milli-units when all fit,
// else in units.
func values(req, lim, enforced resource.Quantity) (int64, int64, int64) {
	r, l, e := req.Value(), lim.Value(), enforced.Value()
	if r <= resource.MaxMilliValue && l <= resource.MaxMilliValue && e <= resource.MaxMilliValue {
		return req.MilliValue(), lim.MilliValue(), enforced.MilliValue()
	}
	return r, l, e
}

func minConstraint(typ, name string, enforced resource.Quantity, req, lim k8scorev1.ResourceList) error {
	rq, hasReq := req[k8scorev1.ResourceName(name)]
	lq, hasLim := lim[k8scorev1.ResourceName(name)]
	r, l, e := values(rq, lq, enforced)
	switch {
	case !hasReq:
		return fmt.Errorf("minimum %s usage per %s is %s.  No request is specified", name, typ, enforced.String())
	case r < e:
		return fmt.Errorf("minimum %s usage per %s is %s, but request is %s", name, typ, enforced.String(), rq.String())
	case hasLim && l < e:
		return fmt.Errorf("minimum %s usage per %s is %s, but limit is %s", name, typ, enforced.String(), lq.String())
	}
	return nil
}

func maxRequestConstraint(typ, name string, enforced resource.Quantity, req k8scorev1.ResourceList) error {
	rq, hasReq := req[k8scorev1.ResourceName(name)]
	r, _, e := values(rq, resource.Quantity{}, enforced)
	switch {
	case !hasReq:
		return fmt.Errorf("maximum %s usage per %s is %s.  No request is specified", name, typ, enforced.String())
	case r > e:
		return fmt.Errorf("maximum %s usage per %s is %s, but request is %s", name, typ, enforced.String(), rq.String())
	}
	return nil
}

func maxConstraint(typ, name string, enforced resource.Quantity, req, lim k8scorev1.ResourceList) error {
	rq, hasReq := req[k8scorev1.ResourceName(name)]
	lq, hasLim := lim[k8scorev1.ResourceName(name)]
	r, l, e := values(rq, lq, enforced)
	switch {
	case !hasLim:
		return fmt.Errorf("maximum %s usage per %s is %s.  No limit is specified", name, typ, enforced.String())
	case l > e:
		return fmt.Errorf("maximum %s usage per %s is %s, but limit is %s", name, typ, enforced.String(), lq.String())
	case hasReq && r > e:
		return fmt.Errorf("maximum %s usage per %s is %s, but request is %s", name, typ, enforced.String(), rq.String())
	}
	return nil
}

func ratioConstraint(typ, name string, enforced resource.Quantity, req, lim k8scorev1.ResourceList) error {
	rq, hasReq := req[k8scorev1.ResourceName(name)]
	lq, hasLim := lim[k8scorev1.ResourceName(name)]
	r, l, _ := values(rq, lq, enforced)
	if !hasReq || r == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no request is specified or request is 0", name, typ, enforced.String())
	}
	if !hasLim || l == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no limit is specified or limit is 0", name, typ, enforced.String())
	}
	observed := float64(l) / float64(r)
	shown := observed
	limit := float64(enforced.Value())
	if enforced.Value() <= resource.MaxMilliValue {
		observed *= 1000
		limit = float64(enforced.MilliValue())
	}
	if observed > limit {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but provided ratio is %f", name, typ, enforced.String(), shown)
	}
	return nil
}
