// This file holds the metadata-only Resource of a built-in kind: its
// objects listed and watched through the typed client and cached as their
// metadata alone, for kinds the garbage collector follows that no
// controller keeps an informer of (ConfigMaps, Secrets, Services...).

package ctrl

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	"github.com/kplane/kplane/services/client"
)

// NewMetadataResource returns the metadata-only Resource of T (of
// apiVersion) over conn; run it with Run.
func NewMetadataResource[T interface {
	proto.Message
	Object
}](conn grpc.ClientConnInterface, apiVersion string, log *slog.Logger) *MetaResource {
	c := client.Must[T](conn)
	be := &typedBackend[T]{c: c, lw: client.ListWatch(c, "", "", "", 500), apiVersion: apiVersion}
	return newMetaResource(c.Kind(), apiVersion, be, log)
}

// typedBackend reads and writes a built-in kind through its typed client.
type typedBackend[T interface {
	proto.Message
	Object
}] struct {
	c          *client.Client[T]
	lw         client.ListerWatcher[T]
	apiVersion string
}

// meta is o's metadata as a cached object (the rest of o is not kept).
func (b *typedBackend[T]) meta(o T) *dynamicv1.Object {
	return &dynamicv1.Object{ApiVersion: b.apiVersion, Kind: b.c.Kind(), Metadata: o.GetMetadata()}
}

func (b *typedBackend[T]) List(ctx context.Context) ([]*dynamicv1.Object, string, error) {
	items, rv, err := b.lw.List(ctx)
	if err != nil {
		return nil, "", err
	}
	out := make([]*dynamicv1.Object, len(items))
	for i, o := range items {
		out[i] = b.meta(o)
	}
	return out, rv, nil
}

func (b *typedBackend[T]) Watch(ctx context.Context, rv string) (client.Watch[*dynamicv1.Object], error) {
	w, err := b.lw.Watch(ctx, rv)
	if err != nil {
		return nil, err
	}
	return &typedMetaWatch[T]{w: w, b: b}, nil
}

type typedMetaWatch[T interface {
	proto.Message
	Object
}] struct {
	w client.Watch[T]
	b *typedBackend[T]
}

func (w *typedMetaWatch[T]) Next() (client.Event[*dynamicv1.Object], error) {
	ev, err := w.w.Next()
	if err != nil {
		return client.Event[*dynamicv1.Object]{}, err
	}
	return client.Event[*dynamicv1.Object]{Type: ev.Type, Object: w.b.meta(ev.Object), Err: ev.Err}, nil
}

func (w *typedMetaWatch[T]) Close() { w.w.Close() }

func (b *typedBackend[T]) get(ctx context.Context, ns, name string) (*dynamicv1.Object, error) {
	o, err := b.c.Get(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return b.meta(o), nil
}

// update puts obj's owner references and finalizers on the live object and
// writes it with obj's resourceVersion.
func (b *typedBackend[T]) update(ctx context.Context, obj Object) error {
	m := obj.GetMetadata()
	live, err := b.c.Get(ctx, m.GetNamespace(), m.GetName())
	if err != nil {
		return err
	}
	lm := live.GetMetadata()
	lm.OwnerReferences, lm.Finalizers, lm.ResourceVersion = m.GetOwnerReferences(), m.GetFinalizers(), m.GetResourceVersion()
	_, err = b.c.Update(ctx, live)
	return err
}

func (b *typedBackend[T]) delete(ctx context.Context, ns, name string, opts client.DeleteOptions) error {
	return b.c.Delete(ctx, ns, name, opts)
}
