// This file holds Resources whose cache keeps objects' metadata only (all
// the garbage collector reads of them): custom resources, seen through the
// dynamic client, and built-in kinds the
// collector follows without a shared informer of full objects. Writes put
// an object's owner references and finalizers onto its live copy.

package ctrl

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"k8s.io/apimachinery/pkg/runtime/schema"

	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/client"
)

// MetaResource is a Resource whose cached objects carry metadata only.
type MetaResource struct {
	kind, apiVersion string
	be               metaBackend
	inf              *client.Informer[*dynamicv1.Object]
}

// metaBackend lists, watches, reads and writes a MetaResource's objects.
type metaBackend interface {
	client.ListerWatcher[*dynamicv1.Object]
	get(ctx context.Context, ns, name string) (*dynamicv1.Object, error)
	update(ctx context.Context, obj Object) error
	delete(ctx context.Context, ns, name string, opts client.DeleteOptions) error
}

func newMetaResource(kind, apiVersion string, be metaBackend, log *slog.Logger) *MetaResource {
	r := &MetaResource{kind: kind, apiVersion: apiVersion, be: be}
	r.inf = client.NewInformer[*dynamicv1.Object](be, client.InformerOptions[*dynamicv1.Object]{Logger: log, Indexers: Indexers[*dynamicv1.Object]()})
	return r
}

// NewDynamicResource returns the Resource of the custom resource
// group/version/resource (whose objects are kind) over d; run it with Run.
func NewDynamicResource(d *client.Dynamic, group, version, resource, kind string, namespaced bool, log *slog.Logger) *MetaResource {
	gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
	be := &dynamicBackend{d: d, gvr: gvr, namespaced: namespaced, ListerWatcher: client.DynamicListWatch(d, gvr, "", true)}
	return newMetaResource(kind, group+"/"+version, be, log)
}

// Run runs the informer until ctx ends.
func (r *MetaResource) Run(ctx context.Context) error { return r.inf.Run(ctx) }

func (r *MetaResource) Kind() string            { return r.kind }
func (r *MetaResource) APIVersion() string      { return r.apiVersion }
func (r *MetaResource) Informer() client.Syncer { return r.inf }

func (r *MetaResource) Get(ctx context.Context, namespace, name string) (Object, error) {
	return r.be.get(ctx, namespace, name)
}

// Update writes obj's owner references and finalizers onto the live
// object, with obj's resourceVersion (a Conflict if it changed since).
func (r *MetaResource) Update(ctx context.Context, obj Object) error { return r.be.update(ctx, obj) }

func (r *MetaResource) Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error {
	return r.be.delete(ctx, namespace, name, opts)
}

// dynamicBackend is a custom resource's, over the dynamic client.
type dynamicBackend struct {
	client.ListerWatcher[*dynamicv1.Object]
	d          *client.Dynamic
	gvr        schema.GroupVersionResource
	namespaced bool
}

// ns is the namespace to name an object in (none when cluster-scoped).
func (r *dynamicBackend) ns(ns string) string {
	if !r.namespaced {
		return ""
	}
	return ns
}

func (r *dynamicBackend) get(ctx context.Context, namespace, name string) (*dynamicv1.Object, error) {
	u, err := r.d.Get(ctx, r.gvr, r.ns(namespace), name)
	if err != nil {
		return nil, err
	}
	b, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return client.DynamicObject(b, true)
}

func (r *dynamicBackend) update(ctx context.Context, obj Object) error {
	m := obj.GetMetadata()
	live, err := r.d.Get(ctx, r.gvr, r.ns(m.GetNamespace()), m.GetName())
	if err != nil {
		return err
	}
	mb, err := kubejson.Marshal(m)
	if err != nil {
		return err
	}
	var want map[string]any
	if err := json.Unmarshal(mb, &want); err != nil {
		return err
	}
	lm, _ := live.Object["metadata"].(map[string]any)
	if lm == nil {
		return fmt.Errorf("custom object %s has no metadata", client.KeyOf(m.GetNamespace(), m.GetName()))
	}
	for _, k := range []string{"ownerReferences", "finalizers"} {
		if v, ok := want[k]; ok {
			lm[k] = v
		} else {
			delete(lm, k)
		}
	}
	lm["resourceVersion"] = m.GetResourceVersion()
	_, err = r.d.Update(ctx, r.gvr, live)
	return err
}

func (r *dynamicBackend) delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error {
	return r.d.Delete(ctx, r.gvr, r.ns(namespace), name, opts)
}

func (r *MetaResource) Cached(key string) (Object, bool) {
	o, ok := r.inf.Store().Get(key)
	if !ok {
		return nil, false
	}
	return o, true
}

func (r *MetaResource) CachedByUID(uid string) (Object, bool) {
	l, _ := r.inf.Store().ByIndex(UIDIndex, uid)
	if len(l) == 0 {
		return nil, false
	}
	return l[0], true
}

func (r *MetaResource) Dependents(ownerUID string) []Object {
	l, _ := r.inf.Store().ByIndex(OwnerIndex, ownerUID)
	out := make([]Object, len(l))
	for i, o := range l {
		out[i] = o
	}
	return out
}

func (r *MetaResource) InNamespace(ns string) []Object {
	l := r.inf.Store().ByNamespace(ns)
	out := make([]Object, len(l))
	for i, o := range l {
		out[i] = o
	}
	return out
}

func (r *MetaResource) All() []Object {
	l := r.inf.Store().List()
	out := make([]Object, len(l))
	for i, o := range l {
		out[i] = o
	}
	return out
}

func (r *MetaResource) OnChange(fn func(obj Object, deleted bool)) {
	r.inf.AddEventHandler(client.Handler[*dynamicv1.Object]{
		OnAdd:    func(o *dynamicv1.Object) { fn(o, false) },
		OnUpdate: func(_, o *dynamicv1.Object) { fn(o, false) },
		OnDelete: func(o *dynamicv1.Object) { fn(o, true) },
	})
}
