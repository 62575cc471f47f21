// This file holds the registry of the custom resources the service serves:
// kept in step with the CustomResourceDefinitions through the service's own
// watch of them, it adds a resource (and starts its watch cache) when a
// CRD's names are accepted, and removes it (stopping the cache) when the
// CRD goes.
package apiserver

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	kubeapiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"

	"github.com/kplane/kplane/proto/apierrors"
	apiextensionsv1 "github.com/kplane/kplane/proto/kplane/apiextensions/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
)

// customResource is what a resourceInfo of a custom resource holds beyond
// the built-ins' fields.
type customResource struct {
	// crd is the CRD's name (<plural>.<group>).
	crd      string
	listKind string
	// schema is the served version's; swapped whole when the CRD's schema
	// changes (readers Load it once per request).
	schema atomic.Pointer[crSchema]
	// terminating is set once the CRD is being deleted: reads and deletes
	// go on, creates are refused.
	terminating atomic.Bool
	// cleaning is set while the objects of a deleted CRD are being
	// deleted (deleteCustomObjects).
	cleaning atomic.Bool
	cacher   *cacher
	// stop ends the cacher's run.
	stop context.CancelFunc
}

// crKey identifies a custom resource: group and plural.
type crKey struct{ group, resource string }

// crRegistry is the set of custom resources served. Lookups are safe from
// any goroutine; changes come from the CRD feed only.
type crRegistry struct {
	log *slog.Logger
	// convs builds the converters of CRDs converting by webhook.
	convs *conversion.CRConverterFactory
	mu    sync.RWMutex
	// byResource maps group and plural to the resource.
	byResource map[crKey]*resourceInfo
}

func newCRRegistry(log *slog.Logger, convs *conversion.CRConverterFactory) *crRegistry {
	return &crRegistry{log: log, convs: convs, byResource: map[crKey]*resourceInfo{}}
}

// lookup returns the custom resource served as group and plural, or nil.
func (g *crRegistry) lookup(group, resource string) *resourceInfo {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.byResource[crKey{group, resource}]
}

// all returns every custom resource served, by group and plural.
func (g *crRegistry) all() []*resourceInfo {
	g.mu.RLock()
	out := make([]*resourceInfo, 0, len(g.byResource))
	for _, r := range g.byResource {
		out = append(out, r)
	}
	g.mu.RUnlock()
	slices.SortFunc(out, func(a, b *resourceInfo) int {
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Resource, b.Resource))
	})
	return out
}

// crdSink applies the CRD feed to the registry. start runs a new cacher
// until its context ends; it belongs to the feed's run, whose end stops
// every cacher.
type crdSink struct {
	g     *crRegistry
	start func(c *cacher) context.CancelFunc
	newC  func(r *resourceInfo) *cacher
	// cleanup deletes every object of r, whose CRD is being deleted, in
	// the background, then clears r.custom.cleaning.
	cleanup func(r *resourceInfo)
}

var _ ObjectSink = (*crdSink)(nil)

// Upsert serves the CRD's resource when its names are accepted (or it is
// Established), as kube-apiserver's CRD handler does; a CRD that is not
// (yet) is not served. A change of anything that identifies the resource
// (names, scope, served version, status subresource) replaces it and its
// cache; a change of schema alone swaps the schema.
func (k *crdSink) Upsert(o any) {
	crd, ok := o.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return
	}
	if !crdServable(crd) {
		k.remove(crd.GetMetadata().GetName())
		return
	}
	kube, err := crdToKube(crd)
	if err != nil {
		k.g.log.Error("custom resource not served: its CRD does not convert", "crd", crd.GetMetadata().GetName(), "err", err)
		k.remove(crd.GetMetadata().GetName())
		return
	}
	next := resourceFromCRD(kube)
	if next == nil {
		k.remove(kube.Name)
		return
	}
	sch, err := newServedSchemas(kube, next.Version, k.g.convs)
	if err != nil {
		k.g.log.Error("custom resource not served", "crd", kube.Name, "err", err)
		k.remove(kube.Name)
		return
	}
	key := crKey{next.Group, next.Resource}
	k.g.mu.RLock()
	cur := k.g.byResource[key]
	k.g.mu.RUnlock()
	if cur != nil && cur.custom.crd == kube.Name && sameIdentity(cur, next) {
		cur.custom.schema.Store(sch)
		cur.custom.terminating.Store(kube.DeletionTimestamp != nil)
		k.cleanupIfDeleted(kube, cur)
		return
	}
	k.remove(kube.Name)
	if cur != nil && cur.custom.crd != kube.Name {
		// Another CRD holds these names (the controller refuses the
		// second one's names, so this does not last).
		return
	}
	next.custom.schema.Store(sch)
	next.custom.terminating.Store(kube.DeletionTimestamp != nil)
	next.custom.cacher = k.newC(next)
	// The cache starts where the CRD became servable: a client that
	// created an object through another replica meanwhile, and watches
	// from its resourceVersion here, finds it in the window.
	next.custom.cacher.firstListAt, _ = parseRV(crd.GetMetadata().GetResourceVersion())
	next.custom.stop = k.start(next.custom.cacher)
	k.g.mu.Lock()
	k.g.byResource[key] = next
	k.g.mu.Unlock()
	k.g.log.Info("serving custom resource", "crd", kube.Name, "version", next.Version)
	k.cleanupIfDeleted(kube, next)
}

// cleanupIfDeleted starts deleting r's objects when its CRD, once
// Established, is being deleted, unless that is under way. As in
// kube-apiserver, whose CRD finalizer deletes them from inside the API
// server, the service deletes them itself (the crd controller, which may
// not delete arbitrary resources, waits until none is left, then removes
// the CRD's finalizer). Every update of the deleted CRD starts another
// round once the last has finished, so objects whose finalizers are
// removed later go too.
func (k *crdSink) cleanupIfDeleted(crd *kubeapiextv1.CustomResourceDefinition, r *resourceInfo) {
	if crd.DeletionTimestamp == nil || !slices.Contains(crd.Finalizers, crdCleanupFinalizer) {
		return
	}
	established := false
	for _, c := range crd.Status.Conditions {
		established = established || (c.Type == kubeapiextv1.Established && c.Status == kubeapiextv1.ConditionTrue)
	}
	if established && r.custom.cleaning.CompareAndSwap(false, true) {
		k.cleanup(r)
	}
}

// Delete stops serving the CRD's resource.
func (k *crdSink) Delete(o any) {
	if crd, ok := o.(*apiextensionsv1.CustomResourceDefinition); ok {
		k.remove(crd.GetMetadata().GetName())
	}
}

// remove stops serving the resource of CRD name, if served.
func (k *crdSink) remove(name string) {
	k.g.mu.Lock()
	var gone *resourceInfo
	for key, r := range k.g.byResource {
		if r.custom.crd == name {
			gone = r
			delete(k.g.byResource, key)
		}
	}
	k.g.mu.Unlock()
	if gone != nil {
		gone.custom.stop()
		k.g.log.Info("custom resource no longer served", "crd", name)
	}
}

// crdServable reports whether a CRD's resource is served: its names are
// accepted or it is Established.
func crdServable(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.GetStatus().GetConditions() {
		if (c.GetType() == "NamesAccepted" || c.GetType() == "Established") && c.GetStatus() == "True" {
			return true
		}
	}
	return false
}

// resourceFromCRD is the resourceInfo of a CRD's resource at its storage
// version; nil if it has none. HasStatus and HasScale say whether any
// version has the subresource; whether the request's version does is
// crversion.go's. Its other served versions are served through
// it (crSchema.served): the same objects with their apiVersion rewritten,
// as Kubernetes' conversion strategy None does.
func resourceFromCRD(crd *kubeapiextv1.CustomResourceDefinition) *resourceInfo {
	var version string
	var hasStatus, hasScale bool
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			version = v.Name
		}
		// Each version has subresources of its own (crversion.go); the
		// object keeps its status apart when any version has the status
		// subresource.
		if v.Subresources != nil {
			hasStatus = hasStatus || v.Subresources.Status != nil
			hasScale = hasScale || v.Subresources.Scale != nil
		}
	}
	if version == "" {
		return nil
	}
	return &resourceInfo{
		Group: crd.Spec.Group, Version: version, Kind: crd.Spec.Names.Kind, Resource: crd.Spec.Names.Plural,
		Namespaced: crd.Spec.Scope == kubeapiextv1.NamespaceScoped, HasStatus: hasStatus, HasScale: hasScale,
		// As Kubernetes' custom resource strategy, an update needs a
		// resourceVersion (AllowUnconditionalUpdate false).
		New:    func() proto.Message { return &dynamicv1.Object{} },
		custom: &customResource{crd: crd.Name, listKind: crd.Spec.Names.ListKind},
	}
}

// sameIdentity reports whether a and b are served the same way, so that
// a's cache can go on serving b.
func sameIdentity(a, b *resourceInfo) bool {
	return a.Group == b.Group && a.Version == b.Version && a.Kind == b.Kind && a.Resource == b.Resource &&
		a.Namespaced == b.Namespaced && a.HasStatus == b.HasStatus && a.HasScale == b.HasScale && a.custom.listKind == b.custom.listKind
}

// deleteCustomObjects deletes every object of r in namespace ns (""
// every namespace) — a custom resource whose CRD is being deleted, or the
// custom objects of a namespace being deleted — as the service's own
// request: no authorization or
// admission, as kube-apiserver's CRD finalizer deletes them. Objects that
// finalizers hold are marked and go once their finalizers are removed.
func (s *Server) deleteCustomObjects(ctx context.Context, r *resourceInfo, ns string) {
	page, err := s.store.list(ctx, r, ns, 0, "", 0, nil)
	if err != nil {
		s.log.Warn("listing a deleted CRD's custom objects failed; the next update of the CRD tries again", "resource", r.Group+"/"+r.Resource, "err", err)
		return
	}
	for _, obj := range page.items {
		m := meta(obj)
		if m.GetDeletionTimestamp() != nil {
			continue // already being deleted
		}
		c := s.begin(ctx, "delete", r, "", m.GetNamespace(), m.GetName())
		_, err := s.deleteObject(ctx, c, r, m.GetNamespace(), m.GetName(), deleteOptions{}, false, false)
		s.end(ctx, c, err)
		if err != nil && !apierrors.IsNotFound(err) {
			s.log.Warn("deleting a deleted CRD's custom object failed; the next update of the CRD tries again", "resource", r.Group+"/"+r.Resource,
				"object", m.GetNamespace()+"/"+m.GetName(), "err", err)
		}
	}
}

// nsCleanupSink deletes the custom objects of a namespace being deleted,
// as the service's own requests: the Namespace controller, which may not
// delete arbitrary resources, counts them and finalizes the namespace once
// they are gone (Kubernetes' namespace controller deletes them itself).
// Every update of the namespace starts another round for a resource whose
// last one has finished.
type nsCleanupSink struct {
	crs *crRegistry
	// start runs f in the background unless a run under key is going on.
	start func(key string, f func(ctx context.Context))
	del   func(ctx context.Context, r *resourceInfo, ns string)
}

var _ ObjectSink = (*nsCleanupSink)(nil)

// Upsert starts the deletions for a namespace being deleted.
func (k *nsCleanupSink) Upsert(o any) {
	ns, ok := o.(*corev1.Namespace)
	if !ok || ns.GetMetadata().GetDeletionTimestamp() == nil {
		return
	}
	name := ns.GetMetadata().GetName()
	for _, r := range k.crs.all() {
		if r.Namespaced {
			k.start(r.Group+"/"+r.Resource+"/"+name, func(ctx context.Context) { k.del(ctx, r, name) })
		}
	}
}

// Delete does nothing: a namespace that is gone has no objects left.
func (k *nsCleanupSink) Delete(any) {}
