// Package garbagecollector deletes objects whose owners are gone and
// carries out the foreground and orphan deletion of owners, over the owner
// graph of the namespaced resources it is given (ownerReferences, indexed
// by owner uid in the shared informers).
//
//   - Background: an object all of whose owners are gone (missing, or
//     present with another uid — confirmed with a live read, since the
//     owner's informer may lag) is deleted; owners that are gone are dropped
//     from an object that still has others.
//   - Foreground: an owner being deleted with the foregroundDeletion
//     finalizer has its dependents deleted (foreground too); the finalizer
//     is removed once no dependent with blockOwnerDeletion remains.
//   - Orphan: an owner being deleted with the orphan finalizer has its
//     ownerReference removed from every dependent, then the finalizer.
//
// Resources are told apart by kind and group (an ownerReference's kind
// and apiVersion). Beside the built-in resources it is given, it follows
// every custom resource the API service serves (Config.Custom): found
// again every Config.CustomResync, each seen through an informer of its
// objects' metadata, dropped when its CRD goes.
package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// Finalizers the API service sets for propagationPolicy Foreground and Orphan.
const (
	ForegroundFinalizer = "foregroundDeletion"
	OrphanFinalizer     = "orphan"
)

// Config wires a Controller.
type Config struct {
	// Resources are the namespaced resources whose owner graph is
	// collected.
	Resources []ctrl.Resource
	Recorder  *client.Recorder
	Logger    *slog.Logger
	// TracerProvider records a span per reconcile, in the trace of the
	// object collected, linked to the trace of the owner's or dependent's
	// deletion that caused it (client.Trace); nil uses the global one.
	TracerProvider trace.TracerProvider
	// Custom, if set, lists the custom resources served and reads and
	// writes their objects (dynamicv1.ResourceServiceClient).
	Custom Custom
	// CustomResync is how often the custom resources served are listed
	// again (default DefaultCustomResync).
	CustomResync time.Duration
}

// DefaultCustomResync is how often the collector looks for custom
// resources that appeared or went.
const DefaultCustomResync = 10 * time.Second

// Custom is the API service's ResourceService: the custom resources
// served (Discover) and their objects.
type Custom = dynamicv1.ResourceServiceClient

// Controller is the garbage collector.
type Controller struct {
	log    *slog.Logger
	queue  client.Queue
	rec    *client.Recorder
	tp     trace.TracerProvider
	causes client.TraceCauses
	custom Custom
	resync time.Duration

	mu      sync.RWMutex
	res     map[string]ctrl.Resource // by resourceID
	stopped map[string]context.CancelFunc
}

// resourceID names a resource by kind and group: "Deployment.apps",
// "Pod." (the core group), "Widget.example.com".
func resourceID(kind, apiVersion string) string {
	group, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		group = ""
	}
	return kind + "." + group
}

func idOf(r ctrl.Resource) string { return resourceID(r.Kind(), r.APIVersion()) }

// resource is the resource of id, if followed.
func (c *Controller) resource(id string) (ctrl.Resource, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	r, ok := c.res[id]
	return r, ok
}

// requeueDependentsOf queues every cached object with an owner of the
// resource id.
func (c *Controller) requeueDependentsOf(id string) {
	for _, r := range c.resources() {
		for _, o := range r.All() {
			for _, ref := range o.GetMetadata().GetOwnerReferences() {
				if resourceID(ref.GetKind(), ref.GetApiVersion()) == id {
					c.queue.Add(key(idOf(r), o))
					break
				}
			}
		}
	}
}

// resources are the resources followed now.
func (c *Controller) resources() []ctrl.Resource {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]ctrl.Resource, 0, len(c.res))
	for _, r := range c.res {
		out = append(out, r)
	}
	return out
}

// New returns a garbage collector over cfg.Resources and registers its
// handlers.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{res: map[string]ctrl.Resource{}, stopped: map[string]context.CancelFunc{}, log: log.With("controller", "garbagecollector"),
		queue: client.NewQueue("garbagecollector", 0, 0), rec: cfg.Recorder, tp: cfg.TracerProvider, custom: cfg.Custom, resync: cfg.CustomResync}
	if c.resync <= 0 {
		c.resync = DefaultCustomResync
	}
	for _, r := range cfg.Resources {
		c.res[idOf(r)] = r
		r.OnChange(func(o ctrl.Object, deleted bool) { c.observe(r, o, deleted) })
	}
	return c
}

func key(id string, o ctrl.Object) string {
	return id + "/" + client.KeyOf(o.GetMetadata().GetNamespace(), o.GetMetadata().GetName())
}

func (c *Controller) observe(r ctrl.Resource, o ctrl.Object, deleted bool) {
	m := o.GetMetadata()
	if !deleted && (len(m.GetOwnerReferences()) > 0 || (m.GetDeletionTimestamp() != nil &&
		(ctrl.HasFinalizer(m, ForegroundFinalizer) || ctrl.HasFinalizer(m, OrphanFinalizer)))) {
		c.queue.Add(key(idOf(r), o))
	}
	if deleted || m.GetDeletionTimestamp() != nil {
		// Its dependents may now be orphans.
		for _, dr := range c.resources() {
			for _, d := range dr.Dependents(m.GetUid()) {
				k := key(idOf(dr), d)
				c.causes.Add(k, m.GetAnnotations())
				c.queue.Add(k)
			}
		}
		// An owner waiting in foreground deletion may be done.
		for _, ref := range m.GetOwnerReferences() {
			id := resourceID(ref.GetKind(), ref.GetApiVersion())
			if or, ok := c.resource(id); ok {
				if owner, ok := or.CachedByUID(ref.GetUid()); ok {
					k := key(id, owner)
					c.causes.Add(k, m.GetAnnotations())
					c.queue.Add(k)
				}
			}
		}
	}
}

// Run waits for every informer's cache, then collects until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	var syncers []client.Syncer
	for _, r := range c.resources() {
		syncers = append(syncers, r.Informer())
	}
	if !client.WaitForCacheSync(ctx, syncers...) {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if c.custom != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.followCustom(ctx, &wg)
		}()
	}
	t := client.Trace{TracerProvider: c.tp, Span: "garbagecollector.reconcile", Annotations: c.annotations, Causes: &c.causes}
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
}

// followCustom lists the custom resources served every resync until ctx
// ends: one it does not follow yet gets an informer (run on wg), one that
// is no longer served is dropped.
func (c *Controller) followCustom(ctx context.Context, wg *sync.WaitGroup) {
	t := time.NewTicker(c.resync)
	defer t.Stop()
	for {
		if err := c.syncCustom(ctx, wg); err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "listing the custom resources", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// syncCustom follows the custom resources served now, at their storage
// version, and drops those gone.
func (c *Controller) syncCustom(ctx context.Context, wg *sync.WaitGroup) error {
	resp, err := c.custom.Discover(ctx, &dynamicv1.DiscoverRequest{})
	if err != nil {
		return err
	}
	served := map[string]*dynamicv1.ServedResource{}
	for _, sr := range resp.GetResources() {
		if sr.GetStorage() {
			served[resourceID(sr.GetKind(), sr.GetGroup()+"/"+sr.GetVersion())] = sr
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, stop := range c.stopped {
		if _, ok := served[id]; !ok {
			stop()
			delete(c.stopped, id)
			delete(c.res, id)
			c.log.DebugContext(ctx, "no longer following a custom resource", "resource", id)
		}
	}
	for id, sr := range served {
		if _, ok := c.res[id]; ok {
			continue
		}
		r := ctrl.NewDynamicResource(client.NewDynamicFrom(c.custom), sr.GetGroup(), sr.GetVersion(), sr.GetResource(), sr.GetKind(), sr.GetNamespaced(), c.log)
		r.OnChange(func(o ctrl.Object, deleted bool) { c.observe(r, o, deleted) })
		rctx, stop := context.WithCancel(ctx)
		c.res[id], c.stopped[id] = r, stop
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = r.Run(rctx)
		}()
		// Objects whose owners are of this kind were left alone while it
		// was unknown (an owner deleted meanwhile sent no event here):
		// once its cache is complete, they are looked at again.
		go func() {
			defer wg.Done()
			if client.WaitForCacheSync(rctx, r.Informer()) {
				c.requeueDependentsOf(id)
			}
		}()
		c.log.DebugContext(ctx, "following a custom resource", "resource", id)
	}
	return nil
}

// annotations are those of the cached object key (Kind.group/namespace/name)
// names.
func (c *Controller) annotations(k string) map[string]string {
	id, nsName, _ := strings.Cut(k, "/")
	if r, ok := c.resource(id); ok {
		if obj, ok := r.Cached(nsName); ok {
			return obj.GetMetadata().GetAnnotations()
		}
	}
	return nil
}

// Reconcile handles the object named by key (Kind.group/namespace/name:
// "Deployment.apps/default/web", "Pod./default/web-1").
func (c *Controller) Reconcile(ctx context.Context, k string) (client.Result, error) {
	id, nsName, ok := strings.Cut(k, "/")
	if !ok {
		return client.Result{}, nil
	}
	r, ok := c.resource(id)
	if !ok {
		return client.Result{}, nil
	}
	obj, ok := r.Cached(nsName)
	if !ok {
		return client.Result{}, nil
	}
	m := obj.GetMetadata()
	if m.GetDeletionTimestamp() != nil {
		if ctrl.HasFinalizer(m, OrphanFinalizer) {
			return client.Result{}, c.orphanDependents(ctx, r, obj)
		}
		if ctrl.HasFinalizer(m, ForegroundFinalizer) {
			return client.Result{}, c.deleteDependents(ctx, r, obj)
		}
	}
	if len(m.GetOwnerReferences()) == 0 {
		return client.Result{}, nil
	}
	return client.Result{}, c.collect(ctx, r, obj)
}

// ownerState is what became of one ownerReference.
type ownerState int

const (
	ownerPresent ownerState = iota
	ownerGone
)

// owner looks up ref, in the cache and, if absent there, live.
func (c *Controller) owner(ctx context.Context, ns string, ref *metav1.OwnerReference) (ownerState, error) {
	or, ok := c.resource(resourceID(ref.GetKind(), ref.GetApiVersion()))
	if !ok {
		return ownerPresent, nil // a kind we do not know: leave it alone
	}
	if _, ok := or.CachedByUID(ref.GetUid()); ok {
		return ownerPresent, nil
	}
	live, err := or.Get(ctx, ns, ref.GetName())
	if apierrors.IsNotFound(err) {
		return ownerGone, nil
	}
	if err != nil {
		return ownerPresent, fmt.Errorf("look up owner %s %s/%s: %w", ref.GetKind(), ns, ref.GetName(), err)
	}
	if live.GetMetadata().GetUid() != ref.GetUid() {
		return ownerGone, nil
	}
	return ownerPresent, nil
}

// collect deletes obj if all its owners are gone, or drops the gone ones.
func (c *Controller) collect(ctx context.Context, r ctrl.Resource, obj ctrl.Object) error {
	m := obj.GetMetadata()
	var gone []string
	for _, ref := range m.GetOwnerReferences() {
		st, err := c.owner(ctx, m.GetNamespace(), ref)
		if err != nil {
			return err
		}
		if st == ownerGone {
			gone = append(gone, ref.GetUid())
		}
	}
	switch {
	case len(gone) == 0:
		return nil
	case len(gone) == len(m.GetOwnerReferences()):
		if m.GetDeletionTimestamp() != nil {
			return nil
		}
		c.log.Debug("deleting object whose owners are gone", "kind", r.Kind(), "object", client.KeyOf(m.GetNamespace(), m.GetName()))
		// The resourceVersion precondition makes the delete conditional on
		// the version whose owners were checked: the cache may still hold
		// a dependent whose reference the orphaning of a deleted owner has
		// already removed (the two kinds come on separate watches). Such a
		// delete conflicts, and the newer version's event brings the object
		// back with its real owners.
		err := r.Delete(ctx, m.GetNamespace(), m.GetName(), client.DeleteOptions{UID: m.GetUid(), ResourceVersion: m.GetResourceVersion(), PropagationPolicy: "Background"})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete %s %s/%s: %w", r.Kind(), m.GetNamespace(), m.GetName(), err)
		}
		return nil
	default:
		return c.dropOwners(ctx, r, obj, gone)
	}
}

// dropOwners removes the ownerReferences with the given uids from obj.
func (c *Controller) dropOwners(ctx context.Context, r ctrl.Resource, obj ctrl.Object, uids []string) error {
	u := proto.Clone(obj.(proto.Message)).(ctrl.Object)
	m := u.GetMetadata()
	out := m.OwnerReferences[:0]
	for _, ref := range m.OwnerReferences {
		drop := false
		for _, uid := range uids {
			drop = drop || ref.GetUid() == uid
		}
		if !drop {
			out = append(out, ref)
		}
	}
	m.OwnerReferences = out
	err := r.Update(ctx, u)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove owner references from %s %s/%s: %w", r.Kind(), m.GetNamespace(), m.GetName(), err)
	}
	return nil
}

// dependents are the objects (any resource) with an ownerReference to uid.
func (c *Controller) dependents(uid string) []struct {
	r ctrl.Resource
	o ctrl.Object
} {
	var out []struct {
		r ctrl.Resource
		o ctrl.Object
	}
	for _, r := range c.resources() {
		for _, o := range r.Dependents(uid) {
			out = append(out, struct {
				r ctrl.Resource
				o ctrl.Object
			}{r, o})
		}
	}
	return out
}

func (c *Controller) removeFinalizer(ctx context.Context, r ctrl.Resource, obj ctrl.Object, f string) error {
	u := proto.Clone(obj.(proto.Message)).(ctrl.Object)
	ctrl.RemoveFinalizer(u.GetMetadata(), f)
	err := r.Update(ctx, u)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer %s from %s %s: %w", f, r.Kind(), client.KeyOf(obj.GetMetadata().GetNamespace(), obj.GetMetadata().GetName()), err)
	}
	return nil
}

// orphanDependents removes owner's reference from its dependents, then
// the orphan finalizer from owner.
func (c *Controller) orphanDependents(ctx context.Context, r ctrl.Resource, owner ctrl.Object) error {
	uid := owner.GetMetadata().GetUid()
	var errs []error
	for _, d := range c.dependents(uid) {
		if err := c.dropOwners(ctx, d.r, d.o, []string{uid}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.removeFinalizer(ctx, r, owner, OrphanFinalizer)
}

// deleteDependents deletes owner's dependents and, once none that blocks
// owner deletion is left, removes the foregroundDeletion finalizer.
func (c *Controller) deleteDependents(ctx context.Context, r ctrl.Resource, owner ctrl.Object) error {
	uid := owner.GetMetadata().GetUid()
	blocking := 0
	var errs []error
	for _, d := range c.dependents(uid) {
		m := d.o.GetMetadata()
		if m.GetDeletionTimestamp() == nil {
			// A dependent another owner still holds is not deleted: it
			// only loses its reference to this one, as Kubernetes'
			// collector keeps an object with a solid owner.
			solid, err := c.hasSolidOwner(ctx, d.o, uid)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if solid {
				if err := c.dropOwners(ctx, d.r, d.o, []string{uid}); err != nil {
					errs = append(errs, err)
				}
				continue
			}
		}
		if deletingDependents(d.o) && c.hasDependentDeletingDependents(m.GetUid()) {
			// A cycle, as Kubernetes' collector detects it: the dependent
			// waits for dependents of its own that are themselves waiting
			// for theirs. Its references stop blocking their owners, so
			// the owners can go and the circle unwinds.
			if err := c.unblockOwners(ctx, d.r, d.o); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		for _, ref := range m.GetOwnerReferences() {
			if ref.GetUid() == uid && ref.GetBlockOwnerDeletion() {
				blocking++
			}
		}
		if m.GetDeletionTimestamp() != nil {
			continue
		}
		err := d.r.Delete(ctx, m.GetNamespace(), m.GetName(), client.DeleteOptions{UID: m.GetUid(), PropagationPolicy: "Foreground"})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("delete dependent %s %s/%s: %w", d.r.Kind(), m.GetNamespace(), m.GetName(), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if blocking > 0 {
		return nil // their deletion events bring the owner back
	}
	return c.removeFinalizer(ctx, r, owner, ForegroundFinalizer)
}

// deletingDependents reports whether o is being deleted in the foreground
// (waiting for its dependents).
func deletingDependents(o ctrl.Object) bool {
	m := o.GetMetadata()
	return m.GetDeletionTimestamp() != nil && ctrl.HasFinalizer(m, ForegroundFinalizer)
}

// hasDependentDeletingDependents reports whether an object owned by uid is
// itself being deleted in the foreground.
func (c *Controller) hasDependentDeletingDependents(uid string) bool {
	for _, d := range c.dependents(uid) {
		if deletingDependents(d.o) {
			return true
		}
	}
	return false
}

// unblockOwners makes every ownerReference of obj non-blocking.
func (c *Controller) unblockOwners(ctx context.Context, r ctrl.Resource, obj ctrl.Object) error {
	u := proto.Clone(obj.(proto.Message)).(ctrl.Object)
	changed := false
	for _, ref := range u.GetMetadata().GetOwnerReferences() {
		if ref.GetBlockOwnerDeletion() {
			f := false
			ref.BlockOwnerDeletion = &f
			changed = true
		}
	}
	if !changed {
		return nil
	}
	err := r.Update(ctx, u)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("unblock the owners of %s %s: %w", r.Kind(), client.KeyOf(obj.GetMetadata().GetNamespace(), obj.GetMetadata().GetName()), err)
	}
	return nil
}

// hasSolidOwner reports whether obj has an owner other than except that
// exists and is not itself being deleted in the foreground.
func (c *Controller) hasSolidOwner(ctx context.Context, obj ctrl.Object, except string) (bool, error) {
	m := obj.GetMetadata()
	for _, ref := range m.GetOwnerReferences() {
		if ref.GetUid() == except {
			continue
		}
		st, err := c.owner(ctx, m.GetNamespace(), ref)
		if err != nil {
			return false, err
		}
		if st != ownerPresent {
			continue
		}
		if or, ok := c.resource(resourceID(ref.GetKind(), ref.GetApiVersion())); ok {
			if o, ok := or.CachedByUID(ref.GetUid()); ok && deletingDependents(o) {
				continue
			}
		}
		return true, nil
	}
	return false, nil
}
