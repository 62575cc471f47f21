// Package daemonset is the DaemonSet controller: one pod of a DaemonSet on
// every node that should run it (its nodeSelector, required node affinity
// and the node's taints against the pod's tolerations, with the
// tolerations Kubernetes adds to every daemon pod), placed through the
// scheduler by a required node affinity on the node's name; its template
// kept in ControllerRevisions (revisionHistoryLimit of them); pods replaced
// on a template change by the RollingUpdate strategy (maxUnavailable or
// maxSurge) or, with OnDelete, only once deleted; and the status `kubectl
// rollout status` reads. Each sync recomputes everything from the
// informer caches, as Kubernetes' controller does.
package daemonset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/kplane/kplane/proto/apierrors"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubeconv"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// Well-known labels and annotations.
const (
	// HashLabel is on each revision and pod: the hash of the template.
	HashLabel = "controller-revision-hash"
	// GenerationLabel is on each pod: the DaemonSet's template generation
	// when the pod was made.
	GenerationLabel = "pod-template-generation"
	// TemplateGenerationAnnotation is where apps/v1 keeps the template
	// generation (the API service sets it).
	TemplateGenerationAnnotation = "deprecated.daemonset.template.generation"
)

// DaemonSetClient reads and writes DaemonSets (*client.Client[*appsv1.DaemonSet]).
type DaemonSetClient interface {
	Get(ctx context.Context, namespace, name string) (*appsv1.DaemonSet, error)
	UpdateStatus(ctx context.Context, obj *appsv1.DaemonSet) (*appsv1.DaemonSet, error)
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

// Config wires a Controller; New adds handlers to the shared informers.
type Config struct {
	DaemonSets       DaemonSetClient
	Revisions        RevisionClient
	Pods             PodClient
	DSInformer       *client.Informer[*appsv1.DaemonSet]
	RevisionInformer *client.Informer[*appsv1.ControllerRevision]
	PodInformer      *client.Informer[*corev1.Pod]
	NodeInformer     *client.Informer[*corev1.Node]
	Recorder         *client.Recorder
	Logger           *slog.Logger
	// TracerProvider records a span per reconcile, in the trace of the
	// object's last change; nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the DaemonSet controller.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
	exp   *ctrl.Expectations
	now   func() time.Time
	// failed backs off the deletion of failed daemon pods per
	// DaemonSet and node, so a node that keeps failing the pod is not
	// hot-looped (1 s doubling to 15 min, as Kubernetes).
	failedMu sync.Mutex
	failed   *flowcontrol.Backoff
}

// New returns a controller and registers its informer handlers.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "daemonset"), queue: client.NewQueue("daemonset", 0, 0),
		exp: ctrl.NewExpectations(), now: time.Now, failed: flowcontrol.NewBackOff(time.Second, 15*time.Minute)}
	cfg.DSInformer.AddEventHandler(client.EnqueueHandler[*appsv1.DaemonSet](c.queue))
	cfg.DSInformer.AddEventHandler(client.Handler[*appsv1.DaemonSet]{OnDelete: func(ds *appsv1.DaemonSet) { c.exp.Delete(client.Key(ds)) }})
	cfg.RevisionInformer.AddEventHandler(client.Handler[*appsv1.ControllerRevision]{
		OnAdd: func(h *appsv1.ControllerRevision) { c.enqueueOwnerOrMatching(h.GetMetadata()) },
		OnUpdate: func(o, h *appsv1.ControllerRevision) {
			c.enqueueOwnerOrMatching(o.GetMetadata())
			c.enqueueOwnerOrMatching(h.GetMetadata())
		},
		OnDelete: func(h *appsv1.ControllerRevision) { c.enqueueOwnerOrMatching(h.GetMetadata()) },
	})
	cfg.PodInformer.AddEventHandler(client.Handler[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) {
			if k := ownerKey(p.GetMetadata()); k != "" {
				if p.GetMetadata().GetDeletionTimestamp() != nil {
					c.exp.DeletionObserved(k, client.Key(p))
				} else {
					c.exp.CreationObserved(k)
				}
			}
			c.enqueueOwnerOrMatching(p.GetMetadata())
		},
		OnUpdate: func(o, p *corev1.Pod) {
			if k := ownerKey(p.GetMetadata()); k != "" && p.GetMetadata().GetDeletionTimestamp() != nil && o.GetMetadata().GetDeletionTimestamp() == nil {
				c.exp.DeletionObserved(k, client.Key(p))
			}
			if ownerKey(o.GetMetadata()) != ownerKey(p.GetMetadata()) {
				c.enqueueOwnerOrMatching(o.GetMetadata())
			}
			c.enqueueOwnerOrMatching(p.GetMetadata())
		},
		OnDelete: func(p *corev1.Pod) {
			if k := ownerKey(p.GetMetadata()); k != "" {
				c.exp.DeletionObserved(k, client.Key(p))
				c.queue.Add(k)
			}
		},
	})
	// A node joining, leaving or changing what decides placement (labels,
	// taints, cordon, conditions) may change where every DaemonSet runs.
	cfg.NodeInformer.AddEventHandler(client.Handler[*corev1.Node]{
		OnAdd: func(*corev1.Node) { c.enqueueAll() },
		OnUpdate: func(o, n *corev1.Node) {
			if !placementEqual(o, n) {
				c.enqueueAll()
			}
		},
		OnDelete: func(*corev1.Node) { c.enqueueAll() },
	})
	return c
}

// placementEqual reports whether two versions of a node place daemon pods
// alike.
func placementEqual(a, b *corev1.Node) bool {
	if !proto.Equal(&metav1.ObjectMeta{Labels: a.GetMetadata().GetLabels()}, &metav1.ObjectMeta{Labels: b.GetMetadata().GetLabels()}) ||
		!proto.Equal(a.GetSpec(), b.GetSpec()) {
		return false
	}
	conds := func(n *corev1.Node) map[string]string {
		m := map[string]string{}
		for _, c := range n.GetStatus().GetConditions() {
			m[c.GetType()] = c.GetStatus()
		}
		return m
	}
	ca, cb := conds(a), conds(b)
	if len(ca) != len(cb) {
		return false
	}
	for k, v := range ca {
		if cb[k] != v {
			return false
		}
	}
	return true
}

// ownerKey is the key of the DaemonSet controlling an object, or "".
func ownerKey(m *metav1.ObjectMeta) string {
	for _, r := range m.GetOwnerReferences() {
		if r.GetController() {
			if r.GetKind() == "DaemonSet" {
				return client.KeyOf(m.GetNamespace(), r.GetName())
			}
			return ""
		}
	}
	return ""
}

// enqueueOwnerOrMatching enqueues the DaemonSet controlling an object or,
// for an orphan, every DaemonSet of its namespace whose selector matches
// it (one may adopt it).
func (c *Controller) enqueueOwnerOrMatching(m *metav1.ObjectMeta) {
	if k := ownerKey(m); k != "" {
		c.queue.Add(k)
		return
	}
	if ctrl.ControllerRef(&corev1.Pod{Metadata: m}) != nil {
		return
	}
	for _, ds := range c.cfg.DSInformer.Store().ByNamespace(m.GetNamespace()) {
		if sel, err := kubeconv.Selector(ds.GetSpec().GetSelector()); err == nil && !sel.Empty() && sel.Matches(labels.Set(m.GetLabels())) {
			c.queue.Add(client.Key(ds))
		}
	}
}

func (c *Controller) enqueueAll() {
	for _, k := range c.cfg.DSInformer.Store().Keys() {
		c.queue.Add(k)
	}
}

// Run waits for the caches, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.DSInformer, c.cfg.RevisionInformer, c.cfg.PodInformer, c.cfg.NodeInformer) {
		return
	}
	client.RunWorkers(ctx, c.queue, workers, client.TracedReconciler(c.cfg.TracerProvider, "daemonset.reconcile", c.cfg.DSInformer.Store(), c.Reconcile), c.log)
}

// Reconcile syncs the DaemonSet named by key.
func (c *Controller) Reconcile(ctx context.Context, key string) (client.Result, error) {
	cached, ok := c.cfg.DSInformer.Store().Get(key)
	if !ok {
		c.exp.Delete(key)
		return client.Result{}, nil
	}
	ds := proto.Clone(cached).(*appsv1.DaemonSet)
	sel, err := kubeconv.Selector(ds.GetSpec().GetSelector())
	if err != nil {
		return client.Result{}, fmt.Errorf("daemonset %s: selector: %w", key, err)
	}
	if sel.Empty() {
		ctrl.Eventf(c.cfg.Recorder, ds, "Warning", "SelectingAll", "This daemon set is selecting all pods. A non-empty selector is required.")
		return client.Result{}, nil
	}
	if ds.GetMetadata().GetDeletionTimestamp() != nil {
		// Its revisions and pods may be going: no status can be trusted.
		return client.Result{}, nil
	}
	nodes := c.cfg.NodeInformer.Store().List()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].GetMetadata().GetName() < nodes[j].GetMetadata().GetName() })
	cur, old, err := c.history(ctx, ds, sel)
	if errors.Is(err, errStaleCollision) {
		return client.Result{}, err // retried with the new collisionCount
	}
	if err != nil {
		return client.Result{}, fmt.Errorf("daemonset %s: revisions: %w", key, err)
	}
	hash := cur.GetMetadata().GetLabels()[HashLabel]
	if !c.exp.Satisfied(key) {
		// Only the status; observedGeneration is not raised for a
		// generation not acted on.
		return c.syncStatus(ctx, ds, nodes, hash, false)
	}
	if err := c.adopt(ctx, ds, sel); err != nil {
		return client.Result{}, err
	}
	res, err := c.manage(ctx, ds, nodes, hash)
	if err == nil && c.exp.Satisfied(key) && ds.GetSpec().GetUpdateStrategy().GetType() == "RollingUpdate" {
		err = c.rollingUpdate(ctx, ds, nodes, hash)
	}
	if err == nil {
		err = c.cleanupHistory(ctx, ds, old)
	}
	sres, serr := c.syncStatus(ctx, ds, nodes, hash, true)
	if err == nil {
		err = serr
	}
	return res.Sooner(sres.RequeueAfter), err
}

// adopt gives ds the orphan pods its selector matches and, as
// Kubernetes' ClaimPods, releases the pods it controls whose labels no
// longer match (a user relabelled them): they are no longer daemon pods.
func (c *Controller) adopt(ctx context.Context, ds *appsv1.DaemonSet, sel labels.Selector) error {
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(ds.GetMetadata().GetNamespace()) {
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		matches := sel.Matches(labels.Set(p.GetMetadata().GetLabels()))
		r := ctrl.ControllerRef(p)
		u := proto.Clone(p).(*corev1.Pod)
		switch {
		case r == nil && matches:
			u.Metadata.OwnerReferences = append(u.Metadata.OwnerReferences, ctrl.NewControllerRef(ds, "apps/v1", "DaemonSet"))
		case r != nil && r.GetUid() == ds.GetMetadata().GetUid() && !matches:
			u.Metadata.OwnerReferences = slices.DeleteFunc(u.Metadata.OwnerReferences, func(o *metav1.OwnerReference) bool {
				return o.GetUid() == ds.GetMetadata().GetUid()
			})
		default:
			continue
		}
		if _, err := c.cfg.Pods.Update(ctx, u); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("daemonset %s: claim pod %s: %w", client.Key(ds), client.Key(p), err)
		}
	}
	return nil
}

// podsOf are copies of the pods ds controls.
func (c *Controller) podsOf(ds *appsv1.DaemonSet) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(ds.GetMetadata().GetNamespace()) {
		if r := ctrl.ControllerRef(p); r != nil && r.GetUid() == ds.GetMetadata().GetUid() {
			out = append(out, proto.Clone(p).(*corev1.Pod))
		}
	}
	return out
}

// podsByNode groups ds's pods by the node they are for, leaving out
// finished pods already being deleted. Each node's pods are oldest first
// (a running pod before a pending one of the same age).
func (c *Controller) podsByNode(ds *appsv1.DaemonSet) map[string][]*corev1.Pod {
	m := map[string][]*corev1.Pod{}
	for _, p := range c.podsOf(ds) {
		if finished(p) && p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if n := targetNode(p); n != "" {
			m[n] = append(m[n], p)
		}
	}
	for _, ps := range m {
		sortOldestFirst(ps)
	}
	return m
}

func finished(p *corev1.Pod) bool {
	ph := p.GetStatus().GetPhase()
	return ph == "Succeeded" || ph == "Failed"
}

func sortOldestFirst(ps []*corev1.Pod) {
	sort.SliceStable(ps, func(i, j int) bool {
		ti, tj := ps[i].GetMetadata().GetCreationTimestamp().AsTime(), ps[j].GetMetadata().GetCreationTimestamp().AsTime()
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return ps[i].GetStatus().GetPhase() == "Running" && ps[j].GetStatus().GetPhase() != "Running"
	})
}

// templateGeneration is ds's template generation, if it has one.
func templateGeneration(ds *appsv1.DaemonSet) (int64, bool) {
	g, err := strconv.ParseInt(ds.GetMetadata().GetAnnotations()[TemplateGenerationAnnotation], 10, 64)
	return g, err == nil
}

// updated reports whether p runs ds's current template: its hash label is
// the current revision's, or its generation label the current template
// generation.
func updated(p *corev1.Pod, ds *appsv1.DaemonSet, hash string) bool {
	l := p.GetMetadata().GetLabels()
	if g, ok := templateGeneration(ds); ok && l[GenerationLabel] == strconv.FormatInt(g, 10) {
		return true
	}
	return hash != "" && l[HashLabel] == hash
}

func allowsSurge(ds *appsv1.DaemonSet) bool {
	n, err := surgeCount(ds, 1)
	return err == nil && n > 0
}

// surgeCount and unavailableCount are maxSurge and maxUnavailable of
// desired pods (percentages rounded up), 0 without RollingUpdate.
func surgeCount(ds *appsv1.DaemonSet, desired int) (int, error) {
	ru := ds.GetSpec().GetUpdateStrategy().GetRollingUpdate()
	if ds.GetSpec().GetUpdateStrategy().GetType() != "RollingUpdate" || ru.GetMaxSurge() == nil {
		return 0, nil
	}
	return scaledValue(ru.GetMaxSurge(), desired)
}

func unavailableCount(ds *appsv1.DaemonSet, desired int) (int, error) {
	ru := ds.GetSpec().GetUpdateStrategy().GetRollingUpdate()
	if ds.GetSpec().GetUpdateStrategy().GetType() != "RollingUpdate" || ru == nil {
		return 0, nil
	}
	return scaledValue(ru.GetMaxUnavailable(), desired)
}

func scaledValue(v *metav1.IntOrString, total int) (int, error) {
	if s, ok := v.GetValue().(*metav1.IntOrString_StrVal); ok {
		var p int
		if _, err := fmt.Sscanf(s.StrVal, "%d%%", &p); err != nil {
			return 0, fmt.Errorf("daemonset: invalid percentage %q: %w", s.StrVal, err)
		}
		return (p*total + 99) / 100, nil
	}
	return int(v.GetIntVal()), nil
}

// burst caps the creations and deletions of one sync (Kubernetes'
// burstReplicas); the rest follow in the next.
const burst = 250
