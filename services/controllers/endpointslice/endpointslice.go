// Package endpointslice is the EndpointSlice controller: for every Service
// with a selector (and not of type ExternalName) it keeps the
// discovery.k8s.io/v1 EndpointSlices listing the matching pods, as
// Kubernetes' endpointslice-controller.k8s.io does: slices named
// <service>-<random>, labelled kubernetes.io/service-name and
// endpointslice.kubernetes.io/managed-by, owned by the Service, one set of
// slices per address family of the Service and per set of resolved ports,
// at most MaxEndpointsPerSlice endpoints each, and one empty placeholder
// slice while no pod matches.
package endpointslice

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	"github.com/kplane/kplane/services/client"
)

// Labels and names Kubernetes' EndpointSlice controllers use.
const (
	LabelServiceName = "kubernetes.io/service-name"
	LabelManagedBy   = "endpointslice.kubernetes.io/managed-by"
	LabelHeadless    = "service.kubernetes.io/headless"
	// ControllerName is the managed-by value of the slices this
	// controller keeps.
	ControllerName = "endpointslice-controller.k8s.io"
	// MaxEndpointsPerSlice is kube-controller-manager's
	// --max-endpoints-per-slice default.
	MaxEndpointsPerSlice = 100
	// zoneLabel is the node label an endpoint's zone comes from.
	zoneLabel = "topology.kubernetes.io/zone"
)

// SliceClient writes EndpointSlices (*client.Client[*discoveryv1.EndpointSlice]).
type SliceClient interface {
	Create(ctx context.Context, obj *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error)
	Update(ctx context.Context, obj *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error)
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
}

// Config wires a Controller; New adds handlers to the shared informers.
type Config struct {
	Slices          SliceClient
	ServiceInformer *client.Informer[*corev1.Service]
	PodInformer     *client.Informer[*corev1.Pod]
	// NodeInformer gives endpoints their zone; nil leaves zone unset.
	NodeInformer  *client.Informer[*corev1.Node]
	SliceInformer *client.Informer[*discoveryv1.EndpointSlice]
	// MaxEndpointsPerSlice defaults to MaxEndpointsPerSlice.
	MaxEndpointsPerSlice int
	Logger               *slog.Logger
	// TracerProvider records a span per reconcile; nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the EndpointSlice controller.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	queue   client.Queue
	causes  client.TraceCauses
	tracker *Tracker
}

// New returns a controller and registers its handlers.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxEndpointsPerSlice <= 0 {
		cfg.MaxEndpointsPerSlice = MaxEndpointsPerSlice
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "endpointslice"),
		queue: client.NewQueue("endpointslice", 0, 0), tracker: NewTracker()}
	cfg.ServiceInformer.AddEventHandler(client.EnqueueHandler[*corev1.Service](c.queue))
	cfg.PodInformer.AddEventHandler(client.Handler[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) { c.enqueueFor(p, nil, p) },
		OnUpdate: func(o, n *corev1.Pod) {
			c.enqueueFor(o, o, n)
			c.enqueueFor(n, o, n)
		},
		OnDelete: func(p *corev1.Pod) { c.enqueueFor(p, nil, p) },
	})
	// A slice changed or deleted by someone else is put back; one this
	// controller wrote shows up here once the cache has it.
	enqueueSlice := func(s *discoveryv1.EndpointSlice) {
		l := s.GetMetadata().GetLabels()
		if l[LabelManagedBy] == ControllerName && l[LabelServiceName] != "" {
			c.queue.Add(client.KeyOf(s.GetMetadata().GetNamespace(), l[LabelServiceName]))
		}
	}
	cfg.SliceInformer.AddEventHandler(client.Handler[*discoveryv1.EndpointSlice]{
		OnAdd:    enqueueSlice,
		OnUpdate: func(o, n *discoveryv1.EndpointSlice) { enqueueSlice(o); enqueueSlice(n) },
		OnDelete: func(s *discoveryv1.EndpointSlice) {
			// Gone from the cache, whoever deleted it: nothing to wait for.
			c.tracker.Drop(client.KeyOf(s.GetMetadata().GetNamespace(), s.GetMetadata().GetLabels()[LabelServiceName]), s.GetMetadata().GetUid())
			enqueueSlice(s)
		},
	})
	return c
}

// enqueueFor enqueues the services whose selector matches p, noting the
// trace of the pod's change from old (nil: created or deleted) to cur as
// the cause.
func (c *Controller) enqueueFor(p, old, cur *corev1.Pod) {
	set := labels.Set(p.GetMetadata().GetLabels())
	for _, s := range c.cfg.ServiceInformer.Store().ByNamespace(p.GetMetadata().GetNamespace()) {
		sel := s.GetSpec().GetSelector()
		if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(set) {
			k := client.Key(s)
			if old == nil {
				c.causes.Add(k, cur.GetMetadata().GetAnnotations())
			} else {
				c.causes.AddChange(k, old.GetMetadata().GetAnnotations(), cur.GetMetadata().GetAnnotations())
			}
			c.queue.Add(k)
		}
	}
}

// Run waits for the caches, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	syncers := []client.Syncer{c.cfg.ServiceInformer, c.cfg.PodInformer, c.cfg.SliceInformer}
	if c.cfg.NodeInformer != nil {
		syncers = append(syncers, c.cfg.NodeInformer)
	}
	if !client.WaitForCacheSync(ctx, syncers...) {
		return
	}
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "endpointslice.reconcile",
		Annotations: client.StoreAnnotations(c.cfg.ServiceInformer.Store()), Causes: &c.causes}
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
}

// Reconcile brings the slices of the Service named by key to what its pods
// say. A Service that is gone loses its slices (on Kubernetes the garbage
// collector removes them through their owner reference; the end state is
// the same).
func (c *Controller) Reconcile(ctx context.Context, key string) (client.Result, error) {
	ns, name := client.SplitKey(key)
	slices := c.ownedSlices(ns, name)
	svc, ok := c.cfg.ServiceInformer.Store().Get(key)
	if !ok {
		c.tracker.Forget(key)
		for _, s := range slices {
			if err := c.delete(ctx, key, s); err != nil {
				return client.Result{}, err
			}
		}
		return client.Result{}, nil
	}
	if svc.GetSpec().GetType() == "ExternalName" || svc.GetSpec().GetSelector() == nil {
		return client.Result{}, nil // slices of such Services are written by others
	}
	if c.tracker.Stale(key, slices) {
		return client.Result{}, fmt.Errorf("endpointslice %s: the EndpointSlice cache is behind this controller's writes", key)
	}
	sel := labels.SelectorFromSet(svc.GetSpec().GetSelector())
	var pods []*corev1.Pod
	for _, p := range c.cfg.PodInformer.Store().ByNamespace(ns) {
		if sel.Matches(labels.Set(p.GetMetadata().GetLabels())) {
			pods = append(pods, p)
		}
	}
	p := plan(svc, pods, slices, c.nodeZone, c.cfg.MaxEndpointsPerSlice)
	for _, s := range p.create {
		created, err := c.cfg.Slices.Create(ctx, s)
		if err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
				// The namespace is going away (Kubernetes stops there too).
				return client.Result{}, nil
			}
			return client.Result{}, fmt.Errorf("endpointslice %s: create: %w", key, err)
		}
		c.tracker.Wrote(key, created)
	}
	for _, s := range p.update {
		updated, err := c.cfg.Slices.Update(ctx, s)
		if err != nil {
			return client.Result{}, fmt.Errorf("endpointslice %s: update %s: %w", key, s.GetMetadata().GetName(), err)
		}
		c.tracker.Wrote(key, updated)
	}
	for _, s := range p.remove {
		if err := c.delete(ctx, key, s); err != nil {
			return client.Result{}, err
		}
	}
	if len(p.skipped) > 0 {
		// Retried with back-off until the node shows up or the pod goes.
		return client.Result{}, fmt.Errorf("endpointslice %s: pods skipped, their node not found: %v", key, p.skipped)
	}
	return client.Result{}, nil
}

func (c *Controller) delete(ctx context.Context, key string, s *discoveryv1.EndpointSlice) error {
	m := s.GetMetadata()
	err := c.cfg.Slices.Delete(ctx, m.GetNamespace(), m.GetName(), client.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("endpointslice %s: delete %s: %w", key, m.GetName(), err)
	}
	c.tracker.Deleted(key, s)
	return nil
}

// ownedSlices are the cached slices this controller keeps for the Service
// ns/name, without those being deleted.
func (c *Controller) ownedSlices(ns, name string) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, s := range c.cfg.SliceInformer.Store().ByNamespace(ns) {
		l := s.GetMetadata().GetLabels()
		if l[LabelServiceName] == name && l[LabelManagedBy] == ControllerName && s.GetMetadata().GetDeletionTimestamp() == nil {
			out = append(out, s)
		}
	}
	return out
}

// nodeZone is the zone label of the node named name and whether that node
// exists (always, without a node informer).
func (c *Controller) nodeZone(name string) (string, bool) {
	if c.cfg.NodeInformer == nil {
		return "", true
	}
	n, ok := c.cfg.NodeInformer.Store().Get(name)
	if !ok {
		return "", false
	}
	return n.GetMetadata().GetLabels()[zoneLabel], true
}

// Tracker remembers the generation of every slice a controller last wrote
// (and the slices it deleted), per Service (or Endpoints) key, so that a
// reconcile working from an informer cache that has not seen those writes
// yet waits instead of creating duplicates, as Kubernetes'
// EndpointSliceTracker. The EndpointSlice and mirroring controllers each
// have one; it is safe for concurrent use.
type Tracker struct {
	mu sync.Mutex
	// generations: service key → slice uid → generation written, or -1
	// for a slice deleted.
	generations map[string]map[string]int64
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker { return &Tracker{generations: map[string]map[string]int64{}} }

// Wrote records s as written for key.
func (t *Tracker) Wrote(key string, s *discoveryv1.EndpointSlice) {
	t.set(key, s.GetMetadata().GetUid(), s.GetMetadata().GetGeneration())
}

// Deleted records s as deleted for key.
func (t *Tracker) Deleted(key string, s *discoveryv1.EndpointSlice) {
	t.set(key, s.GetMetadata().GetUid(), -1)
}

func (t *Tracker) set(key, uid string, gen int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.generations[key]
	if m == nil {
		m = map[string]int64{}
		t.generations[key] = m
	}
	m[uid] = gen
}

// Drop forgets the slice uid of key (the cache saw it deleted).
func (t *Tracker) Drop(key, uid string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.generations[key], uid)
}

// Forget forgets every slice of key.
func (t *Tracker) Forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.generations, key)
}

// Stale reports whether cached (the cache's slices of the Service key) is
// older than what this controller wrote: a slice it wrote missing or at an
// older generation, or one it deleted still there. Entries the cache has
// caught up with are dropped.
func (t *Tracker) Stale(key string, cached []*discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	want := t.generations[key]
	if len(want) == 0 {
		return false
	}
	have := make(map[string]int64, len(cached))
	for _, s := range cached {
		have[s.GetMetadata().GetUid()] = s.GetMetadata().GetGeneration()
	}
	stale := false
	for uid, gen := range want {
		g, ok := have[uid]
		switch {
		case gen < 0 && ok, gen >= 0 && (!ok || g < gen):
			stale = true
		default:
			delete(want, uid)
		}
	}
	return stale
}
