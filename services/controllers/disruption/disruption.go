// Package disruption is the disruption controller, as Kubernetes' (its
// "disruption" controller in kube-controller-manager): it keeps every
// PodDisruptionBudget's status — the pods it expects (from the scale of
// the pods' controllers when a percentage or maxUnavailable needs it), how
// many are healthy (Ready, not being deleted, not just evicted), how many
// must be, how many more may be disrupted, the evictions it has not yet
// seen through (disruptedPods, forgotten after DeletionTimeout) and the
// DisruptionAllowed condition. The pods/eviction subresource decides from
// that status.
package disruption

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	k8spolicyv1 "k8s.io/api/policy/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	k8smetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	pdbhelper "k8s.io/component-helpers/apps/poddisruptionbudget"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	"github.com/kplane/kplane/proto/kubeconv"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// DeletionTimeout is how long an eviction recorded in a budget's
// disruptedPods keeps the pod out of the healthy count while it is not yet
// being deleted (Kubernetes' DeletionTimeout).
const DeletionTimeout = 2 * time.Minute

// PDBClient writes budgets' status (*client.Client[*policyv1.PodDisruptionBudget]).
type PDBClient interface {
	UpdateStatus(ctx context.Context, obj *policyv1.PodDisruptionBudget) (*policyv1.PodDisruptionBudget, error)
}

// Scales reads the scale subresource of any kind (ScaleClient).
type Scales interface {
	GetScale(ctx context.Context, apiVersion, kind, namespace, name string) (*autoscalingv1.Scale, error)
}

// EventRecorder records Events (*client.Recorder).
type EventRecorder interface {
	Eventf(obj proto.Message, eventType, reason, messageFmt string, args ...any)
}

// Config wires a Controller; New adds handlers to the informers.
type Config struct {
	PDBs   PDBClient
	Pods   PodClient
	Scales Scales
	// Informers: budgets and pods, and the ReplicaSets and Deployments
	// whose scale is read from the cache (other kinds through Scales).
	PDBInformer *client.Informer[*policyv1.PodDisruptionBudget]
	PodInformer *client.Informer[*corev1.Pod]
	RSInformer  *client.Informer[*appsv1.ReplicaSet]
	DInformer   *client.Informer[*appsv1.Deployment]
	Recorder    EventRecorder
	Logger      *slog.Logger
	// Now is the clock (time.Now if nil): tests move it past
	// DeletionTimeout.
	Now func() time.Time
	// TracerProvider records a span per reconcile (client.Trace); nil
	// uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the disruption controller. Its queue holds budget keys;
// stale holds the keys of pods whose DisruptionTarget condition is to be
// checked (stale.go).
type Controller struct {
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	queue client.Queue
	stale client.Queue
}

// New returns a controller and registers its handlers: a budget added or
// changed, and a pod added, changed or deleted (through every budget of its
// namespace that selects it, before or after the change) bring budgets to
// the queue; a pod with a DisruptionTarget condition comes to the stale
// queue when the condition will have gone stale.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "disruption"), now: now, queue: client.NewQueue("disruption", 0, 0),
		stale: client.NewQueue("disruption-stale-pods", 0, 0)}
	cfg.PDBInformer.AddEventHandler(client.EnqueueHandler[*policyv1.PodDisruptionBudget](c.queue))
	cfg.PodInformer.AddEventHandler(client.Handler[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) { c.warnMultiple(p, c.enqueueBudgetsOf(p)); c.enqueueStale(p) },
		OnUpdate: func(old, cur *corev1.Pod) {
			c.enqueueBudgetsOf(old)
			c.warnMultiple(cur, c.enqueueBudgetsOf(cur))
			c.enqueueStale(cur)
		},
		OnDelete: func(p *corev1.Pod) { c.enqueueBudgetsOf(p) },
	})
	return c
}

// enqueueBudgetsOf adds the budgets that select pod (all of them, where
// Kubernetes takes one of several) and returns their names.
func (c *Controller) enqueueBudgetsOf(pod *corev1.Pod) []string {
	set := labels.Set(pod.GetMetadata().GetLabels())
	var names []string
	for _, pdb := range c.cfg.PDBInformer.Store().ByNamespace(pod.GetMetadata().GetNamespace()) {
		sel, err := kubeconv.Selector(pdb.GetSpec().GetSelector())
		if err == nil && sel.Matches(set) {
			c.queue.Add(client.Key(pdb))
			names = append(names, pdb.GetMetadata().GetName())
		}
	}
	return names
}

// warnMultiple records Kubernetes' Warning on a pod several budgets
// select (the eviction subresource refuses to evict it).
func (c *Controller) warnMultiple(pod *corev1.Pod, budgets []string) {
	if len(budgets) < 2 || c.cfg.Recorder == nil {
		return
	}
	c.cfg.Recorder.Eventf(pod, "Warning", "MultiplePodDisruptionBudgets", "Pod %q/%q matches multiple PodDisruptionBudgets.  Chose %q arbitrarily.",
		pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), budgets[0])
}

// Run waits for the caches, then reconciles budgets and stale pod
// conditions until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	defer c.stale.ShutDown()
	if !client.WaitForCacheSync(ctx, c.cfg.PDBInformer, c.cfg.PodInformer, c.cfg.RSInformer, c.cfg.DInformer) {
		return
	}
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "disruption.reconcile",
		Annotations: client.StoreAnnotations(c.cfg.PDBInformer.Store())}
	st := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "disruption.reconcile",
		Annotations: client.StoreAnnotations(c.cfg.PodInformer.Store())}
	done := make(chan struct{})
	go func() {
		defer close(done)
		client.RunWorkers(ctx, c.stale, 1, st.Reconciler(c.ReconcileStalePod), c.log)
	}()
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
	<-done
}

// Reconcile computes the budget key's status and writes it if it changed.
// When the computation fails the budget allows no disruption (Kubernetes'
// fail-safe: DisruptionAllowed False, SyncFailed, with the error).
func (c *Controller) Reconcile(ctx context.Context, key string) (client.Result, error) {
	pdb, ok := c.cfg.PDBInformer.Store().Get(key)
	if !ok {
		return client.Result{}, nil
	}
	res, err := c.sync(ctx, pdb)
	if err == nil || apierrors.IsConflict(err) {
		return res, err
	}
	c.log.ErrorContext(ctx, "failed to sync the budget", "pdb", key, "err", err)
	n := proto.Clone(pdb).(*policyv1.PodDisruptionBudget)
	if n.Status == nil {
		n.Status = &policyv1.PodDisruptionBudgetStatus{}
	}
	n.Status.DisruptionsAllowed = 0
	setCondition(n.Status, k8smetav1.Condition{Type: k8spolicyv1.DisruptionAllowedCondition, Status: k8smetav1.ConditionFalse,
		Reason: k8spolicyv1.SyncFailedReason, Message: err.Error(), ObservedGeneration: n.Status.GetObservedGeneration()})
	if _, werr := c.cfg.PDBs.UpdateStatus(ctx, n); werr != nil {
		return client.Result{}, fmt.Errorf("disruption %s: fail-safe status: %w", key, werr)
	}
	return client.Result{}, nil
}

// sync computes and writes pdb's status, and asks to run again when the
// first of its disrupted pods' deletion is overdue.
func (c *Controller) sync(ctx context.Context, pdb *policyv1.PodDisruptionBudget) (client.Result, error) {
	pods, err := c.podsOf(pdb)
	if err != nil {
		c.event(pdb, "Warning", "NoPods", "Failed to get pods: %v", err)
		return client.Result{}, err
	}
	if len(pods) == 0 {
		c.event(pdb, "Normal", "NoPods", "No matching pods found")
	}
	expected, desired, unmanaged, err := c.expectedPodCount(ctx, pdb, pods)
	if err != nil {
		c.event(pdb, "Warning", "CalculateExpectedPodCountFailed", "Failed to calculate the number of expected pods: %v", err)
		return client.Result{}, err
	}
	if len(unmanaged) > 0 {
		c.event(pdb, "Warning", "UnmanagedPods", "Pods selected by this PodDisruptionBudget (selector: %v) were found "+
			"to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. "+
			"To account for these pods please set \".spec.minAvailable\" "+
			"field of the PDB to an integer value.", selectorString(pdb.GetSpec().GetSelector()))
	}
	now := c.now()
	disrupted, recheck := c.disruptedPods(pods, pdb, now)
	healthy := countHealthy(pods, disrupted, now)
	if err := c.writeStatus(ctx, pdb, healthy, desired, expected, disrupted); err != nil {
		return client.Result{}, err
	}
	if !recheck.IsZero() {
		// A deletion overdue this instant is looked at again at once.
		return client.Result{RequeueAfter: max(recheck.Sub(now), time.Nanosecond)}, nil
	}
	return client.Result{}, nil
}

func (c *Controller) event(pdb *policyv1.PodDisruptionBudget, typ, reason, format string, args ...any) {
	if c.cfg.Recorder != nil {
		c.cfg.Recorder.Eventf(pdb, typ, reason, format, args...)
	}
}

// podsOf lists the cached pods of pdb's namespace its selector matches (a
// nil selector matches none, an empty one all).
func (c *Controller) podsOf(pdb *policyv1.PodDisruptionBudget) ([]*corev1.Pod, error) {
	sel, err := kubeconv.Selector(pdb.GetSpec().GetSelector())
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(pdb.GetMetadata().GetNamespace()) {
		if sel.Matches(labels.Set(p.GetMetadata().GetLabels())) {
			out = append(out, p)
		}
	}
	return out, nil
}

// expectedPodCount is Kubernetes' getExpectedPodCount: with maxUnavailable
// or a percentage minAvailable, the pods expected are the sum of the
// pods' controllers' scales and the value is scaled against it (rounding
// up); an integer minAvailable is the healthy count wanted of the pods
// there are. Pods without a controller are returned as unmanaged.
func (c *Controller) expectedPodCount(ctx context.Context, pdb *policyv1.PodDisruptionBudget, pods []*corev1.Pod) (expected, desired int32, unmanaged []string, err error) {
	spec := pdb.GetSpec()
	switch {
	case spec.GetMaxUnavailable() != nil:
		if expected, unmanaged, err = c.expectedScale(ctx, pods); err != nil {
			return 0, 0, nil, err
		}
		v := kubeconv.IntOrString(spec.GetMaxUnavailable())
		maxUnavailable, err := intstr.GetScaledValueFromIntOrPercent(&v, int(expected), true)
		if err != nil {
			return 0, 0, nil, err
		}
		desired = max(expected-int32(maxUnavailable), 0)
	case spec.GetMinAvailable() != nil:
		if iv, ok := spec.GetMinAvailable().GetValue().(*metav1.IntOrString_IntVal); ok {
			return int32(len(pods)), iv.IntVal, nil, nil
		}
		if expected, unmanaged, err = c.expectedScale(ctx, pods); err != nil {
			return 0, 0, nil, err
		}
		v := kubeconv.IntOrString(spec.GetMinAvailable())
		minAvailable, err := intstr.GetScaledValueFromIntOrPercent(&v, int(expected), true)
		if err != nil {
			return 0, 0, nil, err
		}
		desired = int32(minAvailable)
	}
	return expected, desired, unmanaged, nil
}

// expectedScale sums the scales of the pods' controllers, each counted
// once. A pod without a controller is unmanaged; a controller no finder
// knows is an error.
func (c *Controller) expectedScale(ctx context.Context, pods []*corev1.Pod) (int32, []string, error) {
	scales := map[string]int32{}
	var unmanaged []string
	for _, pod := range pods {
		ref := ctrl.ControllerRef(pod)
		if ref == nil {
			unmanaged = append(unmanaged, pod.GetMetadata().GetName())
			continue
		}
		if _, ok := scales[ref.GetUid()]; ok {
			continue
		}
		uid, scale, found, err := c.findController(ctx, ref, pod.GetMetadata().GetNamespace())
		if err != nil {
			return 0, nil, err
		}
		if !found {
			return 0, nil, fmt.Errorf("found no controllers for pod %q", pod.GetMetadata().GetName())
		}
		scales[uid] = scale
	}
	var sum int32
	for _, s := range scales {
		sum += s
	}
	return sum, unmanaged, nil
}

// findController is Kubernetes' finders in order: a ReplicaSet not owned
// by a Deployment (its replicas), a Deployment through its ReplicaSet (its
// replicas), then any kind through its scale subresource. Each checks the
// uid the reference names.
func (c *Controller) findController(ctx context.Context, ref *metav1.OwnerReference, ns string) (uid string, scale int32, found bool, err error) {
	if ref.GetKind() == "ReplicaSet" && isApps(ref.GetApiVersion()) {
		rs, ok := c.cfg.RSInformer.Store().GetByName(ns, ref.GetName())
		if !ok || rs.GetMetadata().GetUid() != ref.GetUid() {
			return "", 0, false, nil
		}
		owner := ctrl.ControllerRef(rs)
		if owner == nil || owner.GetKind() != "Deployment" {
			return rs.GetMetadata().GetUid(), replicas(rs.GetSpec().Replicas), true, nil
		}
		if !isApps(owner.GetApiVersion()) {
			return "", 0, false, nil
		}
		d, ok := c.cfg.DInformer.Store().GetByName(ns, owner.GetName())
		if !ok || d.GetMetadata().GetUid() != owner.GetUid() {
			return "", 0, false, nil
		}
		return d.GetMetadata().GetUid(), replicas(d.GetSpec().Replicas), true, nil
	}
	sc, err := c.cfg.Scales.GetScale(ctx, ref.GetApiVersion(), ref.GetKind(), ns, ref.GetName())
	if apierrors.IsNotFound(err) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, err
	}
	if sc.GetMetadata().GetUid() != ref.GetUid() {
		return "", 0, false, nil
	}
	return sc.GetMetadata().GetUid(), sc.GetSpec().GetReplicas(), true, nil
}

func isApps(apiVersion string) bool {
	return apiVersion == "apps/v1" || apiVersion == "extensions/v1beta1" || apiVersion == "apps/v1beta1" || apiVersion == "apps/v1beta2"
}

// replicas is a spec.replicas, 1 when unset (the API service defaults it).
func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

// disruptedPods keeps the entries of pdb's disruptedPods whose pod exists,
// is not being deleted, and was evicted less than DeletionTimeout ago; it
// returns when the earliest kept entry expires (zero if none).
func (c *Controller) disruptedPods(pods []*corev1.Pod, pdb *policyv1.PodDisruptionBudget, now time.Time) (map[string]*timestamppb.Timestamp, time.Time) {
	out := map[string]*timestamppb.Timestamp{}
	var recheck time.Time
	prev := pdb.GetStatus().GetDisruptedPods()
	if prev == nil {
		return out, recheck
	}
	for _, pod := range pods {
		if pod.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		at, ok := prev[pod.GetMetadata().GetName()]
		if !ok {
			continue
		}
		expires := at.AsTime().Add(DeletionTimeout)
		if expires.Before(now) {
			c.log.Info("pod was expected to be deleted but it wasn't, updating the budget", "pod", client.Key(pod), "pdb", client.Key(pdb))
			// Kubernetes' message names the budget's namespace twice.
			if c.cfg.Recorder != nil {
				c.cfg.Recorder.Eventf(pod, "Warning", "NotDeleted", "Pod was expected by PDB %s/%s to be deleted but it wasn't",
					pdb.GetMetadata().GetNamespace(), pdb.GetMetadata().GetNamespace())
			}
			continue
		}
		if recheck.IsZero() || expires.Before(recheck) {
			recheck = expires
		}
		out[pod.GetMetadata().GetName()] = at
	}
	return out, recheck
}

// countHealthy counts the Ready pods not being deleted and not recently
// evicted.
func countHealthy(pods []*corev1.Pod, disrupted map[string]*timestamppb.Timestamp, now time.Time) int32 {
	var n int32
	for _, pod := range pods {
		if pod.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if at, ok := disrupted[pod.GetMetadata().GetName()]; ok && at.AsTime().Add(DeletionTimeout).After(now) {
			continue
		}
		if ready, _ := ctrl.PodReady(pod); ready {
			n++
		}
	}
	return n
}

// writeStatus writes the computed status if it differs from pdb's.
func (c *Controller) writeStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget, healthy, desired, expected int32, disrupted map[string]*timestamppb.Timestamp) error {
	allowed := healthy - desired
	if expected <= 0 || allowed <= 0 {
		allowed = 0
	}
	st := pdb.GetStatus()
	if st.GetCurrentHealthy() == healthy && st.GetDesiredHealthy() == desired && st.GetExpectedPods() == expected &&
		st.GetDisruptionsAllowed() == allowed && sameDisrupted(st.GetDisruptedPods(), disrupted) &&
		st.GetObservedGeneration() == pdb.GetMetadata().GetGeneration() && conditionsUpToDate(pdb) {
		return nil
	}
	n := proto.Clone(pdb).(*policyv1.PodDisruptionBudget)
	n.Status = &policyv1.PodDisruptionBudgetStatus{CurrentHealthy: healthy, DesiredHealthy: desired, ExpectedPods: expected,
		DisruptionsAllowed: allowed, DisruptedPods: disrupted, ObservedGeneration: pdb.GetMetadata().GetGeneration(),
		Conditions: n.GetStatus().GetConditions()}
	if len(n.Status.DisruptedPods) == 0 {
		n.Status.DisruptedPods = nil
	}
	k := toK8s(n.Status)
	pdbhelper.UpdateDisruptionAllowedCondition(k)
	n.Status.Conditions = kubeconv.FromConditions(k.Status.Conditions)
	if _, err := c.cfg.PDBs.UpdateStatus(ctx, n); err != nil {
		return fmt.Errorf("disruption %s: status: %w", client.Key(pdb), err)
	}
	return nil
}

func sameDisrupted(a, b map[string]*timestamppb.Timestamp) bool {
	return maps.EqualFunc(a, b, func(x, y *timestamppb.Timestamp) bool { return x.AsTime().Equal(y.AsTime()) })
}

// conditionsUpToDate is Kubernetes' ConditionsAreUpToDate on pdb.
func conditionsUpToDate(pdb *policyv1.PodDisruptionBudget) bool {
	k := toK8s(pdb.GetStatus())
	k.Generation = pdb.GetMetadata().GetGeneration()
	return pdbhelper.ConditionsAreUpToDate(k)
}

// setCondition sets c on st as apimachinery's SetStatusCondition does.
func setCondition(st *policyv1.PodDisruptionBudgetStatus, c k8smetav1.Condition) {
	k := toK8s(st)
	apimeta.SetStatusCondition(&k.Status.Conditions, c)
	st.Conditions = kubeconv.FromConditions(k.Status.Conditions)
}

// toK8s is a Kubernetes budget holding what its helpers read of st.
func toK8s(st *policyv1.PodDisruptionBudgetStatus) *k8spolicyv1.PodDisruptionBudget {
	k := &k8spolicyv1.PodDisruptionBudget{Status: k8spolicyv1.PodDisruptionBudgetStatus{
		DisruptionsAllowed: st.GetDisruptionsAllowed(), ObservedGeneration: st.GetObservedGeneration()}}
	k.Status.Conditions = kubeconv.Conditions(st.GetConditions())
	return k
}

// selectorString prints a selector in the event as Kubernetes' %v of its
// *LabelSelector does.
func selectorString(s *metav1.LabelSelector) string {
	if s == nil {
		return "nil"
	}
	k := &k8smetav1.LabelSelector{MatchLabels: s.GetMatchLabels()}
	for _, e := range s.GetMatchExpressions() {
		k.MatchExpressions = append(k.MatchExpressions, k8smetav1.LabelSelectorRequirement{Key: e.GetKey(),
			Operator: k8smetav1.LabelSelectorOperator(e.GetOperator()), Values: e.GetValues()})
	}
	return k.String()
}
