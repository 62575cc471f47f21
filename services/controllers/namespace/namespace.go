// Package namespace is the Namespace controller, as Kubernetes' is: when a
// namespace is deleted the API service keeps it, Terminating, while its
// spec.finalizers hold "kubernetes"; this controller deletes everything in
// it, resource by resource, reports progress in the namespace's conditions
// (NamespaceDeletionContentFailure, NamespaceContentRemaining), and once
// nothing is left removes "kubernetes" through namespaces/finalize, after
// which the API service removes the namespace (when no other finalizer
// holds it).
package namespace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// Finalizer is the namespace finalizer this controller owns.
const Finalizer = "kubernetes"

// Deleter deletes every object of one resource in a namespace.
type Deleter interface {
	// Resource names what it deletes ("pods", "replicasets.apps").
	Resource() string
	// DeleteAll deletes what is in namespace and returns how many objects
	// were still there when it listed.
	DeleteAll(ctx context.Context, namespace string) (int, error)
}

// ClientDeleter is a Deleter over a typed client.
type ClientDeleter[T interface {
	proto.Message
	ctrl.Object
}] struct{ C *client.Client[T] }

// Resource implements Deleter.
func (d ClientDeleter[T]) Resource() string { return d.C.Kind() }

// DeleteAll implements Deleter.
func (d ClientDeleter[T]) DeleteAll(ctx context.Context, namespace string) (int, error) {
	items, _, err := d.C.List(ctx, namespace, client.ListOptions{Limit: 500})
	if err != nil {
		return 0, fmt.Errorf("list %s in %s: %w", d.C.Kind(), namespace, err)
	}
	var errs []error
	for _, o := range items {
		m := o.GetMetadata()
		if m.GetDeletionTimestamp() != nil {
			continue
		}
		err := d.C.Delete(ctx, namespace, m.GetName(), client.DeleteOptions{UID: m.GetUid(), PropagationPolicy: "Background"})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("delete %s %s/%s: %w", d.C.Kind(), namespace, m.GetName(), err))
		}
	}
	return len(items), errors.Join(errs...)
}

// NamespaceClient writes namespaces' status and finalize subresources.
type NamespaceClient interface {
	UpdateStatus(ctx context.Context, obj *corev1.Namespace) (*corev1.Namespace, error)
	Finalize(ctx context.Context, obj *corev1.Namespace) (*corev1.Namespace, error)
}

// Config wires a Controller.
type Config struct {
	Namespaces NamespaceClient
	Informer   *client.Informer[*corev1.Namespace]
	Deleters   []Deleter
	// Custom, if set, counts the custom objects left in the namespace
	// (the API service deletes them itself, see CustomResources).
	Custom CustomResources
	// Recheck is how soon a namespace with objects left is looked at
	// again (default 2 s).
	Recheck time.Duration
	Logger  *slog.Logger
	// TracerProvider records a span per reconcile, in the trace of the
	// namespace's deletion (client.Trace); nil uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the Namespace controller.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
}

// New returns a controller and registers its handler.
func New(cfg Config) *Controller {
	if cfg.Recheck <= 0 {
		cfg.Recheck = 2 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "namespace"), queue: client.NewQueue("namespace", 0, 0)}
	enqueue := func(n *corev1.Namespace) {
		if n.GetMetadata().GetDeletionTimestamp() != nil {
			c.queue.Add(client.Key(n))
		}
	}
	cfg.Informer.AddEventHandler(client.Handler[*corev1.Namespace]{
		OnAdd:    enqueue,
		OnUpdate: func(_, n *corev1.Namespace) { enqueue(n) },
	})
	return c
}

// Run waits for the cache, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.Informer) {
		return
	}
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "namespace.reconcile", Annotations: client.StoreAnnotations(c.cfg.Informer.Store())}
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
}

// Condition types and reasons, as Kubernetes' namespace controller sets
// them.
const (
	ContentFailure   = "NamespaceDeletionContentFailure"
	ContentRemaining = "NamespaceContentRemaining"
)

// Reconcile empties the namespace name if it is being deleted, and
// finalizes it once it is empty.
func (c *Controller) Reconcile(ctx context.Context, name string) (client.Result, error) {
	ns, exists := c.cfg.Informer.Store().Get(name)
	if !exists || ns.GetMetadata().GetDeletionTimestamp() == nil {
		return client.Result{}, nil // gone, or live (perhaps recreated): nothing to do
	}
	if !slices.Contains(ns.GetSpec().GetFinalizers(), Finalizer) {
		return client.Result{}, nil // finalized already; other finalizers are not ours
	}
	var remaining []string
	left := 0
	var errs []error
	deleters := c.cfg.Deleters
	if c.cfg.Custom != nil {
		more, err := customDeleters(ctx, c.cfg.Custom)
		if err != nil {
			errs = append(errs, err)
		}
		deleters = append(slices.Clone(deleters), more...)
	}
	for _, d := range deleters {
		n, err := d.DeleteAll(ctx, name)
		if apierrors.IsForbidden(err) {
			// Not ours to delete (RBAC): log, and do not hold the
			// namespace back for it.
			c.log.Warn("cannot empty namespace of a resource", "namespace", name, "resource", d.Resource(), "err", err)
			continue
		}
		if n > 0 {
			remaining = append(remaining, fmt.Sprintf("%s has %d resource instances", d.Resource(), n))
			left += n
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	cur, werr := c.setConditions(ctx, ns, err, remaining)
	if werr != nil {
		return client.Result{}, fmt.Errorf("namespace %s: conditions: %w", name, werr)
	}
	if err != nil {
		return client.Result{}, fmt.Errorf("namespace %s: %w", name, err)
	}
	if left > 0 {
		c.log.Debug("namespace still has objects", "namespace", name, "objects", left)
		return client.Result{RequeueAfter: c.cfg.Recheck}, nil
	}
	u := proto.Clone(cur).(*corev1.Namespace)
	u.Spec.Finalizers = slices.DeleteFunc(u.Spec.Finalizers, func(f string) bool { return f == Finalizer })
	if _, err := c.cfg.Namespaces.Finalize(ctx, u); err != nil && !apierrors.IsNotFound(err) {
		return client.Result{}, fmt.Errorf("namespace %s: finalize: %w", name, err)
	}
	return client.Result{}, nil
}

// setConditions records the deletion's progress in ns's status conditions,
// writing only when they change; it returns the namespace as stored.
func (c *Controller) setConditions(ctx context.Context, ns *corev1.Namespace, failure error, remaining []string) (*corev1.Namespace, error) {
	want := []*corev1.NamespaceCondition{
		{Type: ContentFailure, Status: "False", Reason: "ContentDeleted", Message: "All content successfully deleted, may be waiting on finalization"},
		{Type: ContentRemaining, Status: "False", Reason: "ContentRemoved", Message: "All content successfully removed"},
	}
	if failure != nil {
		want[0].Status, want[0].Reason, want[0].Message = "True", "ContentDeletionFailed", "Failed to delete all resource types: "+failure.Error()
	}
	if len(remaining) > 0 {
		want[1].Status, want[1].Reason, want[1].Message = "True", "SomeResourcesRemain", "Some resources are remaining: "+strings.Join(remaining, ", ")
	}
	u := proto.Clone(ns).(*corev1.Namespace)
	if u.Status == nil {
		u.Status = &corev1.NamespaceStatus{}
	}
	changed := false
	for _, w := range want {
		i := slices.IndexFunc(u.Status.Conditions, func(c *corev1.NamespaceCondition) bool { return c.GetType() == w.GetType() })
		switch {
		case i < 0:
			w.LastTransitionTime = timestamppb.Now()
			u.Status.Conditions = append(u.Status.Conditions, w)
			changed = true
		case u.Status.Conditions[i].GetStatus() != w.GetStatus() || u.Status.Conditions[i].GetReason() != w.GetReason() || u.Status.Conditions[i].GetMessage() != w.GetMessage():
			w.LastTransitionTime = u.Status.Conditions[i].GetLastTransitionTime()
			if u.Status.Conditions[i].GetStatus() != w.GetStatus() {
				w.LastTransitionTime = timestamppb.Now()
			}
			u.Status.Conditions[i] = w
			changed = true
		}
	}
	if !changed {
		return ns, nil
	}
	return c.cfg.Namespaces.UpdateStatus(ctx, u)
}
