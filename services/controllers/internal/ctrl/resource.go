// This file holds the type-erased view of every namespaced resource the
// garbage collector and the namespace controller handle: one shared informer
// per resource with owner and namespace indexes, and its client.

package ctrl

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/services/client"
)

// Index names every shared informer keeps (see Indexers).
const (
	UIDIndex   = "uid"
	OwnerIndex = "owner-uid"
)

// Indexers are the indexes the garbage collector needs on every informer:
// by uid and by the uids of the owners.
func Indexers[T interface {
	proto.Message
	Object
}]() map[string]client.IndexFunc[T] {
	return map[string]client.IndexFunc[T]{
		UIDIndex: func(o T) []string { return []string{o.GetMetadata().GetUid()} },
		OwnerIndex: func(o T) []string {
			var out []string
			for _, r := range o.GetMetadata().GetOwnerReferences() {
				out = append(out, r.GetUid())
			}
			return out
		},
	}
}

// Resource is one namespaced resource seen through a shared informer with
// Indexers, type-erased for controllers that handle every resource (the
// garbage collector, the namespace controller).
type Resource interface {
	Kind() string
	APIVersion() string
	Informer() client.Syncer
	// Cached returns the cached object with key (namespace/name); do not modify it.
	Cached(key string) (Object, bool)
	CachedByUID(uid string) (Object, bool)
	Dependents(ownerUID string) []Object
	InNamespace(ns string) []Object
	// All returns every cached object.
	All() []Object
	Get(ctx context.Context, namespace, name string) (Object, error)
	Update(ctx context.Context, obj Object) error
	Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error
	// OnChange registers fn for every add, update and delete (the object
	// after the change, or the last state seen before a delete).
	OnChange(fn func(obj Object, deleted bool))
}

// TypedResource implements Resource over a Client and an Informer of T.
type TypedResource[T interface {
	proto.Message
	Object
}] struct {
	Client  *client.Client[T]
	Inf     *client.Informer[T]
	Version string // apiVersion, e.g. apps/v1
}

// NewResource returns the Resource of T over conn and inf (built with Indexers).
func NewResource[T interface {
	proto.Message
	Object
}](conn grpc.ClientConnInterface, apiVersion string, inf *client.Informer[T]) *TypedResource[T] {
	return &TypedResource[T]{Client: client.Must[T](conn), Inf: inf, Version: apiVersion}
}

func (r *TypedResource[T]) Kind() string            { return r.Client.Kind() }
func (r *TypedResource[T]) APIVersion() string      { return r.Version }
func (r *TypedResource[T]) Informer() client.Syncer { return r.Inf }

func (r *TypedResource[T]) Cached(key string) (Object, bool) {
	o, ok := r.Inf.Store().Get(key)
	if !ok {
		return nil, false
	}
	return o, true
}

func (r *TypedResource[T]) CachedByUID(uid string) (Object, bool) {
	l, _ := r.Inf.Store().ByIndex(UIDIndex, uid)
	if len(l) == 0 {
		return nil, false
	}
	return l[0], true
}

func (r *TypedResource[T]) Dependents(ownerUID string) []Object {
	l, _ := r.Inf.Store().ByIndex(OwnerIndex, ownerUID)
	out := make([]Object, len(l))
	for i, o := range l {
		out[i] = o
	}
	return out
}

func (r *TypedResource[T]) InNamespace(ns string) []Object {
	l := r.Inf.Store().ByNamespace(ns)
	out := make([]Object, len(l))
	for i, o := range l {
		out[i] = o
	}
	return out
}

func (r *TypedResource[T]) All() []Object {
	l := r.Inf.Store().List()
	out := make([]Object, len(l))
	for i, o := range l {
		out[i] = o
	}
	return out
}

func (r *TypedResource[T]) Get(ctx context.Context, namespace, name string) (Object, error) {
	o, err := r.Client.Get(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return o, nil
}

func (r *TypedResource[T]) Update(ctx context.Context, obj Object) error {
	_, err := r.Client.Update(ctx, obj.(T))
	return err
}

func (r *TypedResource[T]) Delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error {
	return r.Client.Delete(ctx, namespace, name, opts)
}

func (r *TypedResource[T]) OnChange(fn func(obj Object, deleted bool)) {
	r.Inf.AddEventHandler(client.Handler[T]{
		OnAdd:    func(o T) { fn(o, false) },
		OnUpdate: func(_, o T) { fn(o, false) },
		OnDelete: func(o T) { fn(o, true) },
	})
}
