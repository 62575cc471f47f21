// Package serviceaccount is the ServiceAccount controller, as Kubernetes'
// serviceaccounts-controller is: every Active namespace has a "default"
// ServiceAccount, created when the namespace appears and again whenever it
// is deleted; a Terminating namespace gets none (its content is being
// removed).
package serviceaccount

import (
	"context"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// Default is the name of the ServiceAccount every namespace gets.
const Default = "default"

// ServiceAccountClient creates ServiceAccounts
// (*client.Client[*corev1.ServiceAccount]).
type ServiceAccountClient interface {
	Create(ctx context.Context, obj *corev1.ServiceAccount) (*corev1.ServiceAccount, error)
}

// Config wires a Controller; New adds handlers to the informers.
type Config struct {
	ServiceAccounts        ServiceAccountClient
	NamespaceInformer      *client.Informer[*corev1.Namespace]
	ServiceAccountInformer *client.Informer[*corev1.ServiceAccount]
	Logger                 *slog.Logger
	// TracerProvider records a span per reconcile (client.Trace); nil
	// uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the ServiceAccount controller. Its queue holds namespace
// names.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
}

// New returns a controller and registers its handlers: a namespace added
// or updated (it may have become Active) and a ServiceAccount deleted
// bring the namespace to the queue.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "serviceaccount"), queue: client.NewQueue("serviceaccount", 0, 0)}
	cfg.NamespaceInformer.AddEventHandler(client.Handler[*corev1.Namespace]{
		OnAdd:    func(n *corev1.Namespace) { c.queue.Add(n.GetMetadata().GetName()) },
		OnUpdate: func(_, n *corev1.Namespace) { c.queue.Add(n.GetMetadata().GetName()) },
	})
	cfg.ServiceAccountInformer.AddEventHandler(client.Handler[*corev1.ServiceAccount]{
		OnDelete: func(sa *corev1.ServiceAccount) { c.queue.Add(sa.GetMetadata().GetNamespace()) },
	})
	return c
}

// Run waits for the caches, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.NamespaceInformer, c.cfg.ServiceAccountInformer) {
		return
	}
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "serviceaccount.reconcile",
		Annotations: client.StoreAnnotations(c.cfg.NamespaceInformer.Store())}
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
}

// Reconcile creates the default ServiceAccount of the namespace named ns
// if the namespace is Active and the ServiceAccount is missing.
func (c *Controller) Reconcile(ctx context.Context, ns string) (client.Result, error) {
	n, ok := c.cfg.NamespaceInformer.Store().Get(ns)
	if !ok || !active(n) {
		return client.Result{}, nil
	}
	if _, ok := c.cfg.ServiceAccountInformer.Store().GetByName(ns, Default); ok {
		return client.Result{}, nil
	}
	sa := &corev1.ServiceAccount{ApiVersion: "v1", Kind: "ServiceAccount", Metadata: &metav1.ObjectMeta{Namespace: ns, Name: Default}}
	_, err := c.cfg.ServiceAccounts.Create(ctx, sa)
	switch {
	case err == nil:
		c.log.DebugContext(ctx, "created the default ServiceAccount", "namespace", ns)
		return client.Result{}, nil
	case apierrors.IsAlreadyExists(err):
		return client.Result{}, nil
	case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
		// The namespace started terminating or went away since the
		// cache saw it (Kubernetes' controller lets this pass too); its
		// update or deletion comes through the informer.
		if cur, ok := c.cfg.NamespaceInformer.Store().Get(ns); !ok || !active(cur) {
			return client.Result{}, nil
		}
		return client.Result{}, fmt.Errorf("serviceaccount %s/%s: create: %w", ns, Default, err)
	default:
		return client.Result{}, fmt.Errorf("serviceaccount %s/%s: create: %w", ns, Default, err)
	}
}

// active reports whether n takes new content: phase Active and not being
// deleted.
func active(n *corev1.Namespace) bool {
	return n.GetMetadata().GetDeletionTimestamp() == nil && n.GetStatus().GetPhase() == "Active"
}
