// Package namespace is the Namespace controller: when a namespace is
// deleted it deletes everything in it, resource by resource, until nothing
// is left; then, if the namespace is still there (held by finalizers), it
// removes the "kubernetes" finalizer so the namespace goes.
//
// kplane's API service removes a namespace without finalizers at once
// (Kubernetes keeps it Terminating while spec.finalizers holds
// "kubernetes"), so this controller acts on the namespace's delete event as
// well as on a namespace with a deletionTimestamp. A namespace recreated
// under the same name is left alone.
package namespace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/apiserver/apierrors"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
)

// Finalizer is the namespace finalizer this controller owns.
const Finalizer = "kubernetes"

// Deleter deletes every object of one resource in a namespace.
type Deleter interface {
	// DeleteAll deletes what is in namespace and returns how many objects
	// were still there when it listed.
	DeleteAll(ctx context.Context, namespace string) (int, error)
}

// ClientDeleter is a Deleter over a typed client.
type ClientDeleter[T interface {
	proto.Message
	ctrl.Object
}] struct{ C *client.Client[T] }

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

// NamespaceClient writes namespaces.
type NamespaceClient interface {
	Update(ctx context.Context, obj *corev1.Namespace) (*corev1.Namespace, error)
}

// Config wires a Controller.
type Config struct {
	Namespaces NamespaceClient
	Informer   *client.Informer[*corev1.Namespace]
	Deleters   []Deleter
	// Recheck is how soon a namespace with objects left is looked at
	// again (default 2 s).
	Recheck time.Duration
	Logger  *slog.Logger
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
	cfg.Informer.AddEventHandler(client.Handler[*corev1.Namespace]{
		OnUpdate: func(_, n *corev1.Namespace) {
			if n.GetMetadata().GetDeletionTimestamp() != nil {
				c.queue.Add(client.Key(n))
			}
		},
		OnAdd: func(n *corev1.Namespace) {
			if n.GetMetadata().GetDeletionTimestamp() != nil {
				c.queue.Add(client.Key(n))
			}
		},
		OnDelete: func(n *corev1.Namespace) { c.queue.Add(client.Key(n)) },
	})
	return c
}

// Run waits for the cache, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !client.WaitForCacheSync(ctx, c.cfg.Informer) {
		return
	}
	client.RunWorkers(ctx, c.queue, workers, c.Reconcile, c.log)
}

// Reconcile empties the namespace name if it is gone or being deleted.
func (c *Controller) Reconcile(ctx context.Context, name string) error {
	ns, exists := c.cfg.Informer.Store().Get(name)
	if exists && ns.GetMetadata().GetDeletionTimestamp() == nil {
		return nil // live (perhaps recreated): nothing to do
	}
	left := 0
	var errs []error
	for _, d := range c.cfg.Deleters {
		n, err := d.DeleteAll(ctx, name)
		if apierrors.IsForbidden(err) {
			// Not ours to delete (RBAC): log, and do not hold the
			// namespace back for it.
			c.log.Warn("cannot empty namespace of a resource", "namespace", name, "err", err)
			continue
		}
		left += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	if left > 0 {
		c.log.Debug("namespace still has objects", "namespace", name, "objects", left)
		c.queue.AddAfter(name, c.cfg.Recheck)
		return nil
	}
	if !exists {
		return nil
	}
	u := proto.Clone(ns).(*corev1.Namespace)
	changed := false
	if ctrl.HasFinalizer(u.GetMetadata(), Finalizer) {
		ctrl.RemoveFinalizer(u.Metadata, Finalizer)
		changed = true
	}
	if sp := u.GetSpec(); sp != nil {
		out := sp.Finalizers[:0]
		for _, f := range sp.Finalizers {
			if f != Finalizer {
				out = append(out, f)
			}
		}
		changed = changed || len(out) != len(sp.Finalizers)
		sp.Finalizers = out
	}
	if !changed {
		return nil
	}
	if _, err := c.cfg.Namespaces.Update(ctx, u); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("namespace %s: remove finalizer: %w", name, err)
	}
	return nil
}
