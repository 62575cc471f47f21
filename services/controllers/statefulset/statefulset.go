// Package statefulset is the StatefulSet controller: pods named
// <set>-<ordinal> for the ordinals spec.ordinals.start up to replicas more,
// each with its stable hostname (the pod name) and subdomain (serviceName),
// Kubernetes' identity labels, and its own PersistentVolumeClaims
// <template>-<set>-<ordinal> made from volumeClaimTemplates (owned per
// persistentVolumeClaimRetentionPolicy, so the garbage collector removes
// them when the set is deleted or scaled down, if asked to). OrderedReady
// creates pods one at a time in order, each waiting for its predecessor to
// be Running and Ready (available, with minReadySeconds), and removes them
// in reverse; Parallel does both at once. The template is kept in
// ControllerRevisions; RollingUpdate replaces pods from the highest ordinal
// down to the partition, one at a time (maxUnavailable is behind a gate off
// by default in Kubernetes v1.33, and is dropped by the API service), and
// OnDelete only recreates pods that were deleted. Each sync recomputes all
// from the informer caches, as Kubernetes' controller does.
package statefulset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubeconv"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// Labels Kubernetes sets on a StatefulSet's pods.
const (
	// HashLabel names the revision a pod was made from (on revisions: the hash).
	HashLabel = "controller-revision-hash"
	// PodNameLabel is the pod's own name, for per-pod Services.
	PodNameLabel = "statefulset.kubernetes.io/pod-name"
	// PodIndexLabel is the pod's ordinal.
	PodIndexLabel = "apps.kubernetes.io/pod-index"
)

// StatefulSetClient reads and writes StatefulSets (*client.Client[*appsv1.StatefulSet]).
type StatefulSetClient interface {
	UpdateStatus(ctx context.Context, obj *appsv1.StatefulSet) (*appsv1.StatefulSet, error)
}

// RevisionClient writes ControllerRevisions (*client.Client[*appsv1.ControllerRevision]).
type RevisionClient interface {
	Get(ctx context.Context, namespace, name string) (*appsv1.ControllerRevision, error)
	Create(ctx context.Context, obj *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error)
	Update(ctx context.Context, obj *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// PodClient writes pods (*client.Client[*corev1.Pod]).
type PodClient interface {
	Create(ctx context.Context, obj *corev1.Pod) (*corev1.Pod, error)
	Update(ctx context.Context, obj *corev1.Pod) (*corev1.Pod, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// ClaimClient writes PersistentVolumeClaims (*client.Client[*corev1.PersistentVolumeClaim]).
type ClaimClient interface {
	Get(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error)
	Create(ctx context.Context, obj *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error)
	Update(ctx context.Context, obj *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error)
}

// Config wires a Controller; New adds handlers to the shared informers.
type Config struct {
	StatefulSets     StatefulSetClient
	Revisions        RevisionClient
	Pods             PodClient
	Claims           ClaimClient
	SetInformer      *client.Informer[*appsv1.StatefulSet]
	RevisionInformer *client.Informer[*appsv1.ControllerRevision]
	PodInformer      *client.Informer[*corev1.Pod]
	ClaimInformer    *client.Informer[*corev1.PersistentVolumeClaim]
	Recorder         *client.Recorder
	Logger           *slog.Logger
	// TracerProvider records a span per reconcile, in the trace of the
	// object's last change; nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the StatefulSet controller.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
	now   func() time.Time
}

// New returns a controller and registers its informer handlers.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "statefulset"), queue: client.NewQueue("statefulset", 0, 0), now: time.Now}
	cfg.SetInformer.AddEventHandler(client.EnqueueHandler[*appsv1.StatefulSet](c.queue))
	cfg.PodInformer.AddEventHandler(client.Handler[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) { c.enqueueFor(p.GetMetadata()) },
		OnUpdate: func(o, p *corev1.Pod) {
			if ownerKey(o.GetMetadata()) != ownerKey(p.GetMetadata()) {
				c.enqueueFor(o.GetMetadata())
			}
			c.enqueueFor(p.GetMetadata())
		},
		OnDelete: func(p *corev1.Pod) { c.enqueueFor(p.GetMetadata()) },
	})
	cfg.RevisionInformer.AddEventHandler(client.Handler[*appsv1.ControllerRevision]{
		OnAdd:    func(h *appsv1.ControllerRevision) { c.enqueueFor(h.GetMetadata()) },
		OnDelete: func(h *appsv1.ControllerRevision) { c.enqueueFor(h.GetMetadata()) },
	})
	return c
}

// ownerKey is the key of the StatefulSet controlling an object, or "".
func ownerKey(m *metav1.ObjectMeta) string {
	for _, r := range m.GetOwnerReferences() {
		if r.GetController() {
			if r.GetKind() == "StatefulSet" {
				return client.KeyOf(m.GetNamespace(), r.GetName())
			}
			return ""
		}
	}
	return ""
}

// enqueueFor enqueues the set controlling an object or, for an orphan,
// every set of its namespace whose selector matches it.
func (c *Controller) enqueueFor(m *metav1.ObjectMeta) {
	if k := ownerKey(m); k != "" {
		c.queue.Add(k)
		return
	}
	if ctrl.ControllerRef(&corev1.Pod{Metadata: m}) != nil {
		return
	}
	for _, set := range c.cfg.SetInformer.Store().ByNamespace(m.GetNamespace()) {
		if sel, err := kubeconv.Selector(set.GetSpec().GetSelector()); err == nil && !sel.Empty() && sel.Matches(labels.Set(m.GetLabels())) {
			c.queue.Add(client.Key(set))
		}
	}
}

// Run waits for the caches, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.SetInformer, c.cfg.RevisionInformer, c.cfg.PodInformer, c.cfg.ClaimInformer) {
		return
	}
	client.RunWorkers(ctx, c.queue, workers, client.TracedReconciler(c.cfg.TracerProvider, "statefulset.reconcile", c.cfg.SetInformer.Store(), c.Reconcile), c.log)
}

// Reconcile syncs the StatefulSet named by key.
func (c *Controller) Reconcile(ctx context.Context, key string) (client.Result, error) {
	cached, ok := c.cfg.SetInformer.Store().Get(key)
	if !ok {
		return client.Result{}, nil
	}
	set := proto.Clone(cached).(*appsv1.StatefulSet)
	if set.GetMetadata().GetDeletionTimestamp() != nil {
		// The garbage collector takes its pods (and, per its policy, claims).
		return client.Result{}, nil
	}
	sel, err := kubeconv.Selector(set.GetSpec().GetSelector())
	if err != nil || sel.Empty() {
		ctrl.Eventf(c.cfg.Recorder, set, "Warning", "InvalidSelector", "The selector of this StatefulSet selects no or all pods")
		return client.Result{}, nil
	}
	pods, err := c.claimPods(ctx, set, sel)
	if err != nil {
		return client.Result{}, err
	}
	all, cur, upd, err := c.revisions(ctx, set, sel)
	if errors.Is(err, errCollision) {
		return client.Result{}, err
	}
	if err != nil {
		return client.Result{}, fmt.Errorf("statefulset %s: revisions: %w", key, err)
	}
	s := &syncer{c: c, set: set, cur: cur, upd: upd}
	if s.curSet, err = withRevision(set, cur); err != nil {
		return client.Result{}, err
	}
	if s.updSet, err = withRevision(set, upd); err != nil {
		return client.Result{}, err
	}
	pods, serr := s.sync(ctx, pods)
	res, err := c.syncStatus(ctx, set, pods, cur, upd)
	if err != nil && serr == nil {
		serr = err
	}
	if serr != nil {
		return res, serr
	}
	return res, c.truncateHistory(ctx, set, pods, all, cur, upd)
}

// withRevision is set with the template revision h holds.
func withRevision(set *appsv1.StatefulSet, h *appsv1.ControllerRevision) (*appsv1.StatefulSet, error) {
	t, err := templateOf(h)
	if err != nil {
		return nil, err
	}
	out := proto.Clone(set).(*appsv1.StatefulSet)
	out.Spec.Template = t
	return out, nil
}

// claimPods returns copies of the pods set controls, adopting orphans its
// selector matches whose name is one of its ordinals and releasing the
// ones relabelled out of it, as Kubernetes' ClaimPods.
func (c *Controller) claimPods(ctx context.Context, set *appsv1.StatefulSet, sel labels.Selector) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	uid := set.GetMetadata().GetUid()
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(set.GetMetadata().GetNamespace()) {
		matches := sel.Matches(labels.Set(p.GetMetadata().GetLabels())) && ordinalOf(set, p) >= 0
		r := ctrl.ControllerRef(p)
		switch {
		case r != nil && r.GetUid() == uid && matches:
			out = append(out, proto.Clone(p).(*corev1.Pod))
		case r != nil && r.GetUid() == uid && p.GetMetadata().GetDeletionTimestamp() == nil:
			u := proto.Clone(p).(*corev1.Pod)
			var refs []*metav1.OwnerReference
			for _, o := range u.GetMetadata().GetOwnerReferences() {
				if o.GetUid() != uid {
					refs = append(refs, o)
				}
			}
			u.Metadata.OwnerReferences = refs
			if _, err := c.cfg.Pods.Update(ctx, u); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return nil, fmt.Errorf("statefulset %s: release pod %s: %w", client.Key(set), client.Key(p), err)
			}
		case r == nil && matches && p.GetMetadata().GetDeletionTimestamp() == nil:
			u := proto.Clone(p).(*corev1.Pod)
			u.Metadata.OwnerReferences = append(u.Metadata.OwnerReferences, ctrl.NewControllerRef(set, "apps/v1", "StatefulSet"))
			got, err := c.cfg.Pods.Update(ctx, u)
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("statefulset %s: adopt pod %s: %w", client.Key(set), client.Key(p), err)
			}
			out = append(out, got)
		}
	}
	return out, nil
}

// ordinalOf is the ordinal in p's name if it is <set>-<ordinal>, else -1.
func ordinalOf(set *appsv1.StatefulSet, p *corev1.Pod) int {
	rest, ok := strings.CutPrefix(p.GetMetadata().GetName(), set.GetMetadata().GetName()+"-")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || strconv.Itoa(n) != rest {
		return -1
	}
	return n
}

// podName is the name of set's pod with ordinal n.
func podName(set *appsv1.StatefulSet, n int) string {
	return set.GetMetadata().GetName() + "-" + strconv.Itoa(n)
}

// claimName is the name of the claim of template t for set's pod n.
func claimName(set *appsv1.StatefulSet, t *corev1.PersistentVolumeClaim, n int) string {
	return t.GetMetadata().GetName() + "-" + podName(set, n)
}

// Pod states as the controller reads them.
func runningAndReady(p *corev1.Pod) bool {
	ready, _ := ctrl.PodReady(p)
	return p.GetStatus().GetPhase() == "Running" && ready
}

func terminating(p *corev1.Pod) bool { return p.GetMetadata().GetDeletionTimestamp() != nil }

func created(p *corev1.Pod) bool { return p.GetStatus().GetPhase() != "" }

func finished(p *corev1.Pod) bool {
	ph := p.GetStatus().GetPhase()
	return ph == "Failed" || ph == "Succeeded"
}

func revisionOf(p *corev1.Pod) string { return p.GetMetadata().GetLabels()[HashLabel] }

// syncStatus writes the status Kubernetes' controller computes: the
// created pods, ready and available ones, those at the current and the
// update revision; the rollout is complete (the update revision becomes
// current) once every pod is updated and ready. It asks to run again when
// the first ready pod becomes available with time.
func (c *Controller) syncStatus(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod, cur, upd *appsv1.ControllerRevision) (client.Result, error) {
	now := c.now()
	minReady := set.GetSpec().GetMinReadySeconds()
	st := &appsv1.StatefulSetStatus{
		ObservedGeneration: set.GetMetadata().GetGeneration(),
		CurrentRevision:    cur.GetMetadata().GetName(),
		UpdateRevision:     upd.GetMetadata().GetName(),
		CollisionCount:     set.GetStatus().CollisionCount,
		Conditions:         set.GetStatus().GetConditions(),
	}
	var res client.Result
	for _, p := range pods {
		if created(p) {
			st.Replicas++
		}
		if runningAndReady(p) {
			st.ReadyReplicas++
			if ctrl.PodAvailable(p, minReady, now) {
				st.AvailableReplicas++
			} else if _, since := ctrl.PodReady(p); !since.IsZero() {
				res = res.Sooner(since.Add(time.Duration(minReady)*time.Second).Sub(now) + 10*time.Millisecond)
			}
		}
		if created(p) && !terminating(p) {
			if revisionOf(p) == st.CurrentRevision {
				st.CurrentReplicas++
			}
			if revisionOf(p) == st.UpdateRevision {
				st.UpdatedReplicas++
			}
		}
	}
	if set.GetSpec().GetUpdateStrategy().GetType() == "RollingUpdate" && st.UpdatedReplicas == st.Replicas && st.ReadyReplicas == st.Replicas {
		st.CurrentRevision = st.UpdateRevision
		st.CurrentReplicas = st.UpdatedReplicas
	}
	if proto.Equal(st, set.GetStatus()) {
		return res, nil
	}
	u := proto.Clone(set).(*appsv1.StatefulSet)
	u.Status = st
	if _, err := c.cfg.StatefulSets.UpdateStatus(ctx, u); err != nil {
		if apierrors.IsNotFound(err) {
			return res, nil
		}
		return res, fmt.Errorf("statefulset %s: status: %w", client.Key(set), err)
	}
	return res, nil
}
