// This file holds Resources whose cache keeps objects' metadata only (all
// the garbage collector reads of them): custom resources, seen through the
// API service's generic ResourceService, and built-in kinds the
// collector follows without a shared informer of full objects. Writes put
// an object's owner references and finalizers onto its live copy.

package ctrl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"google.golang.org/grpc"

	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
	"github.com/kplane/kplane/services/apiserver/apierrors"
	"github.com/kplane/kplane/services/client"
)

// Dynamic lists, watches and writes custom objects
// (dynamicv1.ResourceServiceClient).
type Dynamic interface {
	Get(ctx context.Context, in *dynamicv1.GetRequest, opts ...grpc.CallOption) (*dynamicv1.GetResponse, error)
	List(ctx context.Context, in *dynamicv1.ListRequest, opts ...grpc.CallOption) (*dynamicv1.ListResponse, error)
	Watch(ctx context.Context, in *dynamicv1.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[dynamicv1.WatchResponse], error)
	Update(ctx context.Context, in *dynamicv1.UpdateRequest, opts ...grpc.CallOption) (*dynamicv1.UpdateResponse, error)
	Delete(ctx context.Context, in *dynamicv1.DeleteRequest, opts ...grpc.CallOption) (*dynamicv1.DeleteResponse, error)
}

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
// group/version/resource (whose objects are kind); run it with Run.
func NewDynamicResource(dyn Dynamic, group, version, resource, kind string, namespaced bool, log *slog.Logger) *MetaResource {
	return newMetaResource(kind, group+"/"+version, &dynamicBackend{dyn: dyn, group: group, version: version, resource: resource, namespaced: namespaced}, log)
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

// dynamicBackend is a custom resource's, over the ResourceService.
type dynamicBackend struct {
	dyn                      Dynamic
	group, version, resource string
	namespaced               bool
}

// target names ns/name of the resource (ns ignored when cluster-scoped).
func (r *dynamicBackend) target(ns, name string) *dynamicv1.Target {
	if !r.namespaced {
		ns = ""
	}
	return &dynamicv1.Target{Group: r.group, Version: r.version, Resource: r.resource, Namespace: ns, Name: name}
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

func (r *dynamicBackend) get(ctx context.Context, namespace, name string) (*dynamicv1.Object, error) {
	resp, err := r.dyn.Get(ctx, &dynamicv1.GetRequest{Target: r.target(namespace, name)})
	if err != nil {
		return nil, statusError(err)
	}
	return metadataOf(resp.GetObject())
}

func (r *dynamicBackend) update(ctx context.Context, obj Object) error {
	m := obj.GetMetadata()
	t := r.target(m.GetNamespace(), m.GetName())
	cur, err := r.dyn.Get(ctx, &dynamicv1.GetRequest{Target: t})
	if err != nil {
		return statusError(err)
	}
	var live map[string]any
	if err := json.Unmarshal(cur.GetObject(), &live); err != nil {
		return fmt.Errorf("custom object %s: %w", client.KeyOf(m.GetNamespace(), m.GetName()), err)
	}
	mb, err := kubejson.Marshal(m)
	if err != nil {
		return err
	}
	var want map[string]any
	if err := json.Unmarshal(mb, &want); err != nil {
		return err
	}
	lm, _ := live["metadata"].(map[string]any)
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
	b, err := json.Marshal(live)
	if err != nil {
		return err
	}
	_, err = r.dyn.Update(ctx, &dynamicv1.UpdateRequest{Target: t, Object: b})
	return statusError(err)
}

func (r *dynamicBackend) delete(ctx context.Context, namespace, name string, opts client.DeleteOptions) error {
	req := &dynamicv1.DeleteRequest{Target: r.target(namespace, name), GracePeriodSeconds: opts.GracePeriodSeconds, PropagationPolicy: opts.PropagationPolicy}
	if opts.UID != "" || opts.ResourceVersion != "" {
		req.Preconditions = &metav1.Preconditions{}
		if opts.UID != "" {
			req.Preconditions.Uid = &opts.UID
		}
		if opts.ResourceVersion != "" {
			req.Preconditions.ResourceVersion = &opts.ResourceVersion
		}
	}
	_, err := r.dyn.Delete(ctx, req)
	return statusError(err)
}

func (r *MetaResource) OnChange(fn func(obj Object, deleted bool)) {
	r.inf.AddEventHandler(client.Handler[*dynamicv1.Object]{
		OnAdd:    func(o *dynamicv1.Object) { fn(o, false) },
		OnUpdate: func(_, o *dynamicv1.Object) { fn(o, false) },
		OnDelete: func(o *dynamicv1.Object) { fn(o, true) },
	})
}

// metadataOf reads a custom object's JSON into an Object holding its
// apiVersion, kind and metadata.
func metadataOf(doc []byte) (*dynamicv1.Object, error) {
	var head struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(doc, &head); err != nil {
		return nil, fmt.Errorf("custom object: %w", err)
	}
	m := &metav1.ObjectMeta{}
	if len(head.Metadata) > 0 {
		if err := kubejson.Unmarshal(head.Metadata, m, kubejson.Options{DiscardUnknown: true}); err != nil {
			return nil, fmt.Errorf("custom object metadata: %w", err)
		}
	}
	return &dynamicv1.Object{ApiVersion: head.APIVersion, Kind: head.Kind, Metadata: m}, nil
}

// List lists the custom resource in every namespace, page by page.
func (r *dynamicBackend) List(ctx context.Context) ([]*dynamicv1.Object, string, error) {
	var out []*dynamicv1.Object
	var rv, cont string
	for {
		resp, err := r.dyn.List(ctx, &dynamicv1.ListRequest{Target: r.target("", ""), Limit: 500, Continue: cont})
		if err != nil {
			return nil, "", statusError(err)
		}
		var l struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
				Continue        string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(resp.GetList(), &l); err != nil {
			return nil, "", fmt.Errorf("list %s.%s: %w", r.resource, r.group, err)
		}
		for _, it := range l.Items {
			o, err := metadataOf(it)
			if err != nil {
				return nil, "", err
			}
			out = append(out, o)
		}
		if rv == "" {
			rv = l.Metadata.ResourceVersion
		}
		if cont = l.Metadata.Continue; cont == "" {
			return out, rv, nil
		}
	}
}

// Watch watches the custom resource in every namespace from rv.
func (r *dynamicBackend) Watch(ctx context.Context, rv string) (client.Watch[*dynamicv1.Object], error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := r.dyn.Watch(ctx, &dynamicv1.WatchRequest{Target: r.target("", ""), ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		cancel()
		return nil, statusError(err)
	}
	return &dynamicWatch{s: s, cancel: cancel}, nil
}

type dynamicWatch struct {
	s      grpc.ServerStreamingClient[dynamicv1.WatchResponse]
	cancel context.CancelFunc
}

func (w *dynamicWatch) Next() (client.Event[*dynamicv1.Object], error) {
	resp, err := w.s.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return client.Event[*dynamicv1.Object]{}, client.ErrWatchClosed
		}
		return client.Event[*dynamicv1.Object]{}, apierrors.FromError(err)
	}
	if resp.GetType() == string(client.Error) {
		var st struct {
			Code    int32  `json:"code"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(resp.GetObject(), &st)
		return client.Event[*dynamicv1.Object]{}, &apierrors.StatusError{Code: st.Code, Reason: apierrors.Reason(st.Reason), Message: st.Message}
	}
	o, err := metadataOf(resp.GetObject())
	if err != nil {
		return client.Event[*dynamicv1.Object]{}, err
	}
	return client.Event[*dynamicv1.Object]{Type: client.EventType(resp.GetType()), Object: o}, nil
}

func (w *dynamicWatch) Close() { w.cancel() }

// statusError is err as an *apierrors.StatusError (so IsNotFound and the
// others apply), nil for nil.
func statusError(err error) error {
	if err == nil {
		return nil
	}
	return apierrors.FromError(err)
}
