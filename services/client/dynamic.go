// This file holds the dynamic client: any resource, built-in or custom,
// through the API service's generic ResourceService, its objects as
// apimachinery's Unstructured; and the ListerWatcher that lets an Informer
// follow such a resource (objects as dynamicv1.Object, whole or metadata
// only).

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kplane/kplane/proto/apierrors"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/proto/kubejson"
)

// Dynamic is a client of any resource by group, version and resource.
// Errors are *apierrors.StatusError. Safe for concurrent use.
type Dynamic struct {
	c dynamicv1.ResourceServiceClient
}

// NewDynamic returns a dynamic client over conn.
func NewDynamic(conn grpc.ClientConnInterface) *Dynamic {
	return &Dynamic{c: dynamicv1.NewResourceServiceClient(conn)}
}

// NewDynamicFrom returns a dynamic client over a ResourceService client.
func NewDynamicFrom(c dynamicv1.ResourceServiceClient) *Dynamic { return &Dynamic{c: c} }

func target(gvr schema.GroupVersionResource, ns, name string) *dynamicv1.Target {
	return &dynamicv1.Target{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, Namespace: ns, Name: name}
}

// statusError is err as an *apierrors.StatusError, nil for nil.
func statusError(err error) error {
	if err == nil {
		return nil
	}
	return apierrors.FromError(err)
}

func unstructuredOf(doc []byte) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(doc); err != nil {
		return nil, fmt.Errorf("client: object: %w", err)
	}
	return u, nil
}

// Get returns ns/name of gvr (ns "" for a cluster-scoped resource).
func (d *Dynamic) Get(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	resp, err := d.c.Get(ctx, &dynamicv1.GetRequest{Target: target(gvr, ns, name)})
	if err != nil {
		return nil, statusError(err)
	}
	return unstructuredOf(resp.GetObject())
}

// List lists gvr in ns ("" for all), following every page unless
// opts.Limit and opts.Continue ask for one.
func (d *Dynamic) List(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts ListOptions) (*unstructured.UnstructuredList, error) {
	out := &unstructured.UnstructuredList{}
	cont := opts.Continue
	for page := 0; ; page++ {
		resp, err := d.c.List(ctx, &dynamicv1.ListRequest{Target: target(gvr, ns, ""), LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector,
			ResourceVersion: opts.ResourceVersion, Limit: opts.Limit, Continue: cont})
		if err != nil {
			return nil, statusError(err)
		}
		l := &unstructured.UnstructuredList{}
		if err := l.UnmarshalJSON(resp.GetList()); err != nil {
			return nil, fmt.Errorf("client: list %s: %w", gvr, err)
		}
		if page == 0 {
			out.Object = l.Object
		}
		out.Items = append(out.Items, l.Items...)
		out.SetContinue(l.GetContinue())
		cont = l.GetContinue()
		// One page asked for (a Continue given), or the last page.
		if cont == "" || opts.Continue != "" || opts.Limit == 0 {
			return out, nil
		}
	}
}

// Create creates obj in ns.
func (d *Dynamic) Create(ctx context.Context, gvr schema.GroupVersionResource, ns string, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	b, err := obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	resp, err := d.c.Create(ctx, &dynamicv1.CreateRequest{Target: target(gvr, ns, ""), Object: b})
	if err != nil {
		return nil, statusError(err)
	}
	return unstructuredOf(resp.GetObject())
}

// Update replaces obj (a Conflict when its resourceVersion is not the
// current one).
func (d *Dynamic) Update(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	b, err := obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	resp, err := d.c.Update(ctx, &dynamicv1.UpdateRequest{Target: target(gvr, obj.GetNamespace(), obj.GetName()), Object: b})
	if err != nil {
		return nil, statusError(err)
	}
	return unstructuredOf(resp.GetObject())
}

// UpdateStatus writes obj's status subresource.
func (d *Dynamic) UpdateStatus(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	b, err := obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	resp, err := d.c.UpdateStatus(ctx, &dynamicv1.UpdateStatusRequest{Target: target(gvr, obj.GetNamespace(), obj.GetName()), Object: b})
	if err != nil {
		return nil, statusError(err)
	}
	return unstructuredOf(resp.GetObject())
}

// Delete deletes ns/name.
func (d *Dynamic) Delete(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, opts DeleteOptions) error {
	req := &dynamicv1.DeleteRequest{Target: target(gvr, ns, name), GracePeriodSeconds: opts.GracePeriodSeconds, PropagationPolicy: opts.PropagationPolicy}
	if opts.UID != "" || opts.ResourceVersion != "" {
		req.Preconditions = &metav1.Preconditions{}
		if opts.UID != "" {
			req.Preconditions.Uid = &opts.UID
		}
		if opts.ResourceVersion != "" {
			req.Preconditions.ResourceVersion = &opts.ResourceVersion
		}
	}
	_, err := d.c.Delete(ctx, req)
	return statusError(err)
}

// DynamicWatcher is one open watch of a resource.
type DynamicWatcher struct {
	s      grpc.ServerStreamingClient[dynamicv1.WatchResponse]
	cancel context.CancelFunc
}

// Watch opens a watch of gvr in ns ("" for all).
func (d *Dynamic) Watch(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts ListOptions) (*DynamicWatcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	req := &dynamicv1.WatchRequest{Target: target(gvr, ns, ""), LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector,
		ResourceVersion: opts.ResourceVersion, AllowWatchBookmarks: opts.AllowWatchBookmarks}
	if opts.TimeoutSeconds > 0 {
		req.TimeoutSeconds = &opts.TimeoutSeconds
	}
	s, err := d.c.Watch(ctx, req)
	if err != nil {
		cancel()
		return nil, statusError(err)
	}
	return &DynamicWatcher{s: s, cancel: cancel}, nil
}

// Next blocks for the next event: its type and object as JSON. An ERROR
// event is returned as its error (Expired/Gone means list again); a
// clean end is ErrWatchClosed.
func (w *DynamicWatcher) Next() (EventType, []byte, error) {
	resp, err := w.s.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return "", nil, ErrWatchClosed
		}
		return "", nil, apierrors.FromError(err)
	}
	if resp.GetType() == string(Error) {
		var st struct {
			Code    int32  `json:"code"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(resp.GetObject(), &st)
		return "", nil, &apierrors.StatusError{Code: st.Code, Reason: apierrors.Reason(st.Reason), Message: st.Message}
	}
	return EventType(resp.GetType()), resp.GetObject(), nil
}

// Close ends the watch.
func (w *DynamicWatcher) Close() { w.cancel() }

// DynamicListWatch returns a ListerWatcher of gvr in ns ("" for all) for
// an Informer of dynamicv1.Objects: apiVersion, kind and metadata decoded,
// the whole object's JSON in Content unless metadataOnly (an informer
// that reads only metadata, as Kubernetes' metadata informers, keeps no
// more). Lists are paged by 500.
func DynamicListWatch(d *Dynamic, gvr schema.GroupVersionResource, ns string, metadataOnly bool) ListerWatcher[*dynamicv1.Object] {
	return &dynamicLW{d: d, gvr: gvr, ns: ns, metadataOnly: metadataOnly}
}

type dynamicLW struct {
	d            *Dynamic
	gvr          schema.GroupVersionResource
	ns           string
	metadataOnly bool
}

// DynamicObject reads an object's JSON into a dynamicv1.Object holding
// its apiVersion, kind and metadata, and the JSON itself in Content unless
// metadataOnly.
func DynamicObject(doc []byte, metadataOnly bool) (*dynamicv1.Object, error) {
	var head struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(doc, &head); err != nil {
		return nil, fmt.Errorf("client: object: %w", err)
	}
	m := &metav1.ObjectMeta{}
	if len(head.Metadata) > 0 {
		if err := kubejson.Unmarshal(head.Metadata, m, kubejson.Options{DiscardUnknown: true}); err != nil {
			return nil, fmt.Errorf("client: object metadata: %w", err)
		}
	}
	o := &dynamicv1.Object{ApiVersion: head.APIVersion, Kind: head.Kind, Metadata: m}
	if !metadataOnly {
		o.Content = doc
	}
	return o, nil
}

func (lw *dynamicLW) List(ctx context.Context) ([]*dynamicv1.Object, string, error) {
	var out []*dynamicv1.Object
	var rv, cont string
	for {
		resp, err := lw.d.c.List(ctx, &dynamicv1.ListRequest{Target: target(lw.gvr, lw.ns, ""), Limit: 500, Continue: cont})
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
			return nil, "", fmt.Errorf("client: list %s: %w", lw.gvr, err)
		}
		for _, it := range l.Items {
			o, err := DynamicObject(it, lw.metadataOnly)
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

func (lw *dynamicLW) Watch(ctx context.Context, rv string) (Watch[*dynamicv1.Object], error) {
	w, err := lw.d.Watch(ctx, lw.gvr, lw.ns, ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		return nil, err
	}
	return &dynamicObjectWatch{w: w, metadataOnly: lw.metadataOnly}, nil
}

type dynamicObjectWatch struct {
	w            *DynamicWatcher
	metadataOnly bool
}

func (w *dynamicObjectWatch) Next() (Event[*dynamicv1.Object], error) {
	typ, doc, err := w.w.Next()
	if err != nil {
		return Event[*dynamicv1.Object]{}, err
	}
	o, err := DynamicObject(doc, w.metadataOnly)
	if err != nil {
		return Event[*dynamicv1.Object]{}, err
	}
	return Event[*dynamicv1.Object]{Type: typ, Object: o}, nil
}

func (w *dynamicObjectWatch) Close() { w.w.Close() }
