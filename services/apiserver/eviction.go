// This file holds the pods/eviction subresource, as Kubernetes v1.33's: a
// pod is deleted only if the PodDisruptionBudget that selects it allows one
// more disruption, which the eviction takes from the budget's status
// (disruptionsAllowed decremented, the pod recorded in disruptedPods) with
// a compare-and-swap on the budget, retried on conflict.
package apiserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	k8spolicyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	pdbhelper "k8s.io/component-helpers/apps/poddisruptionbudget"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	"github.com/kplane/kplane/proto/kubeconv"
	"github.com/kplane/kplane/services/apiserver/request"
)

const (
	// maxDisruptedPods is Kubernetes' MaxDisruptedPodSize: past this many
	// evictions the disruption controller has not yet seen through, a
	// budget refuses more.
	maxDisruptedPods = 2000
	// evictionAttempts bounds the retries of a conflicting write, as
	// Kubernetes' EvictionsRetry (20 steps).
	evictionAttempts = 20
	// evictionRetryWait is the pause between two attempts (Kubernetes
	// waits 500 ms; a compare-and-swap here fails only when another write
	// got in, so a short pause is enough to let it land).
	evictionRetryWait = 50 * time.Millisecond
	// disruptionBudgetCause is the Status cause type of a refused eviction.
	disruptionBudgetCause = "DisruptionBudget"
	evictionViolates      = "Cannot evict pod as it would violate the pod's disruption budget."
)

// evict serves POST pods/NAME/eviction: ev is a policy/v1 Eviction (or
// policy/v1beta1's, the same shape); wo.DryRun is the request's dryRun,
// which must agree with the Eviction's deleteOptions.dryRun.
func (s *Server) evict(ctx context.Context, r *resourceInfo, ns, name string, ev *policyv1.Eviction, wo writeOptions) (_ *metav1.Status, err error) {
	c := s.begin(ctx, "create", r, "eviction", ns, name)
	defer func() { s.end(ctx, c, err) }()
	if err := s.authnz(ctx, c); err != nil {
		return nil, err
	}
	if ev == nil {
		return nil, apierrors.NewBadRequest("the request has no Eviction")
	}
	switch v := ev.GetApiVersion(); v {
	case "", "policy/v1", "policy/v1beta1":
	default:
		// kube-apiserver's decoder's words (its scheme's location included).
		return nil, apierrors.NewBadRequest(fmt.Sprintf("Eviction in version %q cannot be handled as a Eviction: no kind \"Eviction\" is registered for version %q in scheme \"pkg/runtime/scheme.go:110\"",
			v[strings.LastIndex(v, "/")+1:], v))
	}
	if n := ev.GetMetadata().GetNamespace(); n != "" && n != ns {
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if ev.GetMetadata().GetName() != name {
		return nil, apierrors.NewBadRequest("name in URL does not match name in Eviction object")
	}
	do := ev.GetDeleteOptions()
	if do.GetIgnoreStoreReadErrorWithClusterBreakingPotential() {
		return nil, apierrors.NewInvalid("policy", "Eviction", name, []apierrors.Cause{{Type: "FieldValueInvalid",
			Field: "deleteOptions.ignoreStoreReadErrorWithClusterBreakingPotential", Message: "Invalid value: true: can not be set for pod eviction, try after removing the option"}})
	}
	opts := deleteOptions{PropagationPolicy: do.GetPropagationPolicy(), DryRun: do.GetDryRun()}
	if do != nil {
		opts.GracePeriodSeconds = do.GracePeriodSeconds
	}
	if p := do.GetPreconditions(); p != nil {
		opts.Preconditions = proto.Clone(p).(*metav1.Preconditions)
	}
	// As Kubernetes' propagateDryRun: the request's dryRun fills the
	// Eviction's; both set and different is an error.
	switch {
	case len(opts.DryRun) == 0:
		opts.DryRun = wo.DryRun
	case len(wo.DryRun) > 0 && !slices.Equal(wo.DryRun, opts.DryRun):
		return nil, &apierrors.StatusError{Code: 500, Message: fmt.Sprintf("Non-matching dry-run options in request and content: %v and %v", wo.DryRun, opts.DryRun)}
	}
	dry, err := parseDryRun(opts.DryRun)
	if err != nil {
		return nil, err
	}
	if err := checkDeleteOptions(opts); err != nil {
		return nil, err
	}
	adm := s.admission(c, request.Create, ev, nil, dry)
	if err := s.mutate(ctx, c, adm); err != nil {
		return nil, err
	}
	if err := s.admitValidating(ctx, c, adm); err != nil {
		return nil, err
	}
	success := &metav1.Status{ApiVersion: "v1", Kind: "Status", Metadata: &metav1.ListMeta{}, Status: "Success", Code: 201}

	// A pod that is finished, not yet running or already being deleted
	// disrupts nothing more: it is deleted without looking at budgets
	// (pinned to the resourceVersion read, unless the client pinned one,
	// so that it cannot have become ready meanwhile).
	rvPinned := opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil
	var pod *corev1.Pod
	for attempt := 0; ; attempt++ {
		obj, err := s.store.get(ctx, r, ns, name)
		if err != nil {
			return nil, err
		}
		pod = obj.(*corev1.Pod)
		if !canIgnorePDB(pod) {
			break
		}
		o := opts
		if shouldEnforceResourceVersion(pod) && !rvPinned {
			o = pinResourceVersion(opts, pod.GetMetadata().GetResourceVersion())
		}
		err = s.markAndDeletePod(ctx, c, r, ns, name, o, dry)
		if err == nil {
			return success, nil
		}
		if !apierrors.IsConflict(err) || rvPinned || attempt+1 >= evictionAttempts {
			return nil, err
		}
		if err := evictionPause(ctx); err != nil {
			return nil, err
		}
	}

	pdbs, err := s.podBudgets(ctx, pod)
	if err != nil {
		return nil, err
	}
	if len(pdbs) > 1 {
		return nil, &apierrors.StatusError{Code: 500, Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}
	}
	pinToPod := false
	pdbName := ""
	if len(pdbs) == 1 {
		pdb := pdbs[0]
		pdbName = pdb.GetMetadata().GetName()
		st := pdb.GetStatus()
		switch {
		case podReady(pod):
			// A healthy pod: the budget must allow its disruption.
		case pdb.GetSpec().GetUnhealthyPodEvictionPolicy() == unhealthyAlwaysAllow,
			st.GetCurrentHealthy() >= st.GetDesiredHealthy() && st.GetDesiredHealthy() > 0:
			// An unready pod is not counted as healthy: deleting it takes
			// nothing from the budget (with AlwaysAllow, or while the
			// budget is met).
			pinToPod = true
		}
		if !pinToPod {
			if err := s.takeDisruption(ctx, pdb, name, dry); err != nil {
				return nil, err
			}
		}
	}
	o := opts
	if pinToPod {
		o = pinResourceVersion(opts, pod.GetMetadata().GetResourceVersion())
	}
	if err := s.markAndDeletePod(ctx, c, r, ns, name, o, dry); err != nil {
		if apierrors.IsConflict(err) && pinToPod && !rvPinned {
			// The pod changed (it may have become ready): let the
			// client try again.
			return nil, budgetBusy(pdbName)
		}
		return nil, err
	}
	return success, nil
}

// canIgnorePDB: a pod Succeeded, Failed, Pending or being deleted is
// evicted without consulting budgets.
func canIgnorePDB(p *corev1.Pod) bool {
	switch p.GetStatus().GetPhase() {
	case "Succeeded", "Failed", "Pending":
		return true
	}
	return p.GetMetadata().GetDeletionTimestamp() != nil
}

// shouldEnforceResourceVersion: only a pod that may still become ready is
// deleted at the resourceVersion read.
func shouldEnforceResourceVersion(p *corev1.Pod) bool {
	switch p.GetStatus().GetPhase() {
	case "Succeeded", "Failed":
		return false
	}
	return p.GetMetadata().GetDeletionTimestamp() == nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c.GetStatus() == "True"
		}
	}
	return false
}

// pinResourceVersion is o with the precondition resourceVersion rv.
func pinResourceVersion(o deleteOptions, rv string) deleteOptions {
	p := &metav1.Preconditions{}
	if o.Preconditions != nil {
		p = proto.Clone(o.Preconditions).(*metav1.Preconditions)
	}
	p.ResourceVersion = proto.String(rv)
	o.Preconditions = p
	return o
}

func evictionPause(ctx context.Context) error {
	t := time.NewTimer(evictionRetryWait + rand.N(evictionRetryWait/10+1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return apierrors.NewTimeout(ctx.Err().Error())
	case <-t.C:
		return nil
	}
}

// budgetBusy is the 429 of a budget whose status is behind its spec, or
// of a pod that changed under an eviction.
func budgetBusy(name string) error {
	e := apierrors.NewTooManyRequests(evictionViolates)
	e.RetryAfterSeconds = 10
	e.Causes = []apierrors.Cause{{Type: disruptionBudgetCause, Message: fmt.Sprintf("The disruption budget %s is still being processed by the server.", name)}}
	return e
}

// podBudgets lists, with a consistent read, the budgets of the pod's
// namespace whose selector matches it (an invalid selector matches none).
func (s *Server) podBudgets(ctx context.Context, pod *corev1.Pod) ([]*policyv1.PodDisruptionBudget, error) {
	r := s.resources["poddisruptionbudgets"]
	ns := pod.GetMetadata().GetNamespace()
	sel, err := parseSelector(r, ns, "", "")
	if err != nil {
		return nil, err
	}
	items, _, err := s.listStore(ctx, r, ns, 0, "", 0, sel, false)
	if err != nil {
		return nil, err
	}
	var out []*policyv1.PodDisruptionBudget
	for _, it := range items {
		pdb := it.(*policyv1.PodDisruptionBudget)
		ls, err := kubeconv.Selector(pdb.GetSpec().GetSelector())
		if err != nil || !ls.Matches(labels.Set(pod.GetMetadata().GetLabels())) {
			continue
		}
		out = append(out, pdb)
	}
	return out, nil
}

// takeDisruption checks that pdb allows one more disruption and, unless
// dry, takes it: disruptionsAllowed decremented and the pod recorded in
// disruptedPods, written with a compare-and-swap on the budget read; on a
// conflict the budget is read again and checked again.
func (s *Server) takeDisruption(ctx context.Context, pdb *policyv1.PodDisruptionBudget, podName string, dry bool) error {
	r := s.resources["poddisruptionbudgets"]
	ns, name := pdb.GetMetadata().GetNamespace(), pdb.GetMetadata().GetName()
	for attempt := 0; ; attempt++ {
		n, err := decrementBudget(pdb, podName, dry)
		if err != nil || dry {
			return err
		}
		rev, _ := parseRV(pdb.GetMetadata().GetResourceVersion())
		_, err = s.store.update(ctx, r, ns, name, rev, n)
		var ce *casError
		if !errors.As(err, &ce) {
			return err
		}
		if ce.cur == nil {
			return apierrors.NewNotFound(r.Group, r.Resource, name)
		}
		if attempt+1 >= evictionAttempts {
			return apierrors.NewTimeout(fmt.Sprintf("couldn't update PodDisruptionBudget %q due to conflicts", name))
		}
		if err := evictionPause(ctx); err != nil {
			return err
		}
		pdb = ce.cur.(*policyv1.PodDisruptionBudget)
	}
}

// decrementBudget is Kubernetes' checkAndDecrement on a copy of pdb.
func decrementBudget(pdb *policyv1.PodDisruptionBudget, podName string, dry bool) (*policyv1.PodDisruptionBudget, error) {
	name := pdb.GetMetadata().GetName()
	st := pdb.GetStatus()
	switch {
	case st.GetObservedGeneration() < pdb.GetMetadata().GetGeneration():
		return nil, budgetBusy(name)
	case st.GetDisruptionsAllowed() < 0:
		return nil, apierrors.NewForbidden("policy", "poddisruptionbudget", name, "pdb disruptions allowed is negative")
	case len(st.GetDisruptedPods()) > maxDisruptedPods:
		return nil, apierrors.NewForbidden("policy", "poddisruptionbudget", name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller")
	case st.GetDisruptionsAllowed() == 0:
		e := apierrors.NewTooManyRequests(evictionViolates)
		e.Causes = []apierrors.Cause{{Type: disruptionBudgetCause, Message: fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", name, st.GetDesiredHealthy(), st.GetCurrentHealthy())}}
		return nil, e
	}
	n := proto.Clone(pdb).(*policyv1.PodDisruptionBudget)
	n.Status.DisruptionsAllowed--
	if n.Status.DisruptionsAllowed == 0 {
		setDisruptionAllowedCondition(n.Status)
	}
	if dry {
		return n, nil
	}
	if n.Status.DisruptedPods == nil {
		n.Status.DisruptedPods = map[string]*timestamppb.Timestamp{}
	}
	n.Status.DisruptedPods[podName] = now()
	return n, nil
}

// setDisruptionAllowedCondition sets st's DisruptionAllowed condition from
// its disruptionsAllowed, with Kubernetes' own helper.
func setDisruptionAllowedCondition(st *policyv1.PodDisruptionBudgetStatus) {
	k := &k8spolicyv1.PodDisruptionBudget{Status: k8spolicyv1.PodDisruptionBudgetStatus{
		DisruptionsAllowed: st.GetDisruptionsAllowed(), ObservedGeneration: st.GetObservedGeneration()}}
	k.Status.Conditions = kubeconv.Conditions(st.GetConditions())
	pdbhelper.UpdateDisruptionAllowedCondition(k)
	st.Conditions = kubeconv.FromConditions(k.Status.Conditions)
}

// markAndDeletePod is Kubernetes' addConditionAndDeletePod: unless dry,
// the pod gets the DisruptionTarget condition (EvictionByEvictionAPI),
// written on the latest pod once o's preconditions hold on it; then the pod
// is deleted with o (a resourceVersion precondition moved to the
// condition's write).
func (s *Server) markAndDeletePod(ctx context.Context, c *call, r *resourceInfo, ns, name string, o deleteOptions, dry bool) error {
	if !dry {
		rv, err := s.markDisruptionTarget(ctx, r, ns, name, o.Preconditions)
		if err != nil {
			return err
		}
		if o.Preconditions != nil && o.Preconditions.ResourceVersion != nil {
			o = pinResourceVersion(o, rv)
		}
	}
	_, err := s.deleteObject(ctx, c, r, ns, name, o, dry, false)
	return err
}

// markDisruptionTarget writes the DisruptionTarget condition on the pod
// and returns its new resourceVersion.
func (s *Server) markDisruptionTarget(ctx context.Context, r *resourceInfo, ns, name string, pre *metav1.Preconditions) (string, error) {
	obj, err := s.store.get(ctx, r, ns, name)
	if err != nil {
		return "", err
	}
	for attempt := 0; ; attempt++ {
		pod := obj.(*corev1.Pod)
		m := pod.GetMetadata()
		if uid := pre.GetUid(); uid != "" && uid != m.GetUid() {
			return "", apierrors.NewConflict("", "Pod", name, fmt.Sprintf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", uid, m.GetUid()))
		}
		if rv := pre.GetResourceVersion(); rv != "" && rv != m.GetResourceVersion() {
			return "", apierrors.NewConflict("", "Pod", name, fmt.Sprintf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s). The object might have been modified", rv, m.GetResourceVersion()))
		}
		n := proto.Clone(pod).(*corev1.Pod)
		if n.Status == nil {
			n.Status = &corev1.PodStatus{}
		}
		setPodCondition(n.Status, &corev1.PodCondition{Type: "DisruptionTarget", Status: "True",
			Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting", LastTransitionTime: now()})
		if proto.Equal(n, pod) {
			return m.GetResourceVersion(), nil
		}
		setTraceAnnotation(ctx, n.Metadata)
		rev, _ := parseRV(m.GetResourceVersion())
		newRev, err := s.store.update(ctx, r, ns, name, rev, n)
		var ce *casError
		if !errors.As(err, &ce) {
			if err != nil {
				return "", err
			}
			return formatRV(newRev), nil
		}
		if ce.cur == nil {
			return "", apierrors.NewNotFound(r.Group, r.Resource, name)
		}
		if attempt+1 >= evictionAttempts {
			return "", apierrors.NewConflict(r.Group, r.Resource, name, apierrors.ConflictModified)
		}
		obj = ce.cur
	}
}
